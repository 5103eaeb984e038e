"""Reader, Self-Route and the eval runner's reading path, against a fake
OpenAI-compatible server (the real HTTP boundary; the code under test is real)."""

from __future__ import annotations

import json

import pytest

from ctxsel import get_selector
from ctxsel.eval.runner import evaluate
from ctxsel.llm import CachedClient, ResponseCache
from ctxsel.llm.prompts import FACTOID_QA, SELF_ROUTE, TEMPLATES
from ctxsel.reader import Reader, clean_answer
from ctxsel.types import Chunk, Example
from tests.support.fake_server import Reply, completion_reply
from tests.support.fake_server import fake_client as client

CHUNKS = [
    Chunk("a", "Paris is the capital of France.", position=0, n_tokens=3000),
    Chunk("b", "Berlin is the capital of Germany.", position=1, n_tokens=3000),
    Chunk("c", "Rome is the capital of Italy.", position=2, n_tokens=3000),
]
SCORES = [0.2, 0.9, 0.5]  # ranking b, c, a


def test_reader_prompt_has_context_in_reading_order_and_cleans_the_answer(server):
    server.push(completion_reply("  **Berlin**\nextra words", prompt_tokens=120, completion_tokens=5))
    sel = get_selector("top-k@2").select("capital of Germany?", CHUNKS, SCORES)
    ans = Reader(client(server)).answer("capital of Germany?", sel)
    prompt = server.requests[0].json["prompt"]
    assert prompt == FACTOID_QA.render(question="capital of Germany?", context=CHUNKS[1].text + "\n\n" + CHUNKS[2].text)
    assert prompt.count("capital of Germany?") == 2 and prompt.endswith("- **Answer:** ")
    assert server.requests[0].json["stop"] == ["\n"] and server.requests[0].json["temperature"] == 0.0
    assert ans.text == "Berlin"
    assert (ans.usage.calls, ans.usage.tokens_in, ans.usage.tokens_out) == (1, 120, 5)


def test_clean_answer_keeps_multiline_templates_whole():
    assert clean_answer("- Rome\n", FACTOID_QA) == "Rome"
    assert clean_answer("\n\n", FACTOID_QA) == ""
    assert clean_answer(" a\nb ", TEMPLATES["holobench-qa"]) == "a\nb"


def test_self_route_answerable_makes_one_call_and_keeps_the_top_5k(server):
    server.push(completion_reply('{"answer": "Berlin"}', prompt_tokens=50, completion_tokens=2))
    sel = get_selector("self-route", llm=client(server)).select("q?", CHUNKS, SCORES)
    assert server.calls == 1
    assert sel.ids == ["b"]  # 3000 tokens fit 5k, 6000 do not
    assert sel.answer.route == "rag" and sel.answer.text == "Berlin"
    assert server.requests[0].json["prompt"] == SELF_ROUTE.render(
        datatype="documents", context=CHUNKS[1].text, question="q?"
    )
    ans = Reader(client(server)).answer("q?", sel)  # the reader does not ask again
    assert server.calls == 1 and ans.text == "Berlin" and ans.usage.calls == 1


@pytest.mark.parametrize("fallback, ids", [(None, ["b", "c", "a"]), (6000, ["b", "c"])])
def test_self_route_unanswerable_falls_back_and_counts_both_calls(server, fallback, ids):
    server.push(completion_reply('{"answer": "Unanswerable."}', 40, 3), completion_reply(" Rome", 90, 2))
    sel = get_selector("self-route", llm=client(server), fallback_max_tokens=fallback).select("q?", CHUNKS, SCORES)
    assert server.calls == 2
    assert sel.ids == ids and sel.answer.route == "long-context" and sel.answer.text == "Rome"
    assert (sel.usage.calls, sel.usage.tokens_in, sel.usage.tokens_out) == (2, 130, 5)
    assert server.requests[1].json["prompt"].startswith("Your task is to answer the question")
    assert "fell back to" in sel.explanation


