"""select_many against a loop of select: many questions over one shared pool, per scorer.

The pool is the first hotpotqa-long example's chunks (or its first ``--pool`` of them), the
questions the first ``--questions`` of the data set. Both paths are warmed first (one select loads
the model and fills the on-disk embedding cache), then timed in alternation, ``--repeats`` times
each, in one process; the report gives the medians and their ratio (loop / many), with the threads
and the load average recorded. Both paths must pick the same chunks, or the benchmark fails.

    OMP_NUM_THREADS=1 python -m benchmarks.select_many [--questions 20] [--scorers bm25,dense,cascade]

Writes benchmarks/results/select_many.{md,json}.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any

from benchmarks import _common as C


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--questions", type=int, default=20)
    p.add_argument("--pool", type=int, default=0, help="chunks of the pool (default: all of the example's)")
    p.add_argument("--scorers", default="bm25,dense,cascade")
    p.add_argument("--method", default="adaptive-k")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    info = C.machine_info(C.setup_threads(args.threads), versions=("onnxruntime", "bm25s"))

    import ctxsel
    from ctxsel.datasets import load_dataset

    examples = load_dataset("hotpotqa-long")
    pool = [c.text for c in examples[0].chunks][: args.pool or None]
    questions = [e.question for e in examples[: args.questions]]
    rows: list[dict[str, Any]] = []
    warnings.simplefilter("ignore")  # the scorers' truncation notes: the same on both paths
    for scorer in args.scorers.split(","):
        ctxsel.select(questions[0], pool, args.method, scorer=scorer)  # load the model, fill the disk cache
        loop_s, many_s = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            loop = [ctxsel.select(q, pool, args.method, scorer=scorer) for q in questions]
            loop_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            many = ctxsel.select_many(questions, pool, args.method, scorer=scorer)
            many_s.append(time.perf_counter() - t0)
            if [s.ids for s in loop] != [s.ids for s in many]:
                raise SystemExit(f"{scorer}: select_many picked other chunks than a loop of select")
        row = {
            "scorer": scorer,
            "loop_s": statistics.median(loop_s),
            "many_s": statistics.median(many_s),
            "loop_runs_s": loop_s,
            "many_runs_s": many_s,
        }
        row["speedup"] = row["loop_s"] / row["many_s"]
        rows.append(row)
        print(f"{scorer}: loop {row['loop_s']:.2f} s, select_many {row['many_s']:.2f} s: {row['speedup']:.1f}x")
    info["loadavg_end"] = C.loadavg()
    table = C.md_table(
        ["scorer", "loop of select (s)", "select_many (s)", "ms a question (loop / many)", "speed-up"],
        [
            [
                f"`{r['scorer']}`",
                f"{r['loop_s']:.2f}",
                f"{r['many_s']:.2f}",
                f"{1000 * r['loop_s'] / len(questions):.0f} / {1000 * r['many_s'] / len(questions):.0f}",
                f"{r['speedup']:.1f}x",
            ]
            for r in rows
        ],
        align=["l", "r", "r", "r", "r"],
    )
    md = "\n".join(
        [
            C.header_md("select_many against a loop of select over one shared pool", info),
            f"{len(questions)} hotpotqa-long questions over one pool of {len(pool)} chunks (the first example's), "
            f"`{args.method}`, median of {args.repeats} alternating runs after a warm-up select per scorer "
            "(model loaded, on-disk embedding cache filled). Both paths picked the same chunks for every question.",
            "",
            table,
            "",
            "A loop of `select` builds a scorer per call, so each call reads the pool's vectors back from the "
            "on-disk cache (and BM25 indexes the pool again); `select_many` builds the method and scorer once, "
            "checks and counts the pool once, and its scorer keeps the vectors and the index in memory.",
        ]
    )
    C.write_report(
        "select_many", args.out, md, {"machine": info, "questions": len(questions), "pool": len(pool), "rows": rows}
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
