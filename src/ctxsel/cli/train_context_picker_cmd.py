"""``ctxsel train context-picker`` (alias ``picker``): Context-Picker's flags and its run, two-stage
GRPO on mined evidence sets (or labelled ones).

The kept mined questions (and their rewrites) are split by original question with the same fixed
split as every ``ctxsel train``; what the run writes: :mod:`ctxsel.cli.train_cmd`. It reads the
flags both methods share (--dataset, --output, the split, --seed, --threads, the scorer) from the
one ``ctxsel train`` parser.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ctxsel.cli.dataclass_args import add_dataclass_arguments, from_args
from ctxsel.errors import InputError

#: The PickerTrainConfig fields ``ctxsel train context-picker`` exposes (flags generated: ctxsel.cli.dataclass_args).
PICKER_FLAGS = [
    "base",
    "stage1_max_steps",
    "stage2_steps",
    "num_generations",
    "prompts_per_step",
    "lr",
    "beta",
    "warmup_steps",
    "n_tokens",
    "max_candidates",
    "max_completion_length",
    "eval_every",
    "stage_seconds",
    "stage2_seconds",
    "init_adapter",
    "shuffle_candidates",
    "share_prompt",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Context-Picker's group of the ``ctxsel train`` parser."""
    from ctxsel.train.context_picker.config import PickerTrainConfig

    g = p.add_argument_group("context-picker (ctxsel train context-picker)")
    g.add_argument("--mined", default=None, help="JSONL from `ctxsel mine`: S_gold mined by Algorithm 1")
    g.add_argument(
        "--labels",
        action="store_true",
        help="S_gold = each training question's labelled gold chunks instead of --mined sets (not the paper's "
        "mining; for datasets with evidence labels)",
    )
    add_dataclass_arguments(g, PickerTrainConfig, PICKER_FLAGS)


def picker_split(
    example_ids: list[str], records: list[dict[str, Any]], train_fraction: float, seed: int
) -> dict[str, list[str]]:
    """The kept questions on each side of the *dataset's* split (the one `ctxsel eval --split test`
    makes), not of a split over the kept questions alone: a question held out of evaluation is never
    trained on, whatever mining kept."""
    from ctxsel.datasets.splits import split_ids

    train_ids, test_ids = split_ids(example_ids, train_fraction, seed)
    kept = {r["id"] for r in records if r["kept"]}
    return {
        "train": [i for i in train_ids if i in kept],
        "test": [i for i in test_ids if i in kept],
        "dataset_test": test_ids,
    }


def run(args: argparse.Namespace) -> int:
    from ctxsel.cli.scorer_args import make_scorer
    from ctxsel.datasets import load_dataset
    from ctxsel.eval.results import write_atomic
    from ctxsel.train.context_picker.config import PickerTrainConfig
    from ctxsel.train.context_picker.mining import labelled_records, read_mined
    from ctxsel.train.context_picker.rewrite import split_records
    from ctxsel.train.context_picker.rows import picker_rows, split_train_val
    from ctxsel.train.context_picker.trainer import train_picker

    if bool(args.mined) == bool(args.labels):
        raise InputError("ctxsel train context-picker needs either --mined FILE.jsonl (from `ctxsel mine`) or --labels")
    # settings first: one that no run can use stops here, before the data is read, scored or written
    cfg = from_args(PickerTrainConfig, args, PICKER_FLAGS, seed=args.seed, threads=args.threads)
    examples = {e.id: e for e in load_dataset(args.dataset, hotpotqa_path=args.hotpotqa)}
    records = labelled_records(examples.values()) if args.labels else read_mined(args.mined)
    if not any(r["kept"] for r in records):
        raise InputError(f"no training question has an S_gold ({'no gold labels' if args.labels else 'none kept'})")
    unknown = [r["id"] for r in records if r["id"] not in examples]
    if unknown:
        raise InputError(
            f"{len(unknown)} mined ids are not in {args.dataset!r} (e.g. {unknown[0]!r}): wrong --dataset?"
        )
    out = Path(args.output)
    if args.bundle:
        from ctxsel.bundled import check_destination

        for stage in ("stage1", "stage2"):
            check_destination(args.bundle, out / stage)
    out.mkdir(parents=True, exist_ok=True)
    split = picker_split(list(examples), records, args.train_fraction, args.split_seed)
    write_atomic(out / "split.json", json.dumps({"mined": args.mined, "labels": args.labels, **split}, indent=1) + "\n")
    args.model = getattr(args, "model", None)
    scorer = make_scorer(args, progress=not args.no_progress)
    rows, stats = picker_rows(
        split_records(records, set(split["train"])),
        examples,
        scorer,
        cfg.n_tokens,
        cfg.max_candidates,
    )
    train_rows, val_rows = split_train_val(rows, 0.2, args.split_seed)
    print(f"{len(train_rows)} training rows, {len(val_rows)} validation questions ({stats})", file=sys.stderr)
    info = {
        "dataset": args.dataset,
        "mined": args.mined,
        "labels": args.labels,
        "rows": stats,
        "command": " ".join(["ctxsel", *sys.argv[1:]]) if sys.argv else None,
    }
    res = train_picker(train_rows, val_rows, out, cfg, info)
    for k, c in res["curves"].items():
        first, last = (c["val"][0]["reward"], c["val"][-1]["reward"]) if c["val"] else (None, None)
        print(
            f"{k}: {c['steps']} steps; validation reward {first} -> {last}"
            + (f" ({c['stopped']})" if c.get("stopped") else "")
        )
    stages = list(res["curves"])  # a stage trained for 0 steps was skipped
    print(
        f"wrote {out}/{', '.join(stages)} (adapters), reward_curves.png/.json, train_summary.json; use "
        f'--method "context-picker[adapter={out}/{stages[-1]}]"; held-out questions: --split test of the same split'
    )
    if args.bundle and stages:
        from ctxsel.train.context_picker.bundle import bundle_context_picker

        made_by = str(info["command"] or f"ctxsel train context-picker --output {out}")
        sums = bundle_context_picker(out / stages[-1], args.bundle, made_by)
        print(
            f"bundled {out}/{stages[-1]} into {args.bundle} (float16; MODEL_CARD.md, manifest.json; adapter sha256 "
            f'{sums["adapter/adapter_model.safetensors"][:16]}); use --method "context-picker[adapter={args.bundle}]"'
        )
    return 0
