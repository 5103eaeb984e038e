"""The reader's window as a budget, reference rows and per-row errors in ``evaluate``.

A fake in-process client with a small window (``n_ctx`` and a word-count
``count_tokens``, like the local llama.cpp client) and the fake
OpenAI-compatible server for the HTTP path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ctxsel import get_selector
from ctxsel.errors import LLMContextLengthError, LLMServerError
from ctxsel.eval.runner import evaluate
from ctxsel.llm import CachedClient, ResponseCache
from ctxsel.llm.base import Completion
from ctxsel.llm.prompts import FACTOID_QA
from ctxsel.reader import TEMPLATE_MARGIN, Reader, context_window
from ctxsel.tokens import count_tokens
from ctxsel.types import Chunk, Example, LLMUsage
from tests.support.answers import answer_of
from tests.support.fake_server import completion_reply
from tests.support.fake_server import fake_client as http_client

WORDS = 100  # each chunk is 100 words


def chunk(cid: str, pos: int, word: str) -> Chunk:
    return Chunk(cid, " ".join([word] * WORDS), position=pos)


# reading order a, b, c, d; scores rank them c, a, d, b
CHUNKS = [chunk("a", 0, "apple"), chunk("b", 1, "banana"), chunk("c", 2, "cherry"), chunk("d", 3, "date")]
SCORES = [0.8, 0.1, 0.9, 0.5]


class WindowClient:
    """Like LocalLlamaClient: ``n_ctx`` and ``count_tokens`` (here: words), and it
    refuses a prompt past the window. Replies are scripted per call."""

    def __init__(self, n_ctx: int, replies: list[str] | None = None, fail_on: str | None = None) -> None:
        self.n_ctx = n_ctx
        self.model_id = f"fake-window-{n_ctx}"
        self.prompts: list[str] = []
        self.replies = list(replies or [])
        self.fail_on = fail_on

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def complete(self, prompt, *, max_tokens=256, temperature=0.0, stop=None, seed=None, **extra):
        n = self.count_tokens(prompt)
        if n + max_tokens > self.n_ctx:
            raise LLMContextLengthError(f"{n} + {max_tokens} past {self.n_ctx}")
        self.prompts.append(prompt)
        if self.fail_on and self.fail_on in prompt:
            raise LLMServerError("scripted failure", status_code=500)
        text = self.replies.pop(0) if self.replies else "cherry"
        return Completion(text, LLMUsage(1, n, 1))


def prompt_words(question: str, k: int) -> int:
    """Words of the factoid prompt with k chunks (the separators add none)."""
    return len(FACTOID_QA.render(question=question, context="").split()) + k * WORDS


def window_for(question: str, k: int, answer_tokens: int = 32) -> int:
    """The smallest window that fits exactly k chunks."""
    return prompt_words(question, k) + answer_tokens + TEMPLATE_MARGIN


def test_window_is_found_through_the_cache_wrapper(tmp_path: Path) -> None:
    inner = WindowClient(1000)
    w = context_window(CachedClient(inner, ResponseCache(tmp_path / "c.sqlite")))
    assert w is not None and w.size == 1000 and w.margin == TEMPLATE_MARGIN and w.tokenizer == "model"
    assert w.count("one two three") == 3
    assert context_window(object()) is None
    explicit = context_window(inner, 500)
    assert explicit is not None and explicit.size == 500  # an explicit window wins


def test_a_selection_that_fits_is_read_whole() -> None:
    client = WindowClient(window_for("q?", 4))
    ans = Reader(client).answer("q?", get_selector("top-k@4").select("q?", CHUNKS, SCORES))
    assert "cut" not in ans.meta and ans.selection.k == 4
    assert client.prompts[0] == FACTOID_QA.render(question="q?", context="\n\n".join(c.text for c in CHUNKS))


def test_too_long_selection_keeps_the_best_ranked_chunks_in_reading_order(tmp_path: Path) -> None:
    inner = WindowClient(window_for("q?", 2) + 50)  # room for 2 chunks and a half
    reader = Reader(CachedClient(inner, ResponseCache(tmp_path / "c.sqlite")))
    sel = get_selector("top-k@4").select("q?", CHUNKS, SCORES)
    assert sel.ids == ["c", "a", "d", "b"]
    ans = reader.answer("q?", sel)
    # the two best (c, a) are kept, read in document order (a before c); d and b are dropped
    assert inner.prompts == [FACTOID_QA.render(question="q?", context=CHUNKS[0].text + "\n\n" + CHUNKS[2].text)]
    assert ans.selection.ids == ["c", "a"] and ans.selection.reading_order == ["a", "c"]
    cut = ans.meta["cut"]
    assert (cut["chunks_before"], cut["chunks_after"], cut["dropped"]) == (4, 2, ["d", "b"])
    assert cut["tokens_before"] == sel.n_tokens and cut["tokens_after"] == CHUNKS[0].n_tokens + CHUNKS[2].n_tokens
    assert cut["prompt_tokens_before"] == prompt_words("q?", 4) and cut["prompt_tokens_after"] == prompt_words("q?", 2)
    assert cut["window"] == inner.n_ctx and cut["margin"] == TEMPLATE_MARGIN and cut["tokenizer"] == "model"
    assert "cut to the best 2 of 4 chunks" in ans.selection.explanation
    assert sel.k == 4  # the selector's own Selection is left as it was


def test_a_question_that_alone_exceeds_the_window_is_a_context_length_error() -> None:
    reader = Reader(WindowClient(60))
    with pytest.raises(LLMContextLengthError, match="without any context"):
        reader.answer("q?", get_selector("top-k@1").select("q?", CHUNKS, SCORES))


def test_http_reader_with_a_window_counts_with_cl100k_and_cuts(server) -> None:
    empty = count_tokens(FACTOID_QA.render(question="q?", context=""))
    per_chunk = count_tokens(CHUNKS[0].text + "\n\n")
    window = 500
    w = context_window(http_client(server, context_window=window))
    assert w is not None and w.tokenizer == "cl100k" and w.margin == TEMPLATE_MARGIN + 50
    # prompt budget 500 - 114 - 32 = 354 tokens: the header plus as many 100-word chunks as fit
    expect_k = min(4, (window - w.margin - 32 - empty) // per_chunk)
    assert 1 <= expect_k < 4
    server.push(completion_reply("cherry"))
    ans = Reader(http_client(server, context_window=window)).answer(
        "q?", get_selector("top-k@4").select("q?", CHUNKS, SCORES)
    )
    sent = server.requests[0].json["prompt"]
    kept = ["c", "a", "d", "b"][:expect_k]
    assert [c.id for c in CHUNKS if c.text in sent] == [c.id for c in CHUNKS if c.id in kept]  # reading order
    assert count_tokens(sent) + 32 + w.margin <= window
    assert ans.meta["cut"]["chunks_after"] == expect_k and ans.meta["cut"]["tokenizer"] == "cl100k"
    assert ans.text == "cherry"


def test_http_client_rejects_a_bad_window(server) -> None:
    with pytest.raises(ValueError, match="context_window must be a positive"):
        http_client(server, context_window=0)


def test_self_route_fallback_is_cut_not_a_crash() -> None:
    # the route call reads top-5k (all 4 chunks: 400 words) and says unanswerable; the full-context
    # fallback would not fit either: both are cut to the 2 best chunks
    # the route prompt has 17 more words than the factoid one: +40 leaves both room for 2 chunks, not 3
    # (unconstrained: a constrained route reply asks for 24 more answer tokens, which would leave room for 1)
    client = WindowClient(window_for("q?", 2) + 40, replies=["unanswerable", "Cherry"])
    sel = get_selector("self-route", llm=client, constrained=False).select("q?", CHUNKS, SCORES)
    assert len(client.prompts) == 2
    for p in client.prompts:
        assert CHUNKS[0].text in p and CHUNKS[2].text in p and CHUNKS[1].text not in p and CHUNKS[3].text not in p
        assert p.index(CHUNKS[0].text) < p.index(CHUNKS[2].text)
    assert answer_of(sel).route == "long-context" and answer_of(sel).text == "Cherry"
    assert sel.meta["cut"]["chunks_before"] == 4 and sel.meta["cut"]["chunks_after"] == 2
    assert sel.k == 4  # the method chose the full context; the reader read what fits


class FixedScorer:
    name = "fixed"

    def score(self, question, chunks):
        by_id = dict(zip("abcd", SCORES))
        return [by_id.get(c.id[-1], 0.0) for c in chunks]


def examples(n: int = 3) -> list[Example]:
    return [
        Example(
            f"e{i}",
            f"question {i}?",
            [Chunk(f"{i}{c.id}", c.text, position=c.position) for c in CHUNKS],
            gold_ids=[f"{i}a", f"{i}c"],
            answers=["cherry"],
        )
        for i in range(n)
    ]


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_eval_rows_record_the_cut_and_the_summary_counts_it(tmp_path: Path) -> None:
    exs = examples(2)
    exs[1].chunks = exs[1].chunks[:1]  # e1: one chunk, always fits
    client = WindowClient(window_for("question 0?", 2) + 10)
    summary = evaluate(
        exs, ["top-k@4"], output_dir=tmp_path, scorer=FixedScorer(), progress=False, reader=Reader(client)
    )
    by = {r["example_id"]: r for r in rows_of(tmp_path)}
    assert by["e0"]["k"] == 4 and by["e0"]["cut"] == 1.0
    assert by["e0"]["tokens_cut"] == CHUNKS[1].n_tokens + CHUNKS[3].n_tokens
    assert by["e0"]["cut_detail"]["dropped"] == ["0d", "0b"] and by["e0"]["cut_detail"]["chunks_after"] == 2
    assert by["e1"]["cut"] == 0.0 and by["e1"]["tokens_cut"] == 0 and "cut_detail" not in by["e1"]
    e = summary["top-k@4"]
    assert e["cut"] == pytest.approx(0.5) and e["tokens_cut"] == pytest.approx(by["e0"]["tokens_cut"] / 2)
    assert e["errors"] == 0
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["reader"]["window"] == client.n_ctx and config["reader"]["window_tokenizer"] == "model"
    md = (tmp_path / "summary.md").read_text()
    assert "| method | SubEM % | EM % | F1 % | recall % |" in md and "cut % | tokens cut | errors |" in md


def test_reference_rows_in_an_eval(tmp_path: Path) -> None:
    exs = examples(2)
    exs[1].gold_ids = []  # the oracle cannot run here: that row's error, not the run's end
    client = WindowClient(10_000, replies=["no idea", "Cherry", "the cherry", "x", "y", "z"])
    methods = ["closed-book", "oracle", "top-k@1"]
    summary = evaluate(exs, methods, output_dir=tmp_path, scorer=FixedScorer(), progress=False, reader=Reader(client))
    # e0: closed-book, oracle, top-k; e1: closed-book, (oracle fails before any call), top-k
    assert len(client.prompts) == 5
    assert client.prompts[0] == FACTOID_QA.render(question="question 0?", context="")
    gold_context = CHUNKS[0].text + "\n\n" + CHUNKS[2].text
    assert client.prompts[1] == FACTOID_QA.render(question="question 0?", context=gold_context)
    by = {(r["example_id"], r["method"]): r for r in rows_of(tmp_path)}
    cb, orc = by[("e0", "closed-book")], by[("e0", "oracle")]
    assert (cb["k"], cb["n_tokens"], cb["recall"], cb["answer"], cb["score"]) == (0, 0, 0.0, "no idea", 0.0)
    assert (orc["ids"], orc["recall"], orc["precision"]) == (["0a", "0c"], 1.0, 1.0)
    assert (orc["subem"], orc["em"], orc["f1"]) == (1.0, 1.0, 1.0)
    assert by[("e0", "top-k@1")]["em"] == 1.0  # "the cherry": the article is dropped before comparing
    bad = by[("e1", "oracle")]
    assert bad["error_stage"] == "select" and bad["error"].startswith("InputError: method 'oracle' needs")
    assert summary["oracle"]["n"] == 2 and summary["oracle"]["errors"] == 1 and summary["oracle"]["em"] == 1.0
    assert summary["closed-book"]["errors"] == 0 and summary["closed-book"]["n_tokens"] == 0.0
    md = (tmp_path / "summary.md").read_text()
    assert "| oracle | 100.0 [100.0, 100.0] | 100.0 [100.0, 100.0] |" in md and "errors" in md.splitlines()[4]


@pytest.mark.slow  # two evals against a live fake server (about 3 s)
def test_one_failing_example_leaves_the_others_scored_and_is_retried_on_resume(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "llm.sqlite")
    failing = WindowClient(10_000, fail_on="question 1?")
    summary = evaluate(
        examples(3),
        ["top-k@1", "top-k@2"],
        output_dir=tmp_path / "run",
        scorer=FixedScorer(),
        progress=False,
        reader=Reader(CachedClient(failing, cache)),
    )
    rows = rows_of(tmp_path / "run")
    assert len(rows) == 6
    errored = [r for r in rows if r.get("error")]
    assert [(r["example_id"], r["method"]) for r in errored] == [("e1", "top-k@1"), ("e1", "top-k@2")]
    assert all(
        r["error_stage"] == "read"
        and r["error"].startswith("LLMServerError: scripted failure")
        and "score" not in r
        and "answer" not in r
        for r in errored
    )
    assert [r["recall"] for r in errored] == [0.5, 1.0]  # the selection was measured before the reading failed
    assert all(r["score"] == 1.0 for r in rows if not r.get("error"))
    assert summary["top-k@1"]["errors"] == 1 and summary["top-k@1"]["n"] == 3
    assert summary["top-k@1"]["score"] == 1.0 and summary["top-k@1"]["subem"] == 1.0  # over the 2 scored rows
    md = (tmp_path / "run" / "summary.md").read_text()
    line = next(
        x
        for x in md.splitlines()
        if x.startswith(
            "| top-k@1 | 100.0 [100.0, 100.0] | 100.0 [100.0, 100.0] | 100.0 [100.0, 100.0] | 50.0 [50.0, 50.0] |"
        )
    )
    assert line.endswith("| 0.0 [0.0, 0.0] | 0 [0, 0] | 1 |")  # cut %, tokens cut, errors

    # resume without retrying: nothing is asked, the error stays
    kept = WindowClient(10_000)
    summary = evaluate(
        examples(3),
        ["top-k@1", "top-k@2"],
        output_dir=tmp_path / "run",
        scorer=FixedScorer(),
        progress=False,
        reader=Reader(CachedClient(kept, cache)),
        retry_errors=False,
    )
    assert kept.prompts == [] and summary["top-k@1"]["errors"] == 1
    # resume (default): only the failed rows run again, the rest come from results.jsonl
    healthy = WindowClient(10_000)
    summary = evaluate(
        examples(3),
        ["top-k@1", "top-k@2"],
        output_dir=tmp_path / "run",
        scorer=FixedScorer(),
        progress=False,
        reader=Reader(CachedClient(healthy, cache)),
    )
    assert len(healthy.prompts) == 2 and all("question 1?" in p for p in healthy.prompts)
    assert summary["top-k@1"]["errors"] == 0 and summary["top-k@1"]["n"] == 3 and summary["top-k@1"]["score"] == 1.0
    assert len(rows_of(tmp_path / "run")) == 8  # append-only: the errored lines stay, the new ones win


def test_cli_eval_runs_the_reference_rows(server, tmp_path: Path, capsys) -> None:
    from ctxsel.cli.main import main

    server.push(*[completion_reply(" Kestrel Optical Works") for _ in range(6)])
    rc = main(
        [
            "eval",
            "--dataset",
            "example",
            "--limit",
            "2",
            "--methods",
            "closed-book,oracle,top-k@1",
            "--scorer",
            "bm25",
            "--reader",
            server.base_url,
            "--reader-model",
            "fake",
            "--reader-mode",
            "completions",
            "--reader-window",
            "4096",
            "--llm-cache",
            "off",
            "--output",
            str(tmp_path / "run"),
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and server.calls == 6
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())["methods"]
    assert summary["oracle"]["recall"] == 1.0 and summary["oracle"]["precision"] == 1.0
    assert summary["closed-book"]["k"] == 0 and summary["closed-book"]["recall"] == 0.0
    # q1's answer is the gold one, q2's is not
    assert summary["oracle"]["subem"] == 0.5 and summary["oracle"]["em"] == 0.5 and summary["oracle"]["errors"] == 0
    assert "SubEM %" in out and "| closed-book |" in out
    first = server.requests[0].json["prompt"]
    assert "Kestrel" not in first and first == FACTOID_QA.render(
        question="Who built the main telescope of the observatory?", context=""
    )


def test_an_example_that_cannot_be_scored_is_that_examples_error(tmp_path: Path) -> None:
    class Flaky(FixedScorer):
        def score(self, question, chunks):
            if question == "question 1?":
                raise RuntimeError("scorer broke")
            return super().score(question, chunks)

    summary = evaluate(examples(3), ["top-k@1", "closed-book"], output_dir=tmp_path, scorer=Flaky(), progress=False)
    rows = rows_of(tmp_path)
    bad = [r for r in rows if r.get("error")]
    assert [(r["example_id"], r["method"], r["error_stage"]) for r in bad] == [
        ("e1", "top-k@1", "score"),
        ("e1", "closed-book", "score"),
    ]
    assert bad[0]["error"] == "RuntimeError: scorer broke"
    assert summary["top-k@1"]["errors"] == 1 and summary["top-k@1"]["recall"] == 0.5  # over e0 and e2


def test_sage_answers_from_its_most_relevant_evidence_that_fits_the_window() -> None:
    from ctxsel.selectors.sage.selector import SAGE

    # four paragraphs of one long sentence each; the keys hit "cherry" (2 words shared) and "apple" (1)
    doc = [
        Chunk("p0", "apple cherry " + "apple " * 60 + "end.", position=0),
        Chunk("p1", "banana " * 60 + "end.", position=1),
        Chunk("p2", "cherry cherry " + "cherry " * 60 + "end.", position=2),
        Chunk("p3", "date " * 60 + "end.", position=3),
    ]

    class Client(WindowClient):
        def complete(self, prompt, **kw):
            if "Extract proper keywords" in prompt:
                self.replies.insert(0, "cherry, apple")
            elif "IMPORTANCE SCORE" in prompt:
                self.replies.insert(0, "YES")
            return super().complete(prompt, **kw)

    # room for the factoid prompt with one 64-word sentence, not two
    client = Client(window_for("which fruit?", 0) + 100, replies=[])
    s = SAGE(client, iter_max=1, n_perturb=0, counting=False, neighbor_num=0, embed=lambda t: np.ones((len(t), 2)))
    sel = s.select("which fruit?", doc)
    assert sel.ids == ["p0#s0", "p2#s0"] and sel.scores == [2.0, 1.0]  # the evidence gathered (p0 matches both keys)
    cut = sel.meta["cut"]  # ... is cut for the answer to the best-ranked sentence
    assert (cut["chunks_before"], cut["chunks_after"], cut["dropped"]) == (2, 1, ["p2#s0"])
    answers = [p for p in client.prompts if p.startswith("Your task is to answer")]
    assert len(answers) == 1 and "apple cherry" in answers[0] and "cherry cherry" not in answers[0]
    assert answer_of(sel).text == "cherry" and not sel.meta["failures"]
    assert [step["step"] for step in sel.trace] == ["cut", "round"]
