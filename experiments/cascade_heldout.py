"""The scorers on held-out sets shaped unlike HotpotQA: the generated long-article set
(:mod:`ctxsel.datasets.articles`) and two generated HoloBench-style sets, one run::

    python -m experiments.cascade_heldout --threads 2

Nothing is chosen here: ``dense`` (the default), ``accurate`` (nomic), ``hybrid``, ``accurate+bm25``
(nomic fused with BM25 as ``hybrid`` fuses MiniLM, at the weight experiments/accurate_fusion.py chose
on hotpotqa-long's training split) and the ``cascade`` scorer as it ships (its defaults, chosen on hotpotqa-long's training split by
experiments/cascade.py) are only measured, per set: gold recall of top-n-tokens@1k and @2k and
adaptive-k recall and tokens, each with a 95% interval (``ctxsel.eval.stats.bootstrap_ci``, over
questions). As in experiments/cascade.py the cascade is computed from the pool scores of its two
scorers (``--check N`` runs the real ``CascadeScorer`` on N questions and records the largest
difference). The embedding cache keeps every vector, so a rerun embeds nothing new.

Sets: ``articles[seed=0,sets=2,articles=16]`` (two contexts of 16 articles, 128 questions) and
HoloBench-style sets (seed 0, merge ``uniform``, relevance ``rows``) with 1k and 2k tokens of
relevant sentences in 8k-token contexts, 30 queries each; small so nomic embeds a few thousand
texts in all.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from benchmarks import _common as C
from experiments.cascade import METHODS, cascade_scores, fmt_ci, per_question, summarise, table

HOLO = ((1000, 8000), (2000, 8000))  # (relevant tokens, context tokens)
FUSION_BM25 = 0.1  # BM25's weight beside nomic's 1 in ``accurate+bm25``, chosen by experiments.accurate_fusion
HOLO_QUERIES = 30


def cascade_config() -> dict[str, Any]:
    """The shipped ``cascade`` scorer's settings."""
    from ctxsel.ranking.cascade import CascadeScorer

    c = CascadeScorer()
    return {"fast": c.fast_spec, "head": c.head, "head_tokens": c.head_tokens, "join": c.join}


def load_sets(n_holo: int) -> dict[str, list[Any]]:
    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.holobench import make_examples
    from ctxsel.datasets.jsonl import example_from_generic

    sets = {"articles[seed=0,sets=2,articles=16]": load_dataset("articles[seed=0,sets=2,articles=16]")}
    for info, size in HOLO:
        gen = make_examples(info_amount=info, size=size, seed=0, n_queries=n_holo)
        sets[f"holobench info {info // 1000}k, context {size // 1000}k"] = [
            example_from_generic(obj, obj["id"]) for obj in gen.examples
        ]
    return sets


