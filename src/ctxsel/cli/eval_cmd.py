"""Evaluate methods on a dataset: recall, precision, k, diff-k, tokens, reduction.

Results are appended to DIR/results.jsonl as they are made; rerunning the same
command resumes where a killed run stopped. DIR/summary.md and summary.json
hold the table, DIR/plots the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ctxsel.cli.common import (
    add_llm_arguments,
    add_split_arguments,
    auto_template,
    load_examples,
    make_judge,
    make_reader_and_judge,
    positive_int,
    shard,
)
from ctxsel.cli.config_file import add_config_argument
from ctxsel.cli.scorer_args import add_scorer_arguments, add_stage_argument, make_ranking, make_scorer
from ctxsel.errors import InputError

NAME = "eval"
HELP = "evaluate methods on a dataset"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ctxsel.eval.runner import DEFAULT_METHODS
    from ctxsel.eval.stats import CI_METHODS

    add_config_argument(p)
    p.add_argument(
        "--dataset",
        required=True,
        help="hotpotqa-long, example, a JSONL path (generic or HELMET layout), novelqa:DIR or marathon:FILE",
    )
    p.add_argument("--methods", "--method", default=",".join(DEFAULT_METHODS), help="comma-separated method specs")
    p.add_argument(
        "--policy",
        default=None,
        help="trained LDAR policy folder for every `ldar` method given without policy= (default: the bundled policy)",
    )
    add_split_arguments(p)
    p.add_argument("--output", required=True, help="output folder")
    p.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        metavar="N",
        help="only the first N examples (of the split, with --split); N >= 1",
    )
    p.add_argument(
        "--shard",
        type=shard,
        default=None,
        metavar="I/N",
        help="only examples I, I+N, I+2N, ... (after --split and --limit), so that N processes or machines "
        "share one run, each into its own --output; a shard's rows are the whole run's (its config differs "
        "only in n_examples), so its results.jsonl lines can be appended to the whole run's folder, and the "
        "whole run's command, rerun there, resumes past them and writes the summary of all",
    )
    p.add_argument(
        "--hotpotqa", default=None, help="another HotpotQA file for hotpotqa-long (default: the bundled copy)"
    )
    p.add_argument("--plot-example", default=None, help="example id whose similarity curve is plotted")
    p.add_argument(
        "--ci",
        choices=CI_METHODS,
        default="bootstrap",
        help="a 95%% interval beside every mean: a seeded bootstrap over examples (2,000 resamples; default), or none",
    )
    p.add_argument(
        "--compare",
        default=None,
        metavar="METHOD",
        help="every other row's paired difference to this row (one of --methods) on the same examples, with its "
        "95%% interval and a paired test (exact McNemar for 0/1 scores, paired bootstrap otherwise); none: no "
        "comparisons (to run other rows of a --config that names one)",
    )
    p.add_argument("--overwrite", action="store_true", help="discard earlier results in --output")
    p.add_argument(
        "--rescore",
        action="store_true",
        help="select and read nothing: score the answers already in --output again (with --judge, or SubEM / "
        "set overlap without it) and rewrite its summary; the rows keep everything else as measured",
    )
    p.add_argument(
        "--no-retry-errors",
        action="store_true",
        help="on resume, keep rows that ended in an error instead of running them again",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars (evaluation and embedding)")
    e = p.add_argument_group("engine: where the examples run (the results are the same)")
    e.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local: this process (default); ray: Ray Data actors, on a local cluster or --ray-address",
    )
    e.add_argument(
        "--ray-address",
        default=None,
        help="join this Ray cluster (e.g. auto, HOST:6379, ray://HOST:10001; default $RAY_ADDRESS, "
        "else a local cluster started for the run)",
    )
    e.add_argument("--ray-actors", type=positive_int, default=None, help="worker actors (default: one per cluster CPU)")
    e.add_argument(
        "--ray-cpus-per-actor",
        type=float,
        default=0.5,
        help="CPUs each actor asks for (default 0.5: Ray Data's own tasks need the rest)",
    )
    e.add_argument("--ray-num-cpus", type=int, default=None, help="CPUs of a local cluster (default: all cores)")
    add_scorer_arguments(p)
    add_stage_argument(p)
    p.add_argument(
        "--rankings",
        default=None,
        metavar="LIST",
        help="compare rankings side by side: comma-separated SCORER[+EXPANSION] entries, e.g. "
        "dense,bm25,hybrid,hybrid+hop,hybrid+links,hybrid+hop+links; every method runs under every "
        "ranking, in rows labelled 'METHOD on RANKING' (--scorer and --expand are then unused; --rerank follows each)",
    )
    g = p.add_argument_group("reading (optional): answer with an LLM and score the answers")
    add_llm_arguments(g)
    g.add_argument(
        "--template",
        default="auto",
        choices=["auto", "factoid-qa", "holobench-qa", "holobench-json", "multiple-choice"],
        help="reader prompt; auto: multiple-choice for questions with options, for HoloBench-style data "
        "holobench-json (structured) or holobench-qa (free) by --answer-format, else factoid-qa",
    )
    g.add_argument(
        "--answer-format",
        default="structured",
        choices=["structured", "free"],
        help="aggregation (HoloBench-style) answers with --template auto: structured (a JSON number, list or "
        "key/value list by the question's answer kind, under a grammar / JSON schema, parsed strictly; "
        "default) or free (the paper's reasoning-then-answer text); recorded in config.json",
    )
    g.add_argument(
        "--self-route-fallback-tokens",
        type=int,
        default=None,
        help="cap Self-Route's full-context fallback at this many tokens (when the full context "
        "does not fit the reader's window): sets self-route[fallback_max_tokens=N] on every self-route "
        "method that does not set it",
    )
    add_llm_arguments(g, "--judge")


def run(args: argparse.Namespace) -> int:
    from ctxsel.eval.report import markdown_table
    from ctxsel.eval.runner import evaluate
    from ctxsel.selectors import parse_spec, split_specs, with_option

    examples = load_examples(args)
    dataset_name = f"{args.dataset} ({args.split} split: {len(examples)} questions)" if args.split else args.dataset
    if not examples:
        raise InputError(f"dataset {args.dataset!r} has no examples")
    if args.shard:
        part, parts = args.shard
        if part > len(examples):
            raise InputError(f"--shard {part}/{parts}: part {part} is empty, there are only {len(examples)} examples")
        examples = examples[part - 1 :: parts]
    if args.rescore:
        return _rescore(args, examples, dataset_name)
    reader = judge = None
    if not split_specs(args.methods):
        raise InputError(
            f"--methods {args.methods!r} names no method; give comma-separated specs, e.g. adaptive-k,top-k@5,full"
        )
    methods = split_specs(args.methods)
    compare = None if args.compare in (None, "none") else args.compare
    template = None
    if args.reader:
        template = auto_template(examples[0], args.answer_format) if args.template == "auto" else args.template
        reader, judge = make_reader_and_judge(args, template)
        if args.self_route_fallback_tokens:  # an alias of the spec option, on every self-route row
            methods = [
                with_option(m, "fallback_max_tokens", args.self_route_fallback_tokens)
                if parse_spec(m)[0] == "self-route"
                else m
                for m in methods
            ]
    ray_options = None
    if args.engine == "ray":
        import functools

        from ctxsel.eval.ray_engine import RayOptions

        env = {}
        for flag in ("reader", "judge"):  # the workers build their own clients and need the key too
            key_env = getattr(args, f"{flag}_api_key_env") if getattr(args, flag) else None
            if key_env and os.environ.get(key_env):
                env[key_env] = os.environ[key_env]
        ray_options = RayOptions(
            address=args.ray_address,
            num_cpus=args.ray_num_cpus,
            num_actors=args.ray_actors,
            cpus_per_actor=args.ray_cpus_per_actor,
            env_vars=env,
            reader_factory=functools.partial(make_reader_and_judge, args, str(template)) if args.reader else None,
        )
    ray_runs: list[Any] = []  # what the Ray engine reports, when it runs
    summary = evaluate(
        examples,
        methods,
        output_dir=args.output,
        scorer=make_ranking(args, progress=not args.no_progress) if not args.rankings else None,
        rankings=make_rankings(args) if args.rankings else None,
        dataset_name=dataset_name,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        plot_example=args.plot_example,
        reader=reader,
        judge=judge,
        engine=args.engine,
        ray_options=ray_options,
        retry_errors=not args.no_retry_errors,
        on_ray_run=ray_runs.append,
        ci=args.ci,
        compare=compare,
        stages=args.stage,
        # rows keep the label `ldar`; SAGE embeds its answers the way the scorer embeds chunks
        resources={"backend": args.backend, **({"policy": args.policy} if args.policy else {})},
    )
    for info in ray_runs:
        if info.num_actors:
            how = "started a local cluster" if info.started_cluster else "used the running session"
            if args.ray_address or os.environ.get("RAY_ADDRESS"):
                how = f"joined {args.ray_address or os.environ['RAY_ADDRESS']}"
            print(
                f"ray: {how} ({info.init_s:.1f} s), {info.cluster_cpus:g} CPUs, {info.num_actors} actors "
                f"x {args.ray_cpus_per_actor:g} CPU; examples took {info.run_s:.1f} s",
                file=sys.stderr,
            )
    print(markdown_table(summary), end="")
    report = json.loads((Path(args.output) / "summary.json").read_text(encoding="utf-8"))
    if reader is not None:
        _print_reading(summary, report)
    from ctxsel.eval.report import REPLY_METRICS

    picker_rows = {m: e for m, e in summary.items() if any(k in e for k in REPLY_METRICS)}
    if picker_rows:
        from ctxsel.eval.report import SELECTOR_REPLY_COLUMNS

        print("\n" + markdown_table(picker_rows, SELECTOR_REPLY_COLUMNS), end="")
    if compare:
        from ctxsel.eval.report import comparisons_table

        print(f"\npaired differences to {compare}:\n" + comparisons_table(report["comparisons"]), end="")
    plots = ", plots/" if os.path.isdir(os.path.join(args.output, "plots")) else ""  # none without matplotlib
    print(f"\nwrote {args.output}/results.jsonl, summary.md, summary.json{plots}")
    return 0


def _rescore(args: argparse.Namespace, examples: list[Any], dataset_name: str) -> int:
    from ctxsel.eval.rescore import rescore

    summary = rescore(
        examples, args.output, dataset_name=dataset_name, judge=make_judge(args), progress=not args.no_progress
    )
    _print_reading(summary, json.loads((Path(args.output) / "summary.json").read_text(encoding="utf-8")))
    print(f"\nrescored the answers in {args.output}/results.jsonl; rewrote summary.md, summary.json")
    return 0


def _print_reading(summary: dict[str, Any], report: dict[str, Any]) -> None:
    """The reading table, and the judge's check against the deterministic score when a judge scored."""
    from ctxsel.eval.report import agreement_text, markdown_table, reader_columns

    agreement = report.get("judge_agreement")
    trusted = agreement is None or agreement["trusted"]
    print("\n" + markdown_table(summary, reader_columns(summary, judge_trusted=trusted)), end="")
    if agreement is not None:
        print("\n" + agreement_text(agreement, str(report["config"]["judge"])), end="")