def test_self_route_without_an_llm_is_a_clear_error():
    with pytest.raises(ValueError, match="needs an LLM"):
        get_selector("self-route")


def test_eval_without_reader_refuses_llm_methods(tmp_path):
    ex = Example("e", "q?", list(CHUNKS), gold_ids=["b"], answers=["Berlin"])
    with pytest.raises(ValueError, match="needs an LLM"):
        evaluate([ex], ["self-route"], output_dir=tmp_path, scorer=_FixedScorer(), progress=False)


class _FixedScorer:
    name = "fixed"

    def score(self, question, chunks):
        return [float(len(c.text) % 7) for c in chunks]


def _examples():
    return [
        Example(
            f"e{i}",
            f"question {i}?",
            [Chunk(f"{i}-{j}", f"fact {i} {j} " * (j + 1), position=j) for j in range(4)],
            gold_ids=[f"{i}-1"],
            answers=[f"ans{i}"],
        )
        for i in range(3)
    ]


def test_reader_eval_whose_server_fails_resumes_without_repeating_finished_calls(server, tmp_path):
    """The server stops answering mid-run: the failed rows are recorded as errors
    and the run goes on; the rerun asks the server only for what never finished,
    and every (example, method) is reported once."""
    cache = ResponseCache(tmp_path / "llm.sqlite")
    reader = Reader(CachedClient(client(server), cache))
    methods = ["top-k@1", "self-route"]
    # e0: top-k, self-route (answerable); e1: top-k, self-route's first call, then the server fails
    # (self-route's first reply is constrained by default: {"answer": ...})
    server.push(
        completion_reply("ans0"),
        completion_reply('{"answer": "ans0"}'),
        completion_reply("wrong"),
        completion_reply('{"answer": "unanswerable"}'),
    )
    summary = evaluate(
        _examples(), methods, output_dir=tmp_path / "run", scorer=_FixedScorer(), progress=False, reader=reader
    )
    assert server.calls == 7  # e1's fallback, e2's two calls: each fails once (no retries)
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert [(r["example_id"], r["method"], bool(r.get("error"))) for r in rows] == [
        ("e0", "top-k@1", False),
        ("e0", "self-route", False),
        ("e1", "top-k@1", False),
        ("e1", "self-route", True),
        ("e2", "top-k@1", True),
        ("e2", "self-route", True),
    ]
    assert all("HTTP 500" in r["error"] for r in rows if r.get("error"))
    assert summary["top-k@1"]["errors"] == 1 and summary["self-route"]["errors"] == 2

    # rerun: e1's self-route fallback call, then e2's two methods (answerable) -- nothing else
    server.push(completion_reply("ans1"), completion_reply("ans2"), completion_reply('{"answer": "ans2"}'))
    summary = evaluate(
        _examples(),
        methods,
        output_dir=tmp_path / "run",
        scorer=_FixedScorer(),
        progress=False,
        reader=Reader(CachedClient(client(server), ResponseCache(tmp_path / "llm.sqlite"))),
    )
    assert server.calls == 10
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert sorted((r["example_id"], r["method"]) for r in rows if not r.get("error")) == sorted(
        (f"e{i}", m) for i in range(3) for m in methods
    )
    by = {(r["example_id"], r["method"]): r for r in rows if not r.get("error")}
    assert by[("e1", "self-route")]["route"] == "long-context" and by[("e1", "self-route")]["llm_calls"] == 2
    assert by[("e1", "top-k@1")]["score"] == 0.0 and by[("e0", "top-k@1")]["score"] == 1.0
    assert summary["self-route"]["score"] == pytest.approx(1.0) and summary["self-route"]["errors"] == 0
    assert summary["top-k@1"]["score"] == pytest.approx(2 / 3) and summary["top-k@1"]["n"] == 3
    assert summary["top-k@1"]["llm_calls"] == 1 and summary["top-k@1"]["tokens_in"] == 7


