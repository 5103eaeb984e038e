"""`ctxsel answer --method sage` against an OpenAI-compatible endpoint (a fake
server on loopback) that answers every prompt with nonsense: SAGE still
answers, and says what failed."""

from __future__ import annotations

import json
from typing import Any

from ctxsel.cli.main import main
from tests.support.answers import answer_of
from tests.support.fake_server import FakeOpenAIServer, chat_reply, completion_reply, schema_responder
from tests.support.paths import EXAMPLE_MD


def test_sage_answers_through_an_http_endpoint_even_when_every_reply_is_nonsense(capsys) -> None:
    with FakeOpenAIServer() as server:
        # is-counting; then keys, the clean answer (importance off), the verdict; then round 2 (the
        # last): keys and the clean answer, which is the final answer (a last round asks no verdict)
        server.push(*[completion_reply("%%% ### !!!", prompt_tokens=50 + i) for i in range(6)])
        code = main(
            [
                "answer",
                "--document",
                str(EXAMPLE_MD),
                "--question",
                "Who built the main telescope?",
                "--method",
                "sage[n_perturb=0]",
                "--reader",
                server.base_url,
                "--reader-model",
                "fake",
                "--reader-mode",
                "completions",
                "--json",
            ]
        )
        # round 2 gathers nothing new, so its answer prompt repeats round 1's and the CLI's
        # response cache serves it: 6 calls made, 5 reach the server
        assert code == 0 and server.calls == 5
        prompts = [r.json["prompt"] for r in server.requests]
    out = json.loads(capsys.readouterr().out)
    sel = out["selection"]
    assert out["answer"] == "%%% ### !!!"
    assert out["usage"]["calls"] == 6 and out["usage"]["tokens_in"] == sum(50 + i for i in range(5)) + 52
    assert sel["method"] == "sage" and sel["meta"]["route"] == "explore"
    assert [s["keys_from"] for s in sel["trace"] if s["step"] == "round"] == ["question (fallback)"] * 2
    assert len(sel["meta"]["failures"]) == 4  # counting verdict, 2 x keys, round 1's verdict
    assert all("#s" in c["id"] for c in sel["chunks"]) and sel["chunks"]
    assert "telescope" in prompts[-1].lower()  # round 2's keys prompt shows the gathered sentences


def test_sage_voters_share_one_request_with_n_samples() -> None:
    """voter_num sampled votes are one request with the API's ``n``: the server reads the prompt once."""
    from ctxsel.llm.openai_compat import OpenAICompatClient
    from ctxsel.selectors import get_selector
    from tests.support.fake_server import Reply

    votes = ['{"option": "B", "reason": "r"}', '{"option": "A", "reason": "r"}', '{"option": "B", "reason": "r"}']
    multi = {
        "id": "chatcmpl-n",
        "object": "chat.completion",
        "model": "fake-model",
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": v}, "finish_reason": "stop"}
            for i, v in enumerate(votes)
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 24, "total_tokens": 74},
    }
    with FakeOpenAIServer() as server:
        client = OpenAICompatClient(server.base_url, "m", max_retries=0)
        sage = get_selector("sage", llm=client, iter_max=2, voter_num=3, n_perturb=0, counting=False)
        server.push(
            chat_reply('{"keys": ["telescope"]}'),
            chat_reply(votes[0]),
            chat_reply('{"verdict": "YES"}'),
            Reply(200, multi),
        )  # keys, the round's clean answer, the verdict (YES: round 1 is the last), the three voters
        sel = sage.select(
            "Who built the telescope?",
            ["The telescope was built by Kestrel.", "Rain fell."],
            choices=["Nobody", "Kestrel"],
        )
        vote_request = server.requests[-1].json
    assert server.calls == 4  # the three voters in one request
    assert vote_request["n"] == 3 and vote_request["temperature"] == 0.8 and vote_request["seed"] == 1
    assert answer_of(sel).text == "B. Kestrel"
    assert next(t for t in sel.trace if t["step"] == "vote")["votes"] == ["B", "A", "B"]
    assert sel.usage.calls == 4 and sel.usage.tokens_in == 3 * 11 + 50  # one request's prompt for three votes


def test_the_answer_command_prints_sage_rounds_and_counting_from_the_typed_trace(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path))
    argv = ["answer", "--document", str(EXAMPLE_MD), "--question", "Who built the main telescope?"]
    # every schema gets its smallest instance: keys ["Kestrel Optical Works"], verdicts YES
    with FakeOpenAIServer(responder=schema_responder(default="Kestrel Optical Works")) as server:
        url = ["--method", "sage[n_perturb=0]", "--reader", f"{server.base_url}/v1", "--reader-model", "m"]
        assert main([*argv, *url]) == 0  # "is it a counting question?" YES: it counts
        counted = capsys.readouterr().out
        monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path / "explore"))  # not the cached YES
        server.push(chat_reply("NO"))  # not a counting question: it explores
        assert main([*argv, *url, "--json"]) == 0
        explored = json.loads(capsys.readouterr().out)["selection"]["trace"]
        assert main([*argv, *url]) == 0  # the same, printed (the first reply comes from the cache)
        printed = capsys.readouterr().out
    assert "counting: Kestrel Optical Works -> 1" in counted.splitlines()
    assert [s["step"] for s in explored][:2] == ["counting-check", "round"]
    rounds = [line for line in printed.splitlines() if line.startswith("round ")]
    assert rounds[0].startswith("round 1: keys Kestrel Optical Works -> 1 retrieved")
    evaluated = next(s for s in explored if s["step"] == "round")["prompt_tokens"]
    assert evaluated > 0 and rounds[-1].endswith(f"sufficient: True; {evaluated:,} prompt tokens evaluated")


