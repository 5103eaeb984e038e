"""Batched reading in ``evaluate``: a client with ``complete_many`` is handed a group's selections at once,
and the rows are those of reading one at a time; one bad item is its own row's error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxsel import get_selector
from ctxsel.errors import LLMServerError
from ctxsel.eval.reading import DEFAULT_READ_GROUP, read_group
from ctxsel.eval.runner import evaluate
from ctxsel.llm.base import Completion
from ctxsel.reader import Reader
from ctxsel.types import Chunk, Example, LLMUsage


class EchoClient:
    """Replies with the prompt's length and its last context word; fails on prompts holding ``fail_on``."""

    model_id = "echo"

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[int] = []  # prompts per call
        self.fail_on = fail_on

    def _reply(self, prompt: Any) -> Completion:
        if self.fail_on and self.fail_on in prompt:
            raise LLMServerError("scripted failure", status_code=500)
        words = str(prompt).split()
        return Completion(f"{len(words)} {words[-8] if len(words) > 8 else ''}", LLMUsage(1, len(words), 2))

    def complete(self, prompt: Any, **kw: Any) -> Completion:
        self.calls.append(1)
        return self._reply(prompt)


class BatchingEchoClient(EchoClient):
    def complete_many(self, prompts: list[Any], **kw: Any) -> list[Completion]:
        self.calls.append(len(prompts))
        return [self._reply(p) for p in prompts]


def examples(n: int) -> list[Example]:
    out = []
    for i in range(n):
        chunks = [Chunk(f"e{i}c{j}", f"passage {j} of example {i} word{i}x{j}", position=j) for j in range(4)]
        out.append(Example(f"e{i}", f"question {i}?", chunks, gold_ids=[f"e{i}c1"], answers=[f"{6 + i}"]))
    return out


METHODS = ["top-k@1", "top-k@3", "full", "oracle"]


def rows(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    got = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        got[(r["example_id"], r["method"])] = {k: r.get(k) for k in ("answer", "subem", "tokens_in", "error")}
    return got


def test_a_batching_reader_reads_a_group_at_once_and_writes_the_same_rows(tmp_path: Path) -> None:
    batching, plain = BatchingEchoClient(), EchoClient()
    assert read_group(Reader(batching)) == DEFAULT_READ_GROUP and read_group(Reader(plain)) == 1
    assert read_group(Reader(batching), 3) == 3 and read_group(None) == 1
    exs = examples(5)
    kw: dict[str, Any] = {"scorer": "bm25", "progress": False, "ci": "none"}
    evaluate(exs, METHODS, output_dir=tmp_path / "b", reader=Reader(batching), read_batch=2, **kw)
    evaluate(exs, METHODS, output_dir=tmp_path / "p", reader=Reader(plain), **kw)
    assert batching.calls == [2 * 4, 2 * 4, 1 * 4]  # groups of 2 questions x 4 methods, then the last one
    assert plain.calls == [1] * 20
    assert rows(tmp_path / "b") == rows(tmp_path / "p")
    assert all(r["answer"] for r in rows(tmp_path / "b").values())
    plots = tmp_path / "b" / "plots"  # recall and the answers' SubEM against tokens; one per method for recall
    assert (plots / "recall_vs_tokens.png").is_file() and (plots / "subem_vs_tokens.png").is_file()
    assert len(list((plots / "methods").iterdir())) == len(METHODS)


def test_one_failing_prompt_is_its_rows_error_not_the_batchs(tmp_path: Path) -> None:
    client = BatchingEchoClient(fail_on="word1x")  # the prompts with example 1's context
    evaluate(
        examples(3), METHODS, output_dir=tmp_path / "o", reader=Reader(client), scorer="bm25", progress=False, ci="none"
    )
    got = rows(tmp_path / "o")
    failed = {k for k, r in got.items() if r["error"]}
    assert failed == {("e1", m) for m in METHODS}
    assert all("scripted failure" in got[k]["error"] for k in failed)
    assert all(r["answer"] for k, r in got.items() if k not in failed)
    assert client.calls[0] == 12  # one batch first, then each prompt alone to find the bad ones


def test_answer_many_matches_answer_and_keeps_a_routed_answer() -> None:
    from ctxsel.types import RoutedAnswer

    chunks = examples(1)[0].chunks
    reader = Reader(BatchingEchoClient())
    sels = [get_selector(m).select("q?", chunks, [0.1, 0.9, 0.5, 0.2]) for m in ("top-k@1", "top-k@2", "full")]
    routed = get_selector("top-k@1").select("q?", chunks, [0.1, 0.9, 0.5, 0.2])
    routed.answer = RoutedAnswer(text="routed", raw="routed", route="rag", seconds=0.0, template="t", tokens_in=1)
    many = reader.answer_many([("q?", s) for s in [*sels, routed]])
    alone = [Reader(EchoClient()).answer("q?", s) for s in sels]
    assert [a.text for a in many[:3] if not isinstance(a, Exception)] == [a.text for a in alone]
    last = many[3]
    assert not isinstance(last, Exception) and last.text == "routed" and last.meta["route"] == "rag"


def test_a_batching_client_selects_in_threads_and_writes_the_same_rows(tmp_path: Path) -> None:
    from ctxsel.eval.reading import selects_in_threads
    from ctxsel.llm.batcher import BatchingClient
    from ctxsel.llm.cache import CachedClient, ResponseCache

    inner = BatchingEchoClient()
    client = CachedClient(BatchingClient(inner), ResponseCache(tmp_path / "c.sqlite"))
    assert selects_in_threads(Reader(client)) and not selects_in_threads(Reader(inner))
    kw: dict[str, Any] = {"scorer": "bm25", "progress": False, "ci": "none"}
    evaluate(examples(4), METHODS, output_dir=tmp_path / "t", reader=Reader(client), **kw)
    evaluate(examples(4), METHODS, output_dir=tmp_path / "p", reader=Reader(EchoClient()), **kw)
    assert rows(tmp_path / "t") == rows(tmp_path / "p") and inner.calls == [16]
