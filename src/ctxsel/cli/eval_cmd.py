"""Evaluate methods on a dataset: recall, precision, k, diff-k, tokens, reduction.

Results are appended to DIR/results.jsonl as they are made; rerunning the same
command resumes where a killed run stopped. DIR/summary.md and summary.json
hold the table, DIR/plots the figures.
"""

from __future__ import annotations

import argparse

from ctxsel.cli.common import add_scorer_arguments, make_scorer

NAME = "eval"
HELP = "evaluate methods on a dataset"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ctxsel.eval.runner import DEFAULT_METHODS

    p.add_argument("--dataset", required=True, help="hotpotqa-long, example, or a JSONL path (generic or HELMET layout)")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="comma-separated method specs")
    p.add_argument("--output", required=True, help="output folder")
    p.add_argument("--limit", type=int, default=None, help="only the first N examples")
    p.add_argument("--hotpotqa", default=None, help="path to hotpot_dev_distractor_100.json (for hotpotqa-long)")
    p.add_argument("--plot-example", default=None, help="example id whose similarity curve is plotted")
    p.add_argument("--overwrite", action="store_true", help="discard earlier results in --output")
    p.add_argument("--no-progress", action="store_true")
    add_scorer_arguments(p)


def run(args: argparse.Namespace) -> int:
    from ctxsel.datasets import load_dataset
    from ctxsel.eval.report import markdown_table
    from ctxsel.eval.runner import evaluate
    from ctxsel.selectors import split_specs

    examples = load_dataset(args.dataset, limit=args.limit, hotpotqa_path=args.hotpotqa)
    if not examples:
        raise ValueError(f"dataset {args.dataset!r} has no examples")
    summary = evaluate(
        examples,
        split_specs(args.methods),
        output_dir=args.output,
        scorer=make_scorer(args),
        dataset_name=args.dataset,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        plot_example=args.plot_example,
    )
    print(markdown_table(summary), end="")
    print(f"\nwrote {args.output}/results.jsonl, summary.md, summary.json, plots/")
    return 0