def scores_of(examples: list[Any], scorers: dict[str, Any]) -> dict[str, dict[str, Any]]:
    import numpy as np

    out: dict[str, dict[str, Any]] = {}
    for name, scorer in scorers.items():
        t0 = time.perf_counter()
        out[name] = {e.id: np.asarray(scorer.score(e.question, e.chunks), dtype=np.float64) for e in examples}
        print(f"  {name}: {len(examples)} questions in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return out


def by_named(examples: list[Any], per: dict[str, Any]) -> dict[str, Any] | None:
    """Articles only: top-n-tokens@1k recall per scorer where every gold paragraph names its subject, and
    where one says "the town" or the like instead."""
    if not examples or "gold_named" not in examples[0].meta:
        return None
    from ctxsel.eval.stats import bootstrap_ci

    out: dict[str, Any] = {}
    for flag, key in ((True, "named"), (False, "unnamed")):
        idx = [i for i, e in enumerate(examples) if e.meta["gold_named"] is flag]
        out[key] = {"questions": len(idx)}
        for n, v in per.items():
            r = [v["top-n-tokens@1k"]["recall"][i] for i in idx]
            out[key][n] = {"recall": sum(r) / len(r) if r else None, "recall_ci": bootstrap_ci(r) if r else None}
    return out


def markdown(result: dict[str, Any], info: dict[str, Any]) -> str:
    lines = [
        C.header_md(
            "The scorers on held-out long-article and HoloBench-style sets (experiments/cascade_heldout.py)", info
        ),
        f"Cascade as shipped: `{result['cascade']}`. Nothing tuned on these sets. Recall % = share of the gold "
        "paragraphs (articles) or relevant sentences (HoloBench) selected, mean over questions; tokens = mean "
        "selected (cl100k).",
        "",
    ]
    for name, s in result["sets"].items():
        lines += [
            f"## `{name}`: {s['questions']} questions, {s['chunks']:,.0f} chunks per context on average",
            "",
            *table(s["rows"], "scorer"),
            "",
            "Minus accurate, top-n-tokens@1k recall (points, paired 95% interval over questions): "
            + "; ".join(f"`{n}` {g['mean']:+.1f}{fmt_ci(g['ci'])}" for n, g in s["minus_accurate_1k"].items())
            + ".",
            "",
        ]
        named = s.get("by_gold_named")
        if named:
            lines += [
                "top-n-tokens@1k recall % by whether the gold paragraphs name their subject:",
                "",
                "| gold paragraphs | questions | " + " | ".join(f"`{n}`" for n in s["rows"]) + " |",
                "|---|---:|" + "---:|" * len(s["rows"]),
            ]
            for key, title in (("named", "all name it"), ("unnamed", "one or both say 'the town' and the like")):
                g = named[key]
                cells = [
                    f"{g[n]['recall']:.1f}{fmt_ci(g[n]['recall_ci'])}" if g[n]["recall"] is not None else "-"
                    for n in s["rows"]
                ]
                lines.append(f"| {title} | {g['questions']} | " + " | ".join(cells) + " |")
            lines.append("")
    lines += [
        f"Check: the real `CascadeScorer` on {result['check']['questions']} questions per set gave the computed "
        f"scores to within {result['check']['max_abs_diff']:.2g}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p)
    p.add_argument("--check", type=int, default=3, help="questions per set the real CascadeScorer scores")
    p.add_argument("--holo-queries", type=int, default=HOLO_QUERIES, help="queries per HoloBench-style set")
    args = p.parse_args(argv)
    thread_info = C.setup_threads(args.threads)
    info0 = C.machine_info(thread_info, ("numpy", "onnxruntime"))

    import numpy as np

    from ctxsel.eval.stats import bootstrap_ci
    from ctxsel.ranking.cascade import CascadeScorer
    from ctxsel.scoring import get_scorer
    from ctxsel.scoring.hybrid import HybridScorer

    dense = get_scorer("dense", num_threads=args.threads)
    accurate = get_scorer("accurate", num_threads=args.threads)
    scorers: dict[str, Any] = {
        "dense": dense,
        "accurate": accurate,
        "hybrid": HybridScorer(dense_scorer=dense),
        # nomic fused with BM25 at the weight experiments.accurate_fusion chose on hotpotqa-long's training split
        "accurate+bm25": HybridScorer(bm25=FUSION_BM25, dense_scorer=accurate),
    }
    cfg = cascade_config()
    label = "cascade"
    real = CascadeScorer(
        cfg["head"],
        head_tokens=cfg["head_tokens"],
        join=cfg["join"],
        fast=cfg["fast"],
        fast_scorer=scorers[cfg["fast"]],
        accurate_scorer=accurate,
    )
    size = f"head={cfg['head']}" if cfg["head_tokens"] is None else f"head_tokens={cfg['head_tokens']}"
    result: dict[str, Any] = {"cascade": f"cascade[fast={cfg['fast']},{size},join={cfg['join']}]", "sets": {}}
    worst = 0.0
    for set_name, examples in load_sets(args.holo_queries).items():
        print(f"{set_name}: {len(examples)} questions", file=sys.stderr)
        scores = scores_of(examples, scorers)
        per: dict[str, Any] = {}
        for n in scorers:
            reads = n in ("accurate", "accurate+bm25")
            per[n] = per_question(
                examples, lambda e, n=n, reads=reads: (scores[n][e.id], len(e.chunks) if reads else 0)
            )
        per[label] = per_question(examples, lambda e: cascade_scores(e, cfg, scores))
        base = per["accurate"]["top-n-tokens@1k"]["recall"]
        gaps = {
            n: [a - b for a, b in zip(v["top-n-tokens@1k"]["recall"], base)] for n, v in per.items() if n != "accurate"
        }
        result["sets"][set_name] = {
            "questions": len(examples),
            "chunks": sum(len(e.chunks) for e in examples) / len(examples),
            "rows": {n: summarise(v) for n, v in per.items()},
            "minus_accurate_1k": {n: {"mean": sum(g) / len(g), "ci": bootstrap_ci(g)} for n, g in gaps.items()},
            "per_question": {n: {m: v[m]["recall"] for m in METHODS} for n, v in per.items()},
            "by_gold_named": by_named(examples, per),
        }
        for e in examples[: max(0, args.check)]:
            want, _ = cascade_scores(e, cfg, scores)
            worst = max(worst, float(np.max(np.abs(np.asarray(real.score(e.question, e.chunks)) - want))))
    result["check"] = {"questions": max(0, args.check), "max_abs_diff": worst}
    info = {**info0, "loadavg_end": C.loadavg()}
    C.write_report("cascade_heldout", args.out, markdown(result, info), {"info": info, **result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