def test_sages_importance_embeds_with_the_evals_dense_backend(monkeypatch) -> None:
    import numpy as np
    import pytest

    import ctxsel.scoring.dense as dense
    from ctxsel import get_selector
    from ctxsel.selectors.sage import SAGE

    made: list[str] = []

    class Recorder:  # the embedding model's boundary: which backend SAGE asks for
        def __init__(self, *, cache: bool, backend: str) -> None:
            made.append(backend)

        def embed(self, texts: list[str]) -> np.ndarray:
            return np.ones((len(texts), 3))

    monkeypatch.setattr(dense, "DenseScorer", Recorder)
    llm = object()
    sage = get_selector("sage", llm=llm, resources={"backend": "onnx"})  # what `ctxsel eval --backend onnx` passes
    assert isinstance(sage, SAGE)
    assert sage.config()["backend"] == "onnx" and sage.embed(["a", "b"]).shape == (2, 3) and made == ["onnx"]
    assert "backend" not in get_selector("sage", llm=llm).config()  # auto: the configs of earlier runs
    assert get_selector("sage[backend=torch]", llm=llm, resources={"backend": "onnx"}).config()["backend"] == "torch"
    with pytest.raises(ValueError, match="unknown dense backend 'gpu'; choose auto, torch, onnx, onnx-int8"):
        get_selector("sage[backend=gpu]", llm=llm)


def test_sufficient_at_stops_on_the_llms_probability_of_yes_not_on_its_reply() -> None:
    """The verdict request asks for logprobs; P(YES) 0.4 stops at sufficient_at 0.3 and not at 0.5, while
    the reply itself says YES (the paper's rule, with no sufficient_at, stops on it)."""
    import math

    from ctxsel.llm.openai_compat import OpenAICompatClient
    from ctxsel.selectors import get_selector
    from tests.support.fake_server import Request

    smallest = schema_responder(default="telescope")

    def model(req: Request) -> Any:
        reply = smallest(req)
        if req.json.get("logprobs"):
            alts = [{"token": "YES", "logprob": math.log(0.4)}, {"token": "NO", "logprob": math.log(0.6)}]
            reply.body["choices"][0]["logprobs"] = {
                "content": [{"token": "YES", "logprob": -0.9, "top_logprobs": alts}]
            }
        return reply

    chunks = ["The telescope was built by Kestrel.", "Rain fell on the hills.", "The dome is white."]
    runs = {}
    for at in (0.3, 0.5, None):
        with FakeOpenAIServer(responder=model) as server:
            client = OpenAICompatClient(server.base_url, "m", max_retries=0)
            options: dict[str, Any] = {} if at is None else {"sufficient_at": at}
            sage = get_selector("sage", llm=client, iter_max=2, n_perturb=0, counting=False, **options)
            runs[at] = sage.select("Who built the telescope?", chunks)
            asked = [r.json for r in server.requests if r.json.get("logprobs")]
        assert len(asked) == (0 if at is None else 1) and all(a["top_logprobs"] == 20 for a in asked)
    rounds = {at: [s for s in sel.trace if s["step"] == "round"] for at, sel in runs.items()}
    assert len(rounds[0.3]) == 1 and rounds[0.3][0]["p_sufficient"] == 0.4 and rounds[0.3][0]["sufficient"] is True
    assert "sufficient (P(YES) 0.400 >= 0.3) after round 1 of 2" in runs[0.3].explanation
    assert len(rounds[0.5]) == 2 and rounds[0.5][0]["sufficient"] is False  # the reply said YES: not read
    assert len(rounds[None]) == 1 and "sufficient (YES) after round 1" in runs[None].explanation
    assert runs[0.3].config["sufficient_at"] == 0.3 and "sufficient_at" not in runs[None].config


def test_judge_asks_the_sufficiency_check_alone_on_given_sentences() -> None:
    """SAGE.judge shows the LLM exactly the named sentences, reads P(YES) and refuses an unknown id."""
    import math

    import pytest

    from ctxsel.errors import InputError
    from ctxsel.llm.openai_compat import OpenAICompatClient
    from ctxsel.selectors import get_selector
    from tests.support.fake_server import Request

    smallest = schema_responder(default="Kestrel")

    def model(req: Request) -> Any:
        reply = smallest(req)
        if req.json.get("logprobs"):
            alts = [{"token": "YES", "logprob": math.log(0.7)}, {"token": "NO", "logprob": math.log(0.3)}]
            reply.body["choices"][0]["logprobs"] = {
                "content": [{"token": "YES", "logprob": -0.4, "top_logprobs": alts}]
            }
        return reply

    chunks = ["The telescope was built by Kestrel. Rain fell on the hills.", "The dome is white."]
    with FakeOpenAIServer(responder=model) as server:
        sage = get_selector(
            "sage[sufficient_at=0.6,n_perturb=0]", llm=OpenAICompatClient(server.base_url, "m", max_retries=0)
        )
        step = sage.judge("Who built the telescope?", chunks, ["0#s0", "1#s0"])
        verdict = [r.json for r in server.requests if r.json.get("logprobs")]
        with pytest.raises(InputError, match="no sentence '0#s9' in these chunks"):
            sage.judge("Who built the telescope?", chunks, ["0#s9"])
    assert step["p_sufficient"] == 0.7 and step["sufficient"] is True and step["prompt_tokens"] > 0
    shown = json.dumps(verdict[0]["messages"])
    assert len(verdict) == 1 and "built by Kestrel" in shown and "dome is white" in shown and "Rain fell" not in shown
