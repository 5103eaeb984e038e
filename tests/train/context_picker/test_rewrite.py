"""Query rewrites: the strict numbered format, one retry, and a split that keeps
every rewrite of a question on its question's side (fake HTTP LLM)."""

from __future__ import annotations

import pytest

from ctxsel.datasets.splits import split_ids
from ctxsel.errors import InvalidRewrites
from ctxsel.llm import OpenAICompatClient
from ctxsel.train.context_picker.rewrite import parse_rewrites, rewrite_query, split_records
from tests.support.fake_server import FakeOpenAIServer, completion_reply

Q = "Who wrote Animorphs?"
GOOD = (
    " Which author wrote Animorphs?\n2. Animorphs was written by whom?\n3. Who is the writer of Animorphs?\n"
    "4. Who authored the Animorphs books?\n5. Whose pen produced Animorphs?"
)


def test_parse_five_rewrites():
    out = parse_rewrites(GOOD, Q)
    assert out[0] == "Which author wrote Animorphs?" and len(out) == 5


@pytest.mark.parametrize(
    "reply, message",
    [
        (" A?\n2. B?", "expected 5 numbered lines, got 2"),
        (GOOD + "\n6. One more?", "got 6"),
        (GOOD.replace("3. Who is", "7. Who is"), "line 3 does not start"),
        (GOOD.replace("Whose pen produced Animorphs?", "who  wrote animorphs?"), "repeats the question"),
        (GOOD.replace("Whose pen produced Animorphs?", "Which author wrote Animorphs?"), "repeats"),
        (GOOD.replace("Whose pen produced Animorphs?", "It is a book series."), "not a question"),
        (GOOD.replace(" Which author wrote Animorphs?", ""), "rewrite 1 is empty"),
    ],
)
def test_invalid_rewrites(reply, message):
    with pytest.raises(InvalidRewrites, match=message):
        parse_rewrites(reply, Q)


def test_rewrite_query_retries_once_then_gives_up():
    with FakeOpenAIServer() as server:
        llm = OpenAICompatClient(server.base_url, "m", mode="completions", max_retries=0, sleep=lambda s: None)
        server.push(completion_reply(" A?"), completion_reply(GOOD))
        out = rewrite_query(llm, Q)
        assert len(out["rewrites"]) == 5 and out["calls"] == 2
        assert "previous reply was rejected: expected 5 numbered lines" in server.requests[1].json["prompt"]
        assert server.requests[0].json["stop"] == ["\n\n", "\n6."]
        server.push(completion_reply("prose"), completion_reply("prose"))
        out = rewrite_query(llm, Q)
        assert out["rewrites"] == [] and len(out["errors"]) == 2 and server.calls == 4


def test_all_rewrites_of_a_question_stay_on_its_side_of_the_split():
    recs = [
        {
            "id": f"q{i}",
            "question": f"Q{i}?",
            "kept": True,
            "s_gold": ["a"],
            "rewrites": [f"Q{i} v{j}?" for j in range(5)],
        }
        for i in range(10)
    ]
    recs.append({"id": "dropped", "question": "D?", "kept": False, "s_gold": []})
    train_ids, test_ids = split_ids([f"q{i}" for i in range(10)] + ["dropped"])
    train, test = split_records(recs, set(train_ids)), split_records(recs, set(test_ids))
    train_ids, test_ids = [i for i in train_ids if i != "dropped"], [i for i in test_ids if i != "dropped"]
    assert {r["query_id"] for r in train} == set(train_ids) and {r["query_id"] for r in test} == set(test_ids)
    assert len(train) == 6 * len(train_ids) and len(test) == 6 * len(test_ids)
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert all(r["question"].startswith(r["query_id"].replace("q", "Q")) for r in train + test)