@pytest.mark.parametrize(
    ("template", "max_tokens", "max_chars"), [("factoid-qa", 32, 128), ("holobench-qa", 384, 1536)]
)
def test_a_self_answering_method_answers_in_the_readers_template_and_length(
    server, tmp_path, template, max_tokens, max_chars
):
    """Self-Route answers in place of the reader: on aggregation data a whole list (the reader's 384 tokens and
    a route reply schema that holds them), not a 32-token factoid."""
    server.push(completion_reply('{"answer": "ans0"}'))
    evaluate(
        _examples()[:1],
        ["self-route"],
        output_dir=tmp_path,
        scorer=_FixedScorer(),
        progress=False,
        reader=Reader(client(server), template),
    )
    route = server.requests[0].json
    assert route["max_tokens"] == max_tokens + 24
    assert route["response_format"]["json_schema"]["schema"]["properties"]["answer"]["maxLength"] == max_chars
    config = json.loads((tmp_path / "config.json").read_text())["method_configs"]["self-route"]
    assert config["answer_template"].startswith(template) and config["max_answer_tokens"] == max_tokens


def test_reader_config_change_is_refused_on_resume(server, tmp_path):
    server.push(completion_reply("x"))
    ex = _examples()[:1]
    evaluate(ex, ["top-k@1"], output_dir=tmp_path, scorer=_FixedScorer(), progress=False, reader=Reader(client(server)))
    with pytest.raises(ValueError, match="reader"):
        evaluate(
            ex,
            ["top-k@1"],
            output_dir=tmp_path,
            scorer=_FixedScorer(),
            progress=False,
            reader=Reader(client(server), "holobench-qa"),
        )


def test_server_error_reply_is_not_an_answer(server):
    server.push(Reply(status=400, body={"error": {"message": "bad"}}))
    with pytest.raises(Exception, match="400"):
        Reader(client(server)).answer("q?", get_selector("top-k@1").select("q?", CHUNKS, SCORES))


