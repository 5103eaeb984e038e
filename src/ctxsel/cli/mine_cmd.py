"""Mine minimal sufficient evidence sets for Context-Picker (Algorithm 1) into a JSONL file.

    ctxsel mine --dataset hotpotqa-long --limit 20 --reader local --output runs/mined/hotpotqa.jsonl

BM25 on question + answer gives the top-k candidates; the generator
(--reader) answers from them and a judge (SubEM, or --judge for the LLM
judge) checks the answer; wrong answers drop the question, right ones are
pruned by leave-one-out. One JSON line per question (kept or not), appended
as it is made: rerun the same command to resume. --rewrites 5 adds the
paper's five query rewrites to each kept question (by the --reader LLM).
With gold chunks (HotpotQA's supporting facts) the mined sets are compared
with them, printed and, with --report, written as Markdown.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ctxsel.cli.common import (
    add_llm_arguments,
    add_split_arguments,
    load_examples,
    make_judge,
    make_llm,
    positive_int,
)
from ctxsel.cli.dataclass_args import add_dataclass_arguments, from_args
from ctxsel.errors import InputError

NAME = "mine"
HELP = "mine Context-Picker's minimal sufficient evidence sets (leave-one-out) into JSONL"


#: The MineConfig fields ``ctxsel mine`` exposes (flags generated: ctxsel.cli.dataclass_args).
MINE_FLAGS = ["k", "rewrites", "constrained_rewrites"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="hotpotqa-long, example, or a JSONL path")
    p.add_argument(
        "--hotpotqa", default=None, help="another HotpotQA file for hotpotqa-long (default: the bundled copy)"
    )
    add_split_arguments(p)  # mine only the questions a picker may be trained on: --split train
    p.add_argument(
        "--limit",
        type=positive_int,
        default=None,
        metavar="N",
        help="only the first N questions (of the split, with --split); N >= 1",
    )
    p.add_argument("--output", required=True, help="JSONL file of mined sets (rerun to resume)")
    from ctxsel.train.context_picker.mining import MineConfig

    add_dataclass_arguments(p, MineConfig, MINE_FLAGS)
    p.add_argument("--report", default=None, help="also write the comparison with the gold chunks here (Markdown)")
    p.add_argument("--overwrite", action="store_true", help="discard an earlier run in --output")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    g = p.add_argument_group("generator (required) and judge (default SubEM)")
    add_llm_arguments(g)
    add_llm_arguments(g, "--judge")


def run(args: argparse.Namespace) -> int:
    from ctxsel.eval.results import write_atomic
    from ctxsel.reader import Reader
    from ctxsel.train.context_picker.mining import (
        LLMJudgeAdapter,
        compare_with_supporting_facts,
        comparison_markdown,
        mine,
        subem_judge,
    )

    if not args.reader:
        raise InputError("ctxsel mine needs a generator: --reader local (the bundled model) or --reader URL")
    from ctxsel.train.context_picker.mining import MineConfig

    cfg = from_args(MineConfig, args, MINE_FLAGS)
    examples = load_examples(args)
    llm = make_llm(args)
    generator = Reader(llm, "factoid-qa")
    judge = subem_judge
    judge_id = "subem"
    if args.judge:
        judge = LLMJudgeAdapter(make_judge(args))
        judge_id = f"llm-judge:{judge.model_id}"
    augment = None
    if cfg.rewrites:
        from ctxsel.train.context_picker.rewrite import rewrite_query

        def augment(rec: dict[str, Any]) -> dict[str, Any]:
            if not rec["kept"]:
                return rec
            out = rewrite_query(llm, rec["question"], cfg.rewrites, constrained=cfg.constrained_rewrites)
            return {**rec, "rewrites": out["rewrites"], "rewrite_errors": out["errors"]}

    settings = {
        "dataset": args.dataset,
        "generator": llm.model_id,
        "template": generator.template.key,
        "judge": judge_id,
        "rewrites": cfg.rewrites,
        **({"constrained_rewrites": True} if cfg.constrained_rewrites else {}),
        **({"split": [args.split, args.train_fraction, args.split_seed]} if args.split else {}),
    }
    records = mine(
        examples,
        generator,
        args.output,
        judge=judge,
        k=cfg.k,
        settings=settings,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        augment=augment,
    )
    cmp = compare_with_supporting_facts(records)
    title = (
        f"Mined evidence sets vs the gold chunks: {args.dataset}"
        f"{f' ({args.split} split)' if args.split else ''}, first {len(records)} questions, "
        f"k={cfg.k}, generator {llm.model_id}, judge {judge_id}"
    )
    md = comparison_markdown(cmp, f"### {title}")
    print(md)
    if args.report:
        cmd = "ctxsel " + " ".join(sys.argv[1:]) if sys.argv else ""
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)  # a report in a new folder
        write_atomic(Path(args.report), md + (f"\nCommand: `{cmd}`\n" if cmd else ""))
    print(f"wrote {args.output}" + (f" and {args.report}" if args.report else ""))
    return 0
