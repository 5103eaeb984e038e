"""Fit the LDAR score maps: each scorer's scores onto MiniLM's, the scale the bundled policy knows.

    python -m experiments.ldar_score_maps --threads 1 [--no-bundle]

Data: hotpotqa-long's 80 training questions (``ctxsel.datasets.splits``), each over the shared
991-paragraph pool, scored by MiniLM (``dense``, the policy's scorer) and by ``accurate`` (nomic),
``bm25``, ``hybrid`` and the default ``cascade``. For each scorer, its scores pooled over the 80
questions are matched quantile for quantile to MiniLM's over the same pools
(:func:`ctxsel.selectors.ldar.score_maps.fit_map`): knots at ``QUANTILES``, dense in the top tail,
where the chunks a band keeps sit. Nothing is tuned: the knots are fixed before the fit, and the
maps are judged by ``python -m experiments.ldar_scorers`` on generated sets they never saw, and only
those that carried the policy there ship (``BUNDLED``): ``accurate``'s and ``cascade``'s took LDAR's F2
past adaptive-k's; ``bm25``'s and ``hybrid``'s lowered it below the raw scores', so those two are left
out (bm25 warns, hybrid is read as given). The report keeps all four fits.

Writes benchmarks/results/ldar_score_maps.{md,json} and, unless ``--no-bundle``, the bundled maps
src/ctxsel/data/ldar_score_maps/ (score_maps.json, MODEL_CARD.md, manifest.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks import _common as C

BUNDLE = Path("src/ctxsel/data/ldar_score_maps")
SCORERS = ("accurate", "bm25", "hybrid", "cascade")
#: the maps that ship: those the judging run (benchmarks/results/ldar_scorers.md) found to help
BUNDLED = ("accurate", "cascade")
COMMAND = "python -m experiments.ldar_score_maps --threads 1"


def quantiles() -> Any:
    """The knots' quantiles: every 2% up to 0.9, then 29 steps geometric in 1 - q down to 1e-4."""
    import numpy as np

    return np.concatenate([np.linspace(0.0, 0.9, 46), 1.0 - np.geomspace(0.1, 1e-4, 30)[1:]])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--no-bundle", action="store_true", help="write the report only")
    args = p.parse_args(argv)
    info = C.machine_info(C.setup_threads(args.threads), versions=("onnxruntime",))

    import numpy as np
    from tqdm import tqdm

    from ctxsel import bundled
    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.splits import split_examples
    from ctxsel.ranking.chain import same_scores, scores_id
    from ctxsel.scoring import get_scorer
    from ctxsel.selectors.ldar.score_maps import MAPS_FILE, MAPS_FORMAT, MAPS_VERSION, fit_map

    train = split_examples(load_dataset("hotpotqa-long"), "train")
    scorers = {name: get_scorer(name, num_threads=args.threads) for name in ("dense", *SCORERS) if name != "bm25"}
    scorers["bm25"] = get_scorer("bm25")
    pooled: dict[str, Any] = {}
    for name, scorer in scorers.items():
        rows = [np.asarray(scorer.score(e.question, e.chunks), dtype=np.float64) for e in tqdm(train, desc=name)]
        pooled[name] = np.concatenate(rows)
        print(f"{name}: {len(pooled[name]):,} scores", file=sys.stderr)
    target = same_scores(scores_id(scorers["dense"]))
    q = quantiles()
    maps = {}
    lines = [
        C.header_md("LDAR score maps: each scorer's scores onto MiniLM's", info),
        f"hotpotqa-long's {len(train)} training questions over their pool; {len(q)} knots. Where a scorer's "
        "quantile lands on MiniLM's (q: the quantile of the pooled scores):",
        "",
        "| scorer | scores id | q 0.5 | q 0.9 | q 0.99 | q 0.999 | max |",
        "|---|---|---|---|---|---|---|",
    ]

    def cell(key: str) -> str:
        return "`" + key.replace("|", "\\|") + "`"

    def at(x: Any, qq: float) -> str:
        return f"{float(np.quantile(x, qq)):.3f}"

    lines.append(
        f"| `dense` (target) | {cell(target)} | {at(pooled['dense'], 0.5)} | {at(pooled['dense'], 0.9)} | "
        f"{at(pooled['dense'], 0.99)} | {at(pooled['dense'], 0.999)} | {pooled['dense'].max():.3f} |"
    )
    for name in SCORERS:
        key = same_scores(scores_id(scorers[name]))
        m = fit_map(name, pooled[name], pooled["dense"], q)
        maps[key] = {"scorer": name, "x": list(m.x), "y": list(m.y)}
        x = pooled[name]
        lines.append(
            f"| `{name}` | {cell(key)} | {at(x, 0.5)} | {at(x, 0.9)} | {at(x, 0.99)} | {at(x, 0.999)} | {x.max():.3f} |"
        )
    info["loadavg_end"] = C.loadavg()
    md = "\n".join(lines) + "\n"
    C.write_report("ldar_score_maps", args.out, md, {"machine": info, "target": target, "maps": maps})
    print(md)
    if args.no_bundle:
        return 0
    shipped = {key: m for key, m in maps.items() if m["scorer"] in BUNDLED}
    data = {"format": MAPS_FORMAT, "version": MAPS_VERSION, "target": target, "maps": shipped, "made_by": COMMAND}
    text = json.dumps(data, indent=1) + "\n"

    def install(dest: Path) -> None:
        (dest / MAPS_FILE).write_text(text, encoding="utf-8")

    def card(dest: Path, sums: Any) -> str:
        return "\n".join(
            [
                "# LDAR score maps",
                "",
                "Monotone piecewise-linear maps of each scorer's scores onto MiniLM's (`dense:all-MiniLM-L6-v2`,",
                "the scores the bundled LDAR policy was trained on), read by the `ldar` selector when the chain",
                "scored with one of them (`ctxsel.selectors.ldar.score_maps`). Data: hotpotqa-long (HotpotQA dev",
                "distractor, first 100 items; Yang et al. 2018; CC BY-SA 4.0), the 80 questions of the training",
                "split (`ctxsel.datasets.splits`, seed 0) over their shared pool; quantile matching of the pooled",
                f"scores at {len(q)} fixed quantiles. No randomness (no seed); the same scores give the same file.",
                f"Shipped: the maps for {' and '.join(f'`{n}`' for n in BUNDLED)}, the ones that carried the policy",
                "on the generated judging sets (the quantile table lists every fit).",
                "",
                f"Made by: `{COMMAND}`. How LDAR does with them: `benchmarks/results/ldar_scorers.md`.",
                "",
                "## Quantiles",
                "",
                md[md.index("| scorer |") :],  # the table; the run's machine and date stay in benchmarks/results
                *bundled.files_table(dest, sums),
                "",
            ]
        )

    print("bundled", bundled.write_bundle(BUNDLE, "ldar-score-maps", COMMAND, install, card))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