@pytest.mark.slow
def test_sigkilled_reader_eval_repeats_no_finished_call(server, tmp_path):
    """``ctxsel eval --reader URL`` is SIGKILLed mid-run; the rerun asks the
    server exactly for the prompts whose replies never reached the cache."""
    import os
    import signal
    import subprocess
    import sys
    import time

    n_prompts = 12  # 6 example questions x 2 methods
    server.push(*[completion_reply(f"answer {i}", delay=0.4) for i in range(2 * n_prompts)])
    cache_path = tmp_path / "llm.sqlite"
    cmd = [
        sys.executable,
        "-m",
        "ctxsel.cli.main",
        "eval",
        "--dataset",
        "example",
        "--methods",
        "top-k@1,top-k@3",
        "--scorer",
        "bm25",
        "--reader",
        server.base_url,
        "--reader-model",
        "fake",
        "--reader-mode",
        "completions",
        "--llm-cache",
        str(cache_path),
        "--output",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    victim = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    assert server.wait_for(lambda: server.calls >= 5, timeout=60), "the eval made no LLM calls"
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL
    time.sleep(0.5)  # let a reply in flight finish on the server side
    first_calls = server.calls
    cached = len(ResponseCache(cache_path))
    assert 0 < cached < n_prompts and first_calls in (cached, cached + 1)

    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert server.calls - first_calls == n_prompts - cached  # nothing cached was asked again
    assert len(ResponseCache(cache_path)) == n_prompts
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == n_prompts and len({(r["example_id"], r["method"]) for r in rows}) == n_prompts
    assert all(r["answer"].startswith("answer") and r["llm_calls"] == 1 for r in rows)


class RecordingClient:
    """An LLM client that records its calls: the keywords a reader sends are what is under test."""

    model_id = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def complete(self, prompt, **kw):
        from ctxsel.llm.base import Completion
        from ctxsel.types import LLMUsage

        self.calls.append((prompt, kw))
        return Completion("The rows say three.\n- **Answer:** 3", LLMUsage(1, 10, 5))


def test_a_templates_cue_is_sent_as_the_reply_start():
    rec = RecordingClient()
    sel = get_selector("top-k@2").select("How many?", CHUNKS, SCORES)
    holo = Reader(rec, "holobench-qa").answer("How many?", sel)
    Reader(rec, "factoid-qa").answer("How many?", sel)
    (holo_prompt, holo_kw), (_, factoid_kw) = rec.calls
    assert TEMPLATES["holobench-qa"].cue == "- **Reasoning:**" and TEMPLATES["holobench-qa"].key == "holobench-qa-v2"
    assert holo_prompt.endswith("- **Reasoning:**") and holo_kw["reply_start"] == "- **Reasoning:**"
    assert "reply_start" not in factoid_kw  # a template without a cue calls (and caches) as before
    assert holo.text == "The rows say three.\n- **Answer:** 3"


def test_the_fallback_flag_is_an_alias_of_the_spec_option_on_every_self_route_row(server, tmp_path):
    """``--self-route-fallback-tokens N`` sets ``fallback_max_tokens`` on each self-route spec that leaves it
    unset (whatever else the spec says); a spec that sets it keeps its own, and other methods are untouched."""
    from ctxsel.cli.main import main

    server.responder = lambda request: completion_reply("unanswerable")
    out = tmp_path / "run"
    methods = "self-route@2k,self-route[fallback_max_tokens=7],top-k@1"
    reader = ["--reader", server.base_url, "--reader-model", "fake", "--reader-mode", "completions"]
    argv = ["eval", "--dataset", "example", "--limit", "1", "--methods", methods, "--scorer", "bm25"]
    assert main([*argv, *reader, "--self-route-fallback-tokens", "30", "--output", str(out), "--no-progress"]) == 0
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["methods"] == [
        "self-route[n_tokens=2k,fallback_max_tokens=30]",
        "self-route[fallback_max_tokens=7]",
        "top-k@1",
    ]
    got = {m: c.get("fallback_max_tokens") for m, c in config["method_configs"].items()}
    assert list(got.values()) == [30, 7, None]
    assert config["method_configs"][config["methods"][0]]["n_tokens"] == 2000


class ScriptedClient(RecordingClient):
    """A RecordingClient that replies with the given texts in turn."""

    def __init__(self, *replies: str) -> None:
        super().__init__()
        self.replies = list(replies)

    def complete(self, prompt, **kw):
        from ctxsel.llm.base import Completion
        from ctxsel.types import LLMUsage

        self.calls.append((prompt, kw))
        return Completion(self.replies.pop(0), LLMUsage(1, 10, 5), constrained="reply_format" in kw)


def test_a_structured_reader_asks_for_the_kinds_format_and_parses_it_strictly():
    rec = ScriptedClient('{"answer": 3}', '{"answer": [{"key": "a", "value": 1.50}]}', '{"answer": 3')
    sel = get_selector("top-k@2").select("How many?", CHUNKS, SCORES)
    reader = Reader(rec, "holobench-json")
    scalar = reader.answer("How many?", sel, kind="scalar")
    pairs = reader.answer("How many per group?", sel)  # no kind given: guessed from the question
    truncated = reader.answer("How many?", sel, kind="scalar")
    (p0, kw0), (p1, kw1), _ = rec.calls
    assert kw0["reply_format"].name == "aggregation-scalar" and kw0["max_tokens"] == 32
    assert kw1["reply_format"].name == "aggregation-pairs" and kw1["max_tokens"] == 384
    assert "the single number" in p0 and '"key" the group' in p1 and "reply_start" not in kw0
    assert "123.45" not in p0 + p1  # no example value for the model to copy
    assert (scalar.text, scalar.meta["structured"]) == ("3", {"kind": "scalar", "valid": True, "items": ["3"]})
    assert pairs.text == "a: 1.5" and pairs.template == "holobench-json-v2"
    assert truncated.text == '{"answer": 3' and truncated.meta["structured"]["valid"] is False
    assert "truncated" in truncated.meta["structured"]["error"]
    assert "structured" not in Reader(ScriptedClient("x"), "holobench-qa").answer("How many?", sel).meta