def make_rankings(args: argparse.Namespace) -> dict[str, Any]:
    """``--rankings``: label -> ranking chain (the scorer, then ``--rerank`` if given, then the entry's
    expansion). Rankings with a dense part share one dense scorer, so the pool is embedded once (a cascade's
    fast part too, and its accurate part is an ``accurate`` ranking's scorer when one comes before it); all
    share one rerank scorer."""
    from ctxsel.ranking import Ranking
    from ctxsel.ranking.rerank import build_second, parse_rerank
    from ctxsel.scoring import parse_scorer_spec
    from ctxsel.selectors import split_specs

    out: dict[str, Any] = {}
    base: dict[str, Any] = {}
    dense = None
    rerank = parse_rerank(args.rerank or None)
    second = None if rerank is None else build_second(rerank, num_threads=args.threads, show_progress=False)
    for entry in split_specs(args.rankings):
        scorer_part, _, expansion = entry.partition("+")
        name, options = parse_scorer_spec(scorer_part)
        if scorer_part not in base:
            if name == "dense" and not options:
                dense = dense or make_scorer(args, spec="dense")
                base[scorer_part] = dense
            elif name == "hybrid" and "dense_scorer" not in options:
                dense = dense or make_scorer(args, spec="dense")
                from ctxsel.scoring.hybrid import HybridScorer

                base[scorer_part] = HybridScorer(**options, dense_scorer=dense)
            elif name == "cascade" and "fast_scorer" not in options:
                from ctxsel.ranking.cascade import DEFAULT_FAST
                from ctxsel.scoring import get_scorer
                from ctxsel.scoring.hybrid import HybridScorer

                dense = dense or make_scorer(args, spec="dense")
                fast = options.get("fast", DEFAULT_FAST)
                shared: dict[str, Any] = {}
                if fast in ("dense", "hybrid"):  # the pool is embedded once, by the shared dense scorer
                    shared["fast_scorer"] = (
                        dense if fast == "dense" else base.get("hybrid") or HybridScorer(dense_scorer=dense)
                    )
                if options.get("accurate", "accurate") == "accurate" and "accurate" in base:
                    shared["accurate_scorer"] = base["accurate"]
                flags = {"num_threads": args.threads, "show_progress": False, **options, **shared}
                base[scorer_part] = get_scorer("cascade", **flags)
            else:
                base[scorer_part] = make_scorer(args, spec=scorer_part)
        out[entry] = Ranking(base[scorer_part], rerank=rerank, expand=expansion or None, second=second)
    if not out:
        raise InputError("--rankings is empty: give e.g. dense,bm25,hybrid+hop")
    return out
