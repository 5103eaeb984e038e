"""Adaptive-k's buffer over a retriever's top-N: how many chunks past the largest gap to keep.

The paper's buffer B = 5 was set on pools of about a thousand passages. Over a retriever's
top-5 to top-50 it keeps most or all of what it is given. This experiment cuts the top N of the
dense ranking (N = 5, 10, 20, 50 and the whole pool) with the largest-gap rule and every buffer
0..5, and reports per N the mean recall of the gold chunks, chunks kept and F2 (recall weighted
four times precision, the LDAR paper's reward), on the hotpotqa-long training split (the choice)
and on generated HoloBench-style sets (a second shape: many relevant rows). The test split is
reported by ``--split test`` once the rule is chosen::

    python -m experiments.retriever_buffer [--split train] [--threads 1]

Writes benchmarks/results/retriever_buffer_SPLIT.{md,json}.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _common as C

SIZES = (5, 10, 20, 50, 0)  # 0: the whole pool
BUFFERS = (0, 1, 2, 3, 4, 5)


def _pools(examples: list[Any], scorer: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per example: scores sorted descending and whether each ranked chunk is gold."""
    out = []
    for e in examples:
        s = np.asarray(scorer.score(e.question, e.chunks), dtype=np.float64)
        order = np.argsort(-s, kind="stable")
        gold = set(e.gold_ids)
        out.append((s[order], np.array([e.chunks[i].id in gold for i in order])))
    return out


def _interval(values: list[float]) -> dict[str, Any]:
    from ctxsel.eval.stats import bootstrap_ci

    return {"mean": float(np.mean(values)), "ci": bootstrap_ci(values)}


def _fmt(x: dict[str, Any]) -> str:
    lo, hi = x["ci"]
    return f"{100 * x['mean']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def _cut_rows(pools: list[tuple[np.ndarray, np.ndarray]], n: int, buffer_of: Any) -> dict[str, Any]:
    from ctxsel.selectors.adaptive_k import largest_gap_index

    rec, kept, f2, fewer = [], [], [], []
    for s_all, g_all in pools:
        s, g = (s_all[:n], g_all[:n]) if n else (s_all, g_all)
        size = len(s)
        i = largest_gap_index(s)
        k = size if i is None else min(size, i + 1 + buffer_of(size))
        total = int(g_all.sum())
        hit = int(g[:k].sum())
        r = hit / total if total else 1.0
        p = hit / k if k else 0.0
        rec.append(r)
        kept.append(k)
        f2.append(0.0 if r == p == 0 else 5 * p * r / (4 * p + r) if (4 * p + r) else 0.0)
        fewer.append(k < size)
    return {
        "recall": _interval(rec),
        "kept": float(np.mean(kept)),
        "f2": _interval(f2),
        "fewer_than_given": float(np.mean(fewer)),
        "kept_counts": np.bincount(kept).tolist(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.holobench import make_examples, write_jsonl
    from ctxsel.datasets.jsonl import load_jsonl
    from ctxsel.datasets.splits import split_examples
    from ctxsel.scoring import get_scorer
    from ctxsel.selectors.adaptive_k import retriever_buffer

    scorer = get_scorer(args.scorer, num_threads=args.threads, show_progress=True)
    sets: dict[str, list[Any]] = {
        f"hotpotqa-long {args.split}": split_examples(load_dataset("hotpotqa-long"), args.split),
    }
    seed = 0 if args.split == "train" else 7
    for info in (2_000, 5_000):
        gen = make_examples(info, size=10_000, seed=seed, n_queries=15)
        path = Path(tempfile.gettempdir()) / f"ctxsel-retriever-buffer-{info}-{seed}.jsonl"
        write_jsonl(gen.examples, path)
        sets[f"holobench info {info} seed {seed}"] = load_jsonl(path)
    rules: dict[str, Any] = {f"B={b}": (lambda _n, b=b: b) for b in BUFFERS}
    rules["scaled (default)"] = retriever_buffer
    out: dict[str, Any] = {}
    for label, examples in sets.items():
        pools = _pools(examples, scorer)
        out[label] = {str(n or "all"): {rule: _cut_rows(pools, n, fn) for rule, fn in rules.items()} for n in SIZES}
    return out


def report(results: dict[str, Any], info: dict[str, Any], split: str) -> str:
    notes = [
        "Largest-gap cut (tail 10%, no head) over the top N of the dense ranking, then the buffer;"
        " recall = gold chunks kept / gold chunks in the whole pool (so top-N's own ceiling shows);"
        " F2 weights recall 4x precision; 'fewer' = share of questions keeping fewer than N.",
        "Mean [95% bootstrap interval]. 'scaled (default)' is ctxsel's default buffer rule"
        " (ctxsel.selectors.adaptive_k.retriever_buffer).",
    ]
    md = C.header_md(f"Adaptive-k's buffer over a retriever's top-N ({split} split)", info, notes)
    for label, by_n in results.items():
        md += f"\n## {label}\n\n"
        rows = []
        for n, by_rule in by_n.items():
            for rule, r in by_rule.items():
                rows.append(
                    [
                        n,
                        rule,
                        _fmt(r["recall"]),
                        f"{r['kept']:.1f}",
                        _fmt(r["f2"]),
                        f"{100 * r['fewer_than_given']:.0f}%",
                        " ".join(f"{k}:{c}" for k, c in enumerate(r["kept_counts"]) if c) if n in ("5", "10") else "",
                    ]
                )
        md += (
            C.md_table(["top-N", "buffer", "recall %", "kept", "F2 %", "fewer", "questions keeping k (k:count)"], rows)
            + "\n"
        )
    return md


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--split", choices=("train", "test"), default="train")
    p.add_argument("--scorer", default="dense", help="scorer spec (default dense: the bundled MiniLM)")
    args = p.parse_args(argv)
    info = C.machine_info(C.setup_threads(args.threads))
    results = run(args)
    info["loadavg_end"] = C.loadavg()
    C.write_report(
        f"retriever_buffer_{args.split}",
        Path(args.out),
        report(results, info, args.split),
        {
            "info": info,
            "results": results,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
