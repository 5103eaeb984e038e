"""``ctxsel train ldar``: LDAR's flags and its run (REINFORCE, then the held-out evaluation).

The flags the two methods share (--dataset, --output, the split, --seed, --threads, the scorer)
are added here too, as LDAR's groups have always shown them; :mod:`ctxsel.cli.train_cmd` builds
the one ``ctxsel train`` parser from both methods' modules.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ctxsel.cli.common import add_llm_arguments, auto_template, make_reader_and_judge
from ctxsel.cli.dataclass_args import add_dataclass_arguments, from_args
from ctxsel.errors import InputError

DEFAULT_EVAL_METHODS = "adaptive-k,top-k@5,top-k@10,full"
#: The flags generated from the config dataclasses (ctxsel.cli.dataclass_args): the network's, the trainer's.
NETWORK_FLAGS = ["head", "encoder", "embedding"]
TRAIN_FLAGS = ["steps", "batch_size", "lr", "seed", "snap_top", "threads", "checkpoint_every", "eval_every"]
#: Options against collapse to one band (off by default: the paper's Table 4 has none of them).
STABILITY_FLAGS = ["baseline", "normalize_advantages", "entropy_coef", "lr_schedule"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """LDAR's groups of the ``ctxsel train`` parser (and the flags both methods share)."""
    r = p.add_argument_group("reward")
    r.add_argument(
        "--reward",
        choices=["label", "llm"],
        default="label",
        help="label: F-beta of gold-chunk recall/precision (no LLM); llm: the reader's answer is "
        "correct (the paper's reward; needs --reader)",
    )
    r.add_argument("--beta", type=float, default=2.0, help="beta of the label reward's F-beta (default 2)")
    r.add_argument(
        "--cost-weight",
        type=float,
        default=0.0,
        help="App. D.5 cost regularisation: subtract this times the fraction of full-context tokens",
    )
    from ctxsel.selectors.ldar.config import PolicyConfig
    from ctxsel.train.ldar.config import TrainConfig

    n = p.add_argument_group("network (the defaults are the paper's LDAR; the others are its ablations)")
    add_dataclass_arguments(n, PolicyConfig, NETWORK_FLAGS)
    add_dataclass_arguments(n, TrainConfig, ["snap_top"])
    t = p.add_argument_group("training (defaults: the paper's Table 4)")
    add_dataclass_arguments(t, TrainConfig, ["steps", "batch_size", "lr"])
    t.add_argument(
        "--init-policy",
        default=None,
        help="start from this trained policy's weights (e.g. a label-trained one before --reward llm)",
    )
    add_dataclass_arguments(t, TrainConfig, ["seed", "threads", "checkpoint_every", "eval_every"])
    add_dataclass_arguments(
        p.add_argument_group("against collapse to one band (off by default: not in the paper)"),
        TrainConfig,
        STABILITY_FLAGS,
    )
    t.add_argument(
        "--train-fraction",
        type=float,
        default=0.8,
        help="share of the questions trained on; the rest are held out (default 0.8)",
    )
    t.add_argument("--split-seed", type=int, default=0, help="seed of the train/test split (default 0)")
    t.add_argument("--overwrite", action="store_true", help="discard an earlier run in --output")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    e = p.add_argument_group("evaluation on the held-out questions")
    e.add_argument(
        "--eval-methods",
        default=DEFAULT_EVAL_METHODS,
        help=f"baselines evaluated beside the policy (default {DEFAULT_EVAL_METHODS})",
    )
    e.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation after training")
    s = p.add_argument_group("scoring")
    s.add_argument(
        "--scorer",
        default="dense",
        choices=["dense", "bm25", "keywords", "hybrid"],
        help="how chunks are scored for the policy's input (default: dense)",
    )
    s.add_argument("--model", default=None, help="embedding model path or name (default: bundled all-MiniLM-L6-v2)")
    s.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "torch", "onnx", "onnx-int8"],
        help="how the dense scorer runs the model (default auto: ONNX int8 on a CPU with VNNI, fp32 elsewhere; "
        "name one to train on the same scores on every machine)",
    )
    g = p.add_argument_group("reader for --reward llm")
    add_llm_arguments(g)
    g.add_argument(
        "--template",
        default="auto",
        choices=["auto", "factoid-qa", "holobench-qa"],
        help="reader prompt; auto: holobench-qa for HoloBench-style data, else factoid-qa",
    )
    add_llm_arguments(g, "--judge")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.splits import split_examples, split_ids
    from ctxsel.eval.report import markdown_table
    from ctxsel.eval.results import write_atomic
    from ctxsel.eval.runner import evaluate
    from ctxsel.ranking.chain import scores_id
    from ctxsel.scoring import get_scorer
    from ctxsel.selectors import split_specs
    from ctxsel.selectors.ldar.config import PolicyConfig
    from ctxsel.train.ldar.config import TrainConfig
    from ctxsel.train.ldar.items import TrainItem
    from ctxsel.train.ldar.rewards import CostRegularized, LabelReward, LLMCorrectnessReward, describe_reward
    from ctxsel.train.ldar.trainer import Trainer

    if args.reward == "llm" and not args.reader:
        raise InputError("--reward llm needs a reader: --reader local (the bundled model) or --reader URL")
    # settings first: one that no run can use stops here, before the data is read, scored or written
    policy_config = from_args(PolicyConfig, args, NETWORK_FLAGS)
    train_config = from_args(TrainConfig, args, TRAIN_FLAGS + STABILITY_FLAGS, random_reference=args.reward == "label")
    examples = load_dataset(args.dataset, hotpotqa_path=args.hotpotqa)
    if len(examples) < 2:
        raise InputError(f"dataset {args.dataset!r} has {len(examples)} example(s); training needs a split")
    out = Path(args.output)
    if args.bundle:
        from ctxsel.bundled import check_destination

        check_destination(args.bundle, out / "policy")
    out.mkdir(parents=True, exist_ok=True)
    train_ids, test_ids = split_ids([e.id for e in examples], args.train_fraction, args.split_seed)
    train = split_examples(examples, "train", args.train_fraction, args.split_seed)
    test = split_examples(examples, "test", args.train_fraction, args.split_seed)
    split = {
        "dataset": args.dataset,
        "train_fraction": args.train_fraction,
        "seed": args.split_seed,
        "train": train_ids,
        "test": test_ids,
    }
    write_atomic(out / "split.json", json.dumps(split, indent=1) + "\n")

    if args.scorer == "dense":
        scorer = get_scorer(
            "dense",
            model=args.model,
            backend=args.backend,
            num_threads=args.threads,
            show_progress=not args.no_progress,
        )
    else:
        scorer = get_scorer(args.scorer)
    items = [TrainItem(ex, np.asarray(scorer.score(ex.question, ex.chunks), dtype=np.float64)) for ex in train]

    snap_top = args.snap_top
    reward: LabelReward | LLMCorrectnessReward | CostRegularized
    if args.reward == "label":
        reward = LabelReward(args.beta)
    else:
        template = auto_template(examples[0]) if args.template == "auto" else args.template
        reader, judge = make_reader_and_judge(args, template)
        reward = LLMCorrectnessReward(
            reader,
            judge,
            cache_path=out / "llm_rewards.jsonl",
            namespace=f"{args.dataset}|{scores_id(scorer)}|snap_top={snap_top}",
        )
    if args.cost_weight:
        reward = CostRegularized(reward, args.cost_weight)

    info = {
        "dataset": args.dataset,
        "scorer": scores_id(scorer),
        "split": {k: v for k, v in split.items() if k not in ("train", "test")},
        "command": " ".join(["ctxsel", *sys.argv[1:]]) if sys.argv else None,
    }
    trainer = Trainer(
        items,
        reward,
        out,
        policy_config,
        train_config,
        info,
        progress=not args.no_progress,
        overwrite=args.overwrite,
        init_policy=args.init_policy,
    )
    if trainer.step:
        print(f"resuming {out} at step {trainer.step} of {args.steps}", file=sys.stderr)
    summary = trainer.train()
    what = describe_reward(reward)
    det = summary["final_train_deterministic"]
    print(
        f"trained LDAR ({policy_config.variant}) for {summary['steps']} steps with the {what['name']} reward "
        f"({what.get('metric', '')})"
        + (
            ""
            if not det
            else f"; deterministic reward on the {len(train)} training questions: "
            f"{summary['reference']['initial']['reward']:.3f} at step 0 -> {det['reward']:.3f}"
        )
    )
    llm_reward = getattr(reward, "base", reward)
    if isinstance(llm_reward, LLMCorrectnessReward):
        print(
            f"LLM reward: {llm_reward.calls} reader calls, {llm_reward.hits} served from the band cache, "
            f"{llm_reward.overflows} bands longer than the reader's window (reward 0)"
        )
    result = {"training": summary, "split": {"n_train": len(train), "n_test": len(test)}}
    if not args.no_eval:
        methods = [f"ldar[policy={out / 'policy'}]", *split_specs(args.eval_methods)]
        ev = evaluate(
            test,
            methods,
            output_dir=out / "eval",
            scorer=scorer,
            dataset_name=f"{args.dataset} (test split: {len(test)} questions)",
            overwrite=True,
            progress=not args.no_progress,
        )
        result["eval"] = ev
        print(f"\nheld-out questions ({len(test)}); LDAR trained with the {what['name']} reward:\n")
        print(markdown_table(ev), end="")
        print(f"\nwrote {out}/policy, checkpoint/, reward_curve.png/.json, split.json, eval/")
    if args.bundle:
        from ctxsel.train.ldar.bundle import bundle_ldar, ldar_card

        made_by = str(info["command"] or f"ctxsel train ldar --output {out}")
        heldout = markdown_table(result["eval"]) if "eval" in result else ""
        sums = bundle_ldar(
            out / "policy", args.bundle, made_by, card=lambda d, s: ldar_card(d, s, made_by, heldout=heldout)
        )
        result["bundle"] = {"folder": str(args.bundle), "sha256": sums}
        print(
            f"bundled {out}/policy into {args.bundle} (MODEL_CARD.md, manifest.json; model.safetensors sha256 "
            f'{sums["model.safetensors"][:16]}); use --method "ldar[policy={args.bundle}]"'
        )
    write_atomic(out / "train_summary.json", json.dumps(result, indent=1, default=str) + "\n")
    return 0
