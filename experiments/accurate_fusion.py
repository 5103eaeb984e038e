"""nomic (`accurate`) fused with BM25, as `hybrid` fuses MiniLM with it: does it pay on hotpotqa-long?

    python -m experiments.accurate_fusion --threads 1

The fused score is `hybrid`'s min-max fusion (:mod:`ctxsel.scoring.hybrid`) of the accurate scorer's and
BM25's scores over the pool, ``(mm(accurate) + w * mm(bm25)) / (1 + w)``, for each BM25 weight ``w`` of
the grid. The weight is chosen on the 80 training questions by the rule `experiments.cascade` uses (among
the rankings whose adaptive-k keeps at most 1,000 tokens, the best mean of top-n-tokens@1k and
adaptive-k recall); `accurate` alone (``w = 0``) is on the grid, so the fusion is offered only if a
weight beats it there. Then the test split and all 100, with 95% intervals. The pool's vectors come
from the embedding cache (``experiments.cascade`` fills it). Writes
benchmarks/results/accurate_fusion.{md,json}.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchmarks import _common as C

#: BM25's weight beside the accurate scorer's 1 (0: the accurate scorer alone)
WEIGHTS = (0.0, 0.1, 0.25, 0.5, 1.0)


def label(w: float) -> str:
    return "accurate" if w == 0 else f"accurate + bm25 (w={w:g})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    args = p.parse_args(argv)
    info = C.machine_info(C.setup_threads(args.threads), versions=("onnxruntime",))

    import numpy as np

    from ctxsel.scoring import get_scorer
    from ctxsel.scoring.hybrid import minmax
    from experiments.cascade import choose, load, per_question, summarise, table

    examples, splits = load()
    accurate = get_scorer("accurate", num_threads=args.threads)
    bm25 = get_scorer("bm25")
    raw = {
        e.id: (
            np.asarray(accurate.score(e.question, e.chunks), dtype=np.float64),
            np.asarray(bm25.score(e.question, e.chunks), dtype=np.float64),
        )
        for e in examples
    }
    print(f"scored {len(examples)} questions", file=sys.stderr)

    def fused(w: float) -> Any:
        def score_of(e: Any) -> tuple[Any, int]:
            a, b = raw[e.id]
            return (a if w == 0 else (minmax(a) + w * minmax(b)) / (1 + w)), len(e.chunks)  # nomic reads all

        return score_of

    rows = {part: {label(w): summarise(per_question(exs, fused(w))) for w in WEIGHTS} for part, exs in splits.items()}
    chosen = choose(rows["train"])
    info["loadavg_end"] = C.loadavg()

    verdict = (
        "no BM25 weight beats the accurate scorer alone on the training split: the fusion is not offered"
        if chosen == "accurate"
        else f"chosen on the training split: {chosen}"
    )
    lines = [
        C.header_md("nomic (accurate) fused with BM25 on hotpotqa-long", info),
        f"Min-max fusion as `hybrid` does it; BM25 weights {', '.join(f'{w:g}' for w in WEIGHTS)} beside nomic's 1. "
        f"**{verdict[0].upper() + verdict[1:]}.**",
        "",
        "## Training split (80 questions): the choice",
        "",
        *table(rows["train"]),
        "",
        "## Test split (20 questions)",
        "",
        *table(rows["test"]),
        "",
        "## All 100 questions",
        "",
        *table(rows["all"]),
    ]
    C.write_report(
        "accurate_fusion", args.out, "\n".join(lines) + "\n", {"machine": info, "chosen": chosen, "rows": rows}
    )
    print("\n".join(lines[-8:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
