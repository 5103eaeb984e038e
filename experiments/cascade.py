"""The cascade scorer on hotpotqa-long: the head size and the join chosen on the training split, then
default (MiniLM), accurate (nomic), hybrid and the cascade on the test split and all 100, and the cost
of each over a 1,000-chunk pool, cold and warm, in one run::

    python -m experiments.cascade --threads 1

Recall needs only each scorer's scores over the pool: hotpotqa-long is one pool of 991 paragraphs
shared by all 100 questions, so MiniLM and nomic embed it once (the embedding cache keeps the vectors)
and every cascade is computed from them (:func:`ctxsel.ranking.cascade.join` over
:func:`~ctxsel.ranking.cascade.head_of`): the accurate scorer reads each text alone, so a head's
accurate scores are the full pool's accurate scores on the head. ``--check N`` runs the real
``CascadeScorer`` on N questions and records that its scores equal the computed ones.

The choice, on the 80 training questions only: among the cascades whose adaptive-k keeps at most
1,000 tokens on average, the highest mean of top-n-tokens@1k and adaptive-k recall; a cascade within
0.5 points of it that re-scores fewer chunks on average wins (the cheaper head), then the higher
quality, then fewer adaptive-k tokens. Each row carries 95% intervals
(``ctxsel.eval.stats.bootstrap_ci``, over questions).

Cost: each scorer new (model loaded, then timed apart), with its own empty embedding cache, scores a
1,000-chunk pool (the 991 paragraphs and 9 of their first sentences) for one question (cold: every
chunk embedded) and then for another (warm: the vectors in memory); the ratio to MiniLM's cold seconds
is taken in the same run, and the threads and load average are recorded.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import _common as C

METHODS = ("top-n-tokens@1k", "top-n-tokens@2k", "adaptive-k")
HEADS = (20, 50, 100, 200)
HEAD_TOKENS = (2000, 5000, 10000)
FASTS = ("dense", "hybrid")
JOIN_RULES = ("calibrated", "below", "median")
TOKEN_LIMIT = 1000  # the target: adaptive-k at most this many tokens
CLOSE = 0.5  # points: a cheaper head this close to the best wins


def load() -> tuple[list[Any], dict[str, list[Any]]]:
    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.splits import split_examples

    examples = load_dataset("hotpotqa-long")
    return examples, {
        "train": split_examples(examples, "train"),
        "test": split_examples(examples, "test"),
        "all": list(examples),
    }


def pool_scores(examples: list[Any], threads: int) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per scorer, per question id: scores over the pool (the cache answers where it has the vectors)."""
    import numpy as np

    from ctxsel.scoring import get_scorer
    from ctxsel.scoring.hybrid import HybridScorer

    dense = get_scorer("dense", num_threads=threads)
    accurate = get_scorer("accurate", num_threads=threads)
    scorers: dict[str, Any] = {"dense": dense, "accurate": accurate, "hybrid": HybridScorer(dense_scorer=dense)}
    out: dict[str, dict[str, Any]] = {}
    for name, scorer in scorers.items():
        t0 = time.perf_counter()
        out[name] = {e.id: np.asarray(scorer.score(e.question, e.chunks), dtype=np.float64) for e in examples}
        print(f"{name}: {len(examples)} questions scored in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return out, scorers


def cascade_configs() -> list[dict[str, Any]]:
    out = []
    for fast in FASTS:
        for rule in JOIN_RULES:
            out += [{"fast": fast, "join": rule, "head": n, "head_tokens": None} for n in HEADS]
            out += [{"fast": fast, "join": rule, "head": None, "head_tokens": t} for t in HEAD_TOKENS]
    return out


def config_label(cfg: dict[str, Any]) -> str:
    size = f"head={cfg['head']}" if cfg["head_tokens"] is None else f"head_tokens={cfg['head_tokens']}"
    return f"cascade[fast={cfg['fast']},{size},join={cfg['join']}]"


def cascade_scores(example: Any, cfg: dict[str, Any], scores: dict[str, dict[str, Any]]) -> tuple[Any, int]:
    from ctxsel.ranking.cascade import head_of, join

    first = scores[cfg["fast"]][example.id]
    top = head_of(first, example.chunks, cfg["head"], cfg["head_tokens"])
    second = scores["accurate"][example.id][top]
    return join(first, top, second, cfg["join"]), len(top)


def per_question(examples: list[Any], score_of: Any) -> dict[str, dict[str, list[float]]]:
    """method -> {"recall": [...], "tokens": [...], "head": [...]} over ``examples``, in their order."""
    import ctxsel
    from ctxsel.metrics import context_recall
    from ctxsel.selectors import get_selector

    selectors = {m: get_selector(m) for m in METHODS}
    out: dict[str, dict[str, list[float]]] = {m: {"recall": [], "tokens": [], "head": []} for m in METHODS}
    for e in examples:
        s, head = score_of(e)
        for m, sel in selectors.items():
            picked = ctxsel.select(e.question, e.chunks, method=sel, scores=s)
            out[m]["recall"].append(100.0 * (context_recall([c.id for c in picked.chunks], e.gold_ids) or 0.0))
            out[m]["tokens"].append(float(picked.n_tokens))
            out[m]["head"].append(float(head))
    return out


def summarise(values: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    from ctxsel.eval.stats import bootstrap_ci

    out: dict[str, Any] = {}
    for m, v in values.items():
        out[m] = {
            "recall": sum(v["recall"]) / len(v["recall"]),
            "recall_ci": bootstrap_ci(v["recall"]),
            "tokens": sum(v["tokens"]) / len(v["tokens"]),
            "tokens_ci": bootstrap_ci(v["tokens"]),
        }
    out["head"] = sum(values[METHODS[0]]["head"]) / len(values[METHODS[0]]["head"])
    return out


def choose(rows: dict[str, dict[str, Any]]) -> str:
    """The training split's choice (module docstring)."""

    def quality(r: dict[str, Any]) -> float:
        return float(r["top-n-tokens@1k"]["recall"] + r["adaptive-k"]["recall"]) / 2

    ok = {k: r for k, r in rows.items() if r["adaptive-k"]["tokens"] <= TOKEN_LIMIT} or rows
    best = max(quality(r) for r in ok.values())
    near = [k for k, r in ok.items() if quality(r) >= best - CLOSE]
    return min(near, key=lambda k: (ok[k]["head"], -quality(ok[k]), ok[k]["adaptive-k"]["tokens"]))


def check_scorer(examples: list[Any], scorers: dict[str, Any], cfg: dict[str, Any], scores: Any) -> float:
    """The largest difference between the real CascadeScorer's scores and the computed ones."""
    import numpy as np

    from ctxsel.ranking.cascade import CascadeScorer

    fast = scorers[cfg["fast"]]
    real = CascadeScorer(
        cfg["head"],
        head_tokens=cfg["head_tokens"],
        join=cfg["join"],
        fast=cfg["fast"],
        fast_scorer=fast,
        accurate_scorer=scorers["accurate"],
    )
    worst = 0.0
    for e in examples:
        got = real.score(e.question, e.chunks)
        want, _ = cascade_scores(e, cfg, scores)
        worst = max(worst, float(np.max(np.abs(np.asarray(got) - want))))
    return worst


def cost_pool(examples: list[Any]) -> list[Any]:
    from ctxsel.types import Chunk

    chunks = list(examples[0].chunks)
    extra = [
        Chunk(
            id=f"{c.id} (first sentence)", text=c.text.split(". ")[0] + ".", doc_id=c.doc_id, position=len(chunks) + i
        )
        for i, c in enumerate(chunks[:9])
    ]
    return chunks + extra


def timings(examples: list[Any], spec_of: dict[str, str], threads: int, rounds: int) -> dict[str, Any]:
    """Cold and warm seconds per question over a 1,000-chunk pool, each scorer new with an empty cache."""
    from ctxsel.scoring import get_scorer
    from ctxsel.types import Chunk

    chunks = cost_pool(examples)
    q1, q2 = examples[1].question, examples[2].question
    probe = [Chunk(id="probe", text="A sentence that warms the model up.")]
    out: dict[str, Any] = {"pool": len(chunks), "rounds": rounds, "rows": {}}
    order = [name for name in spec_of if name != "accurate"] * rounds + (["accurate"] if "accurate" in spec_of else [])
    for name in order:
        spec = spec_of[name]
        work = Path(tempfile.mkdtemp(prefix="ctxsel-cascade-cost-"))
        load0 = os.getloadavg()
        t0 = time.perf_counter()
        scorer = get_scorer(spec, num_threads=threads, cache=str(work / "emb.sqlite"))
        scorer.score("warm up", probe)  # loads the model(s): timed apart
        t1 = time.perf_counter()
        scorer.score(q1, chunks)
        t2 = time.perf_counter()
        scorer.score(q2, chunks)
        t3 = time.perf_counter()
        scorer.score(q1, chunks)
        t4 = time.perf_counter()
        row = out["rows"].setdefault(
            name, {"spec": spec, "load_s": [], "cold_s": [], "warm_s": [], "repeat_s": [], "loadavg": []}
        )
        row["load_s"].append(t1 - t0)
        row["cold_s"].append(t2 - t1)
        row["warm_s"].append(t3 - t2)
        row["repeat_s"].append(t4 - t3)
        row["loadavg"].append([load0[0], os.getloadavg()[0]])
        print(
            f"cost {name}: load {t1 - t0:.2f} s, cold {t2 - t1:.2f} s, warm {t3 - t2:.3f} s, again {t4 - t3:.3f} s",
            file=sys.stderr,
        )
    import statistics

    base = out["rows"]["dense"]
    base_cold = statistics.median(base["cold_s"])
    base_total = statistics.median([a + b for a, b in zip(base["load_s"], base["cold_s"])])
    for row in out["rows"].values():  # medians over the rounds: one round slowed by another job weighs less
        row["cold_median_s"] = statistics.median(row["cold_s"])
        row["warm_median_s"] = statistics.median(row["warm_s"])
        row["repeat_median_s"] = statistics.median(row["repeat_s"])
        row["load_median_s"] = statistics.median(row["load_s"])
        row["cold_ratio"] = row["cold_median_s"] / base_cold
        row["cold_with_load_ratio"] = (
            statistics.median([a + b for a, b in zip(row["load_s"], row["cold_s"])]) / base_total
        )
    return out


def fmt_ci(ci: Any, digits: int = 1) -> str:
    return "" if ci is None else f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def table(rows: dict[str, dict[str, Any]], label: str = "ranking") -> list[str]:
    lines = [
        f"| {label} | chunks the accurate scorer reads | top-n-tokens@1k recall % (tokens) | "
        "top-n-tokens@2k recall % (tokens) | adaptive-k recall % | adaptive-k tokens |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        cells = [
            f"{r[m]['recall']:.1f}{fmt_ci(r[m]['recall_ci'])} ({r[m]['tokens']:,.0f})"
            for m in ("top-n-tokens@1k", "top-n-tokens@2k")
        ]
        ak = r["adaptive-k"]
        lines.append(
            f"| `{name}` | {r['head']:,.0f} | {cells[0]} | {cells[1]} | {ak['recall']:.1f}{fmt_ci(ak['recall_ci'])} | "
            f"{ak['tokens']:,.0f}{fmt_ci(ak['tokens_ci'], 0)} |"
        )
    return lines


def markdown(result: dict[str, Any], info: dict[str, Any]) -> str:
    chosen = result["chosen"]
    lines = [
        C.header_md("The cascade scorer on hotpotqa-long (experiments/cascade.py)", info),
        "## Training split (80 questions): the head and the join",
        "",
        f"Chosen: **`{chosen}`** (rule: among cascades with adaptive-k at most {TOKEN_LIMIT:,} tokens, the best "
        f"mean of top-n-tokens@1k and adaptive-k recall; within {CLOSE} points, the smaller head).",
        "",
        *table({**result["train_baselines"], **result["train"]}),
        "",
    ]
    for split, title in (("test", "Test split (20 questions)"), ("all", "All 100 questions")):
        lines += [f"## {title}", "", *table(result[split]), ""]
    cost = result.get("cost")
    if cost is None:
        return "\n".join([*lines, "(cost not measured: --no-cost)", ""])
    lines += [
        f"## Cost over a {cost['pool']:,}-chunk pool, one question, {info.get('threads')} thread(s)",
        "",
        "Each scorer new, with an empty embedding cache; load = building the scorer and its model(s) and one "
        "short text; cold = the first question over the pool (every chunk embedded); warm = a second "
        "question over the same pool (the pool's vectors in memory; a cascade's accurate part still embeds "
        "the new question's head chunks it has not read yet); again = the first question once more (nothing "
        f"to embed). Medians over {cost['rounds']} round(s), the scorers taking turns (accurate: one round, "
        "last), each round's cold seconds listed; the ratios are of medians, to MiniLM's in this run.",
        "",
        "| scorer | load s | cold s / question (each round) | warm s / question | again s | cold / MiniLM cold "
        "| (load + cold) / MiniLM's | load average (1 min) before, after |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in cost["rows"].items():
        la = ", ".join(f"{a:.1f}-{b:.1f}" for a, b in r["loadavg"])
        rounds = ", ".join(f"{x:.1f}" for x in r["cold_s"])
        lines.append(
            f"| `{r['spec']}` | {r['load_median_s']:.2f} | {r['cold_median_s']:.2f} ({rounds}) | "
            f"{r['warm_median_s']:.3f} | {r['repeat_median_s']:.3f} | {r['cold_ratio']:.2f}x | "
            f"{r['cold_with_load_ratio']:.2f}x | {la} |"
        )
    lines += [
        "",
        f"Check: the real `CascadeScorer` on {result['check']['questions']} questions gave the computed scores "
        f"to within {result['check']['max_abs_diff']:.2g}.",
        "",
    ]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Recall at 1k tokens on all 100 (95% intervals) against the cold cost ratio to MiniLM: quality per
    second, the measure the default was chosen by."""
    from ctxsel.plotting import pyplot

    plt = pyplot()
    if plt is None or "cost" not in result:
        return
    rows, cost = result["all"], result["cost"]["rows"]
    names = {"dense": "dense", "hybrid": "hybrid", "accurate": "accurate", result["chosen"]: "cascade"}
    fig, ax = plt.subplots(figsize=(7.2, 4.4))
    for key, name in names.items():
        r = rows[key]["top-n-tokens@1k"]
        x = cost[name]["cold_ratio"]
        lo, hi = r["recall_ci"]
        ax.errorbar(x, r["recall"], yerr=[[r["recall"] - lo], [hi - r["recall"]]], fmt="o", capsize=4)
        ax.annotate(
            f"{name} ({r['recall']:.1f}, {x:.2f}x)", (x, r["recall"]), xytext=(6, -12), textcoords="offset points"
        )
    ax.axvline(2.0, color="grey", lw=0.6, ls="--")
    ax.axhline(95.0, color="grey", lw=0.6, ls="--")
    ax.set_xscale("log")
    ax.set_xlim(0.8, 12)
    ax.set_xticks([1, 1.5, 2, 3, 6, 10], labels=["1x", "1.5x", "2x", "3x", "6x", "10x"])
    ax.minorticks_off()
    ax.set_xlabel("cold cost per question, 1,000-chunk pool, as a multiple of MiniLM's")
    ax.set_ylabel("gold recall % at top-n-tokens@1k (all 100)")
    ax.set_title("hotpotqa-long: recall against cost (dashed: issue 70's targets)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.add_common_args(p)
    p.add_argument("--check", type=int, default=5, help="questions the real CascadeScorer scores (default 5)")
    p.add_argument("--rounds", type=int, default=3, help="cost rounds per scorer but accurate (default 3)")
    p.add_argument("--no-cost", action="store_true", help="skip the cost measurement")
    p.add_argument("--replot", action="store_true", help="redraw cascade.png from OUT/cascade.json; measure nothing")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replot:
        import json

        plot(json.loads((args.out / "cascade.json").read_text(encoding="utf-8")), args.out / "cascade.png")
        return 0
    thread_info = C.setup_threads(args.threads)
    info0 = C.machine_info(thread_info, ("numpy", "onnxruntime"))  # the load average before the run
    examples, splits = load()
    scores, scorers = pool_scores(examples, args.threads)
    configs = {config_label(c): c for c in cascade_configs()}

    def baseline(name: str) -> Any:
        return lambda e: (scores[name][e.id], 991 if name == "accurate" else 0)

    def cascade(cfg: dict[str, Any]) -> Any:
        return lambda e: cascade_scores(e, cfg, scores)

    result: dict[str, Any] = {
        "train_baselines": {n: summarise(per_question(splits["train"], baseline(n))) for n in scorers},
        "train": {label: summarise(per_question(splits["train"], cascade(c))) for label, c in configs.items()},
    }
    chosen = choose(result["train"])
    result["chosen"] = chosen
    print(f"chosen on train: {chosen}", file=sys.stderr)
    for split in ("test", "all"):
        rows = {n: summarise(per_question(splits[split], baseline(n))) for n in scorers}
        rows[chosen] = summarise(per_question(splits[split], cascade(configs[chosen])))
        result[split] = rows
    check_n = max(0, args.check)
    result["check"] = {
        "questions": check_n,
        "max_abs_diff": check_scorer(splits["train"][:check_n], scorers, configs[chosen], scores),
    }
    if not args.no_cost:
        cfg = configs[chosen]
        size = f"head={cfg['head']}" if cfg["head_tokens"] is None else f"head_tokens={cfg['head_tokens']}"
        specs = {
            "dense": "dense",
            "hybrid": "hybrid",
            "cascade": f"cascade[fast={cfg['fast']},{size},join={cfg['join']}]",
            "accurate": "accurate",
        }
        result["cost"] = timings(examples, specs, args.threads, args.rounds)
    info = {**info0, "loadavg_end": C.loadavg()}
    C.write_report("cascade", args.out, markdown(result, info), {"info": info, **result})
    plot(result, args.out / "cascade.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
