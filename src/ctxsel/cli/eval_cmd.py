"""Evaluate methods on a dataset: recall, precision, k, diff-k, tokens, reduction.

Results are appended to DIR/results.jsonl as they are made; rerunning the same
command resumes where a killed run stopped. DIR/summary.md and summary.json
hold the table, DIR/plots the figures.
"""

from __future__ import annotations

import argparse

from ctxsel.cli.common import add_llm_arguments, add_scorer_arguments, make_llm, make_scorer

NAME = "eval"
HELP = "evaluate methods on a dataset"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ctxsel.eval.runner import DEFAULT_METHODS

    p.add_argument("--dataset", required=True, help="hotpotqa-long, example, or a JSONL path (generic or HELMET layout)")
    p.add_argument("--methods", "--method", default=",".join(DEFAULT_METHODS), help="comma-separated method specs")
    p.add_argument("--policy", default=None,
                   help="trained LDAR policy folder for every `ldar` method given without policy=")
    p.add_argument("--split", choices=["train", "test"], default=None,
                   help="only one part of the fixed train/test split `ctxsel train` uses")
    p.add_argument("--train-fraction", type=float, default=0.8, help="with --split (default 0.8)")
    p.add_argument("--split-seed", type=int, default=0, help="with --split (default 0)")
    p.add_argument("--output", required=True, help="output folder")
    p.add_argument("--limit", type=int, default=None, help="only the first N examples")
    p.add_argument("--hotpotqa", default=None, help="path to hotpot_dev_distractor_100.json (for hotpotqa-long)")
    p.add_argument("--plot-example", default=None, help="example id whose similarity curve is plotted")
    p.add_argument("--overwrite", action="store_true", help="discard earlier results in --output")
    p.add_argument("--no-progress", action="store_true")
    add_scorer_arguments(p)
    g = p.add_argument_group("reading (optional): answer with an LLM and score the answers")
    add_llm_arguments(g)
    g.add_argument("--template", default="auto", choices=["auto", "factoid-qa", "holobench-qa"],
                   help="reader prompt; auto: holobench-qa for HoloBench-style data, else factoid-qa")
    g.add_argument("--self-route-fallback-tokens", type=int, default=None,
                   help="cap Self-Route's full-context fallback at this many tokens (when the full context "
                        "does not fit the reader's window)")
    add_llm_arguments(g, "--judge")


def run(args: argparse.Namespace) -> int:
    from ctxsel.datasets import load_dataset
    from ctxsel.eval.report import markdown_table
    from ctxsel.eval.runner import evaluate
    from ctxsel.selectors import split_specs

    examples = load_dataset(args.dataset, limit=args.limit, hotpotqa_path=args.hotpotqa)
    dataset_name = args.dataset
    if args.split:
        from ctxsel.datasets.splits import split_examples

        examples = split_examples(examples, args.split, args.train_fraction, args.split_seed)
        dataset_name = f"{args.dataset} ({args.split} split: {len(examples)} questions)"
    if not examples:
        raise ValueError(f"dataset {args.dataset!r} has no examples")
    reader = judge = None
    methods = with_policy(split_specs(args.methods), args.policy)
    if args.reader:
        from ctxsel.eval.judge import LLMJudge, is_aggregation
        from ctxsel.reader import Reader

        template = args.template
        if template == "auto":
            template = "holobench-qa" if is_aggregation(examples[0]) else "factoid-qa"
        reader = Reader(make_llm(args), template)
        judge = LLMJudge(make_llm(args, "judge")) if args.judge else None
        if args.self_route_fallback_tokens:
            methods = [f"self-route[fallback_max_tokens={args.self_route_fallback_tokens}]" if m == "self-route" else m
                       for m in methods]
    summary = evaluate(
        examples,
        methods,
        output_dir=args.output,
        scorer=make_scorer(args),
        dataset_name=dataset_name,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        plot_example=args.plot_example,
        reader=reader,
        judge=judge,
    )
    print(markdown_table(summary), end="")
    if reader is not None:
        from ctxsel.eval.report import READER_COLUMNS

        print("\n" + markdown_table(summary, READER_COLUMNS), end="")
    picker_rows = {m: e for m, e in summary.items() if "invalid_share" in e}
    if picker_rows:
        from ctxsel.eval.report import SELECTOR_REPLY_COLUMNS

        print("\n" + markdown_table(picker_rows, SELECTOR_REPLY_COLUMNS), end="")
    print(f"\nwrote {args.output}/results.jsonl, summary.md, summary.json, plots/")
    return 0


def with_policy(methods: list[str], policy: str | None) -> list[str]:
    """Give ``policy`` to every ``ldar`` spec that names none (``--policy``)."""
    from ctxsel.selectors import parse_spec

    out = []
    for m in methods:
        name, options = parse_spec(m)
        if name == "ldar" and "policy" not in options:
            if policy is None:
                raise ValueError(f"method {m!r} needs a trained policy: pass --policy PATH or ldar[policy=PATH]")
            rest = m.split("[", 1)[1].rstrip("]") if "[" in m else ""
            m = f"ldar[policy={policy}" + (f",{rest}" if rest.strip() else "") + "]"
        out.append(m)
    return out
