"""Offline evidence mining (paper Sec. 3.2, Algorithm 1): greedily minimal sufficient sets.

For each (q, a): BM25 over the chunks with ``q + " " + a`` as the query;
the top-k chunks are S_cand. A generator LLM answers q from S_cand and a
judge checks the answer; a wrong answer drops the example (S_cand does not
support the answer even before pruning). Otherwise leave-one-out: for each
chunk c of S_suf, answer from S_suf without c; if the judge still says
correct, drop c for good. Passes repeat until one pass removes nothing, so
the result is a *greedily* minimal sufficient set with respect to that
generator and judge -- not necessarily the smallest one.

Choices where the paper is silent:

- k = 5 by default (HotpotQA needs 2 paragraphs; 5 leaves room for BM25 to
  miss one rank);
- chunks are tried weakest BM25 match first (reverse rank), so when two
  chunks are interchangeable the better-matching one is kept;
- the last chunk is never removed: an empty S_gold would make the reward's
  coverage undefined, and an answer from no context is parametric memory,
  not evidence;
- the generator reads the chunks in reading order (the reader's own rule)
  with the factoid template, greedy; each distinct subset is asked once
  per example (a memo), and a CachedClient makes reruns free;
- the judge is SubEM by default (HotpotQA answers are short spans), or the
  LLM judge, which counts only "Exact Match" on every item as correct.

Results are one JSONL line per example, appended and flushed as they are
made; a rerun with the same settings skips finished examples
(:func:`mine`), and a settings file beside the output refuses to mix runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ctxsel import metrics
from ctxsel.errors import InputError
from ctxsel.reader import Reader
from ctxsel.types import Chunk, Example, LLMUsage, Selection

DEFAULT_K = 5

#: judge(example, predicted answer) -> correct?
Judge = Callable[[Example, str], bool]


def subem_judge(example: Example, prediction: str) -> bool:
    """SubEM: some gold answer appears in the normalised prediction."""
    return bool(metrics.substring_exact_match(prediction, example.answers))


class LLMJudgeAdapter:
    """The LLM-as-judge (``ctxsel.judge.LLMJudge``): correct = every gold item judged an exact match."""

    def __init__(self, judge: Any) -> None:
        self.judge = judge
        self.model_id = getattr(judge, "model_id", "llm-judge")

    def __call__(self, example: Example, prediction: str) -> bool:
        j = self.judge.judge(example.question, prediction, example.answers)
        return j.score is not None and j.score >= 1.0


def bm25_candidates(example: Example, k: int = DEFAULT_K, scorer: Any = None) -> list[Chunk]:
    """S_cand: the top-k chunks by BM25 on ``question + " " + answer`` (ties by position)."""
    if scorer is None:
        from ctxsel.scoring.bm25 import BM25Scorer

        scorer = BM25Scorer()
    query = " ".join([example.question, *example.answers[:1]])
    scores = np.asarray(scorer.score(query, example.chunks), dtype=np.float64)
    order = np.argsort(-scores, kind="stable")[:k]
    return [example.chunks[i] for i in order]


def _as_selection(chunks: Sequence[Chunk]) -> Selection:
    return Selection(
        ids=[c.id for c in chunks],
        scores=[None] * len(chunks),
        chunks=list(chunks),
        method="mining",
        config={},
        explanation="",
        n_candidates=len(chunks),
    )


@dataclass(frozen=True)
class MineConfig:
    """What ``ctxsel mine`` sets beside the data and the models (its flags are generated from this)."""

    k: int = field(default=DEFAULT_K, metadata={"help": "BM25 candidates per question, S_cand"})
    rewrites: int = field(default=0, metadata={"help": "query rewrites per kept question (the paper: 5)"})
    constrained_rewrites: bool = field(
        default=False,
        metadata={
            "help": "ask for the rewrites as JSON under its schema (llama.cpp grammar / response_format); "
            "off by default, so the mined data shows what the model writes unaided"
        },
    )

    def __post_init__(self) -> None:
        if self.k < 1:
            raise InputError(f"--k must be >= 1, got {self.k}")
        if self.rewrites < 0:
            raise InputError(f"--rewrites must be >= 0 (0: none), got {self.rewrites}")


def mine_example(
    example: Example, generator: Reader, judge: Judge = subem_judge, k: int = DEFAULT_K, scorer: Any = None
) -> dict[str, Any]:
    """Algorithm 1 on one example: a JSON-ready record with S_cand, S_gold (or ``kept: False``) and the steps."""
    if not example.answers:
        raise InputError(f"example {example.id!r} has no gold answer: mining needs (q, a)")
    cand = bm25_candidates(example, k, scorer)
    memo: dict[frozenset[str], tuple[bool, str]] = {}
    usage = LLMUsage()
    steps: list[dict[str, Any]] = []

    def judged(chunks: Sequence[Chunk]) -> tuple[bool, str]:
        """(correct?, the generator's answer) from ``chunks``, each distinct subset asked once."""
        nonlocal usage
        key = frozenset(c.id for c in chunks)
        if key not in memo:
            ans = generator.answer(example.question, _as_selection(chunks))
            usage = usage + ans.usage
            memo[key] = (judge(example, ans.text), ans.text)
        return memo[key]

    ok, answer = judged(cand)
    steps.append({"try": "S_cand", "ids": [c.id for c in cand], "answer": answer, "correct": ok})
    s_suf = list(cand)
    if ok:
        changed = True
        while changed:
            changed = False
            for c in list(reversed(s_suf)):  # weakest BM25 match first
                if len(s_suf) == 1:
                    break
                trial = [x for x in s_suf if x.id != c.id]
                still, answer = judged(trial)
                steps.append({"try": f"without {c.id}", "answer": answer, "correct": still})
                if still:
                    s_suf = trial
                    changed = True
    return {
        "id": example.id,
        "question": example.question,
        "answers": example.answers,
        "kept": ok,
        "s_cand": [c.id for c in cand],
        "s_gold": [c.id for c in s_suf] if ok else [],
        "supporting": list(example.gold_ids),
        "llm_calls": usage.calls,
        "tokens_in": usage.tokens_in,
        "steps": steps,
    }


def mine(
    examples: Sequence[Example],
    generator: Reader,
    out_path: str | Path,
    *,
    judge: Judge = subem_judge,
    k: int = DEFAULT_K,
    settings: dict[str, Any] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    augment: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Mine every example into ``out_path`` (JSONL), resuming a killed run; returns all records.

    ``augment`` (e.g. query rewriting) edits each record before it is written.
    """
    from tqdm.auto import tqdm

    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings_path = out.with_name(out.name + ".settings.json")
    settings = {"k": k, **(settings or {})}
    if overwrite:
        out.unlink(missing_ok=True)
    if out.exists() and settings_path.exists():
        old = json.loads(settings_path.read_text(encoding="utf-8"))
        if old != settings:
            raise InputError(f"{out} was mined with other settings ({old}); use another --output or --overwrite")
    settings_path.write_text(json.dumps(settings, indent=1) + "\n", encoding="utf-8")
    done = {r["id"]: r for r in read_mined(out)} if out.exists() else {}
    todo = [e for e in examples if e.id not in done]
    with out.open("a", encoding="utf-8") as f:
        for ex in tqdm(todo, desc="mine", unit="q", disable=not progress):
            rec = mine_example(ex, generator, judge, k)
            if augment is not None:
                rec = augment(rec)
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
            done[ex.id] = rec
    return [done[e.id] for e in examples if e.id in done]


def labelled_records(examples: Iterable[Example]) -> list[dict[str, Any]]:
    """Records in ``read_mined``'s shape whose S_gold is each question's *labelled* gold chunks
    (``Example.gold_ids``: HotpotQA's supporting paragraphs, a HoloBench-style set's relevant rows).

    Not the paper's Algorithm 1, which mines S_gold because most corpora have no evidence labels:
    a leave-one-out set is minimal *for the generator* (a generator that answers a multi-hop
    question from the answer paragraph alone keeps that one paragraph), so a picker trained on it
    can learn to name one paragraph. Where labels exist they teach the whole reasoning chain.
    Questions without labels are not kept.
    """
    return [
        {"id": e.id, "question": e.question, "s_gold": list(e.gold_ids), "kept": bool(e.gold_ids), "labels": True}
        for e in examples
    ]


def read_mined(path: str | Path) -> list[dict[str, Any]]:
    """The records of a mined JSONL file (a torn last line from a kill is skipped)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def compare_with_supporting_facts(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """How mined S_gold relates to HotpotQA's supporting-fact paragraphs.

    Over kept examples: S_gold equals the gold paragraphs, contains them
    all, contains at least one, or none; and S_cand's gold recall (what
    BM25 with the answer found before pruning).
    """
    recs = list(records)
    kept = [r for r in recs if r["kept"]]
    n = len(kept)

    def share(pred: Callable[[dict[str, Any]], bool]) -> float | None:
        return sum(1 for r in kept if pred(r)) / n if n else None

    return {
        "n_examples": len(recs),
        "n_kept": n,
        "kept_share": n / len(recs) if recs else None,
        "mean_s_gold_size": float(np.mean([len(r["s_gold"]) for r in kept])) if n else None,
        "equals_supporting": share(lambda r: set(r["s_gold"]) == set(r["supporting"])),
        "contains_supporting": share(lambda r: set(r["supporting"]) <= set(r["s_gold"])),
        "contains_one_supporting": share(lambda r: bool(set(r["supporting"]) & set(r["s_gold"]))),
        "no_supporting": share(lambda r: not set(r["supporting"]) & set(r["s_gold"])),
        "s_gold_inside_supporting": share(lambda r: set(r["s_gold"]) <= set(r["supporting"])),
        "s_cand_recall_all": float(np.mean([metrics.context_recall(r["s_cand"], r["supporting"]) or 0.0 for r in recs]))
        if recs
        else None,
        "s_cand_recall_kept": float(
            np.mean([metrics.context_recall(r["s_cand"], r["supporting"]) or 0.0 for r in kept])
        )
        if n
        else None,
        "mean_llm_calls": float(np.mean([r["llm_calls"] for r in recs])) if recs else None,
    }


def comparison_markdown(cmp: dict[str, Any], title: str = "") -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}"

    rows = [
        ("questions mined", f"{cmp['n_examples']}"),
        ("kept (generator correct on S_cand)", f"{cmp['n_kept']} ({pct(cmp['kept_share'])} %)"),
        ("mean size of S_gold", "-" if cmp["mean_s_gold_size"] is None else f"{cmp['mean_s_gold_size']:.2f}"),
        ("S_gold = the two supporting paragraphs", f"{pct(cmp['equals_supporting'])} %"),
        ("S_gold contains both supporting paragraphs", f"{pct(cmp['contains_supporting'])} %"),
        ("S_gold contains at least one", f"{pct(cmp['contains_one_supporting'])} %"),
        ("S_gold contains none", f"{pct(cmp['no_supporting'])} %"),
        ("S_gold inside the supporting paragraphs", f"{pct(cmp['s_gold_inside_supporting'])} %"),
        (
            "S_cand (BM25 on q + a) recall of supporting, all / kept",
            f"{pct(cmp['s_cand_recall_all'])} / {pct(cmp['s_cand_recall_kept'])} %",
        ),
        ("generator calls per question", "-" if cmp["mean_llm_calls"] is None else f"{cmp['mean_llm_calls']:.2f}"),
    ]
    head = f"{title}\n\n" if title else ""
    return head + "| | |\n|---|---:|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows) + "\n"


__all__ = [
    "DEFAULT_K",
    "LLMJudgeAdapter",
    "bm25_candidates",
    "compare_with_supporting_facts",
    "comparison_markdown",
    "labelled_records",
    "mine",
    "mine_example",
    "read_mined",
    "subem_judge",
]
