"""The model's probability of each word as its reply: from an OpenAI-compatible server's logprobs
(a local fake server that sends them), through the response cache, and the rules that read them."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ctxsel.errors import InputError
from ctxsel.llm import CachedClient, OpenAICompatClient, ResponseCache
from ctxsel.llm.base import Completion, gives_word_probs, word_of, word_probabilities
from tests.support.fake_server import FakeOpenAIServer, Reply, chat_reply, completion_reply

WORDS = ("YES", "NO")


def _chat_with_logprobs(positions: list[list[tuple[str, float]]]) -> Reply:
    """A chat reply whose ``logprobs.content`` has one entry per position, its alternatives as given."""
    reply = chat_reply('{"verdict": "YES"}')
    reply.body["choices"][0]["logprobs"] = {
        "content": [
            {
                "token": alts[0][0],
                "logprob": alts[0][1],
                "top_logprobs": [{"token": t, "logprob": lp} for t, lp in alts],
            }
            for alts in positions
        ]
    }
    return reply


def test_a_chat_reply_s_logprobs_give_each_word_s_share_at_the_first_position_that_names_one() -> None:
    positions = [
        [('{"', -0.01), ("{", -4.0)],
        [("verdict", -0.001)],
        [('":', -0.001)],
        [(' "', -0.01)],
        [("YES", -0.2), ("NO", -1.7), ("Y", -5.0), ("maybe", -3.0)],
        [('"}', -0.01)],
    ]
    with FakeOpenAIServer() as server:
        server.push(_chat_with_logprobs(positions))
        client = OpenAICompatClient(server.base_url, "m", api_key="", timeout=5.0)
        got = word_probabilities(client, "Enough?", WORDS, max_tokens=16)
        sent = server.requests[-1].json
    assert got is not None and got.word_probs is not None
    yes, no = math.exp(-0.2) + math.exp(-5.0), math.exp(-1.7)
    assert got.word_probs["YES"] == pytest.approx(yes / (yes + no))
    assert got.word_probs["NO"] == pytest.approx(no / (yes + no))
    assert sent["logprobs"] is True and sent["top_logprobs"] == 20 and "word_probs" not in sent
    assert got.text == '{"verdict": "YES"}'  # the reply itself stays: a fallback for the caller


def test_a_server_that_sends_no_logprobs_gives_none_and_the_reply() -> None:
    with FakeOpenAIServer() as server:
        server.push(chat_reply("NO"))
        got = word_probabilities(OpenAICompatClient(server.base_url, "m", api_key=""), "Enough?", WORDS)
    assert got is not None and got.word_probs is None and got.text == "NO"


def test_a_completions_reply_s_top_logprobs_are_read_too() -> None:
    reply = completion_reply(" NO")
    reply.body["choices"][0]["logprobs"] = {"top_logprobs": [{" NO": -0.1, " YES": -2.5, " N": -4.0}]}
    with FakeOpenAIServer() as server:
        server.push(reply)
        client = OpenAICompatClient(server.base_url, "m", api_key="", mode="completions")
        got = word_probabilities(client, "Enough? Answer:", WORDS)
        assert server.requests[-1].json["logprobs"] == 5
    assert got is not None and got.word_probs is not None
    no, yes = math.exp(-0.1) + math.exp(-4.0), math.exp(-2.5)
    assert got.word_probs == pytest.approx({"YES": yes / (yes + no), "NO": no / (yes + no)})


def test_the_cache_keeps_word_probs(tmp_path: Any) -> None:
    with FakeOpenAIServer() as server:
        server.push(_chat_with_logprobs([[("NO", -0.05), ("YES", -3.0)]]))
        cached = CachedClient(
            OpenAICompatClient(server.base_url, "m", api_key=""), ResponseCache(tmp_path / "c.sqlite")
        )
        first = word_probabilities(cached, "Enough?", WORDS)
        again = word_probabilities(cached, "Enough?", WORDS)
        assert len(server.requests) == 1
    assert first is not None and again is not None and again.cached
    assert again.word_probs == first.word_probs and first.word_probs is not None
    assert first.word_probs["NO"] == pytest.approx(math.exp(-0.05) / (math.exp(-0.05) + math.exp(-3.0)))
    assert Completion.from_dict(first.to_dict()).word_probs == first.word_probs


def test_clients_that_cannot_say_get_none_and_bad_words_are_refused() -> None:
    class Plain:
        model_id = "plain"

        def complete(self, prompt: Any, **kw: Any) -> Completion:
            raise AssertionError("not asked")

    assert not gives_word_probs(Plain()) and word_probabilities(Plain(), "q", WORDS) is None
    with pytest.raises(InputError, match="distinct"):
        word_probabilities(Plain(), "q", ("YES", "YES"))


@pytest.mark.parametrize(
    ("token", "word"),
    [("YES", "YES"), (" yes", "YES"), ('"N', "NO"), ("No", "NO"), ("", None), ("maybe", None), (' "', None)],
)
def test_word_of_reads_a_token_as_the_start_of_one_word(token: str, word: str | None) -> None:
    assert word_of(token, WORDS) == word
    assert word_of("N", ("NO", "NOT")) is None  # a start two words share counts for neither
