"""Train a learned selector on the training side of a fixed split (LDAR is then evaluated on the rest).

    ctxsel train ldar --dataset hotpotqa-long --reward label --output runs/ldar/label
    ctxsel train ldar --dataset hotpotqa-long --reward llm --reader local --output runs/ldar/llm
    ctxsel train ldar --dataset hotpotqa-long --reward label --output runs/ldar/label --bundle runs/ldar/shipped
    ctxsel train context-picker --dataset hotpotqa-long --mined runs/mined/hotpotqa100.jsonl --output runs/picker
    ctxsel train context-picker --dataset hotpotqa-long --labels --output runs/picker_labels

The dataset is split with a fixed seed (80% train, 20% test by default: 80
and 20 questions of hotpotqa-long).

ldar (REINFORCE) writes OUTPUT/policy (the trained policy: safetensors +
JSON, including which reward trained it), OUTPUT/checkpoint (resumable:
rerun the same command to continue a killed run, or raise --steps to train
longer), OUTPUT/reward_curve.{json,png} and OUTPUT/split.json. Then the
policy and --eval-methods are evaluated on the test questions into
OUTPUT/eval (as `ctxsel eval` would).

context-picker (two-stage GRPO; `picker` is the same command) trains on the
questions `ctxsel mine` kept (and their rewrites) of the training side; 20% of the
training questions are held out again for the validation reward that ends
stage 1. Writes OUTPUT/stage1, OUTPUT/stage2 (adapters; use as
--method "context-picker[adapter=OUTPUT/stage2]"), OUTPUT/reward_curves.{json,png},
OUTPUT/train_summary.json and OUTPUT/split.json. The default base is the
bundled Qwen2.5-Coder-0.5B-Instruct (GGUF, de-quantised once into PyTorch);
--base tiny is the random test model.

--bundle DIR then writes the trained artefact into DIR as the package ships
one: the files its loader reads, MODEL_CARD.md, and manifest.json with each
file's sha256 and size, which ctxsel checks before a file is read. Run it with
--method "ldar[policy=DIR]" or "context-picker[adapter=DIR]"; in a checkout,
--bundle src/ctxsel/data/ldar replaces the bundled policy (what `make
ldar-policy` does). LDAR resumes a finished run, so its command rerun with
--bundle DIR --no-eval only bundles.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ctxsel.cli import train_context_picker_cmd, train_ldar_cmd
from ctxsel.cli.config_file import add_config_argument

NAME = "train"
HELP = "train a learned selector (LDAR with REINFORCE; Context-Picker with two-stage GRPO)"
#: each method's run, from its command module; ``picker`` is the older name of ``context-picker``, kept working
METHODS: dict[str, Callable[[argparse.Namespace], int]] = {
    "ldar": train_ldar_cmd.run,
    "context-picker": train_context_picker_cmd.run,
    "picker": train_context_picker_cmd.run,
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """One parser for both methods: the flags they share here, then each method's own."""
    p.add_argument(
        "method",
        choices=list(METHODS),
        help="what to train (picker: the same as context-picker; each method's flags are in its groups below)",
    )
    add_config_argument(p)
    p.add_argument("--dataset", required=True, help="hotpotqa-long, example, or a JSONL path")
    p.add_argument(
        "--hotpotqa", default=None, help="another HotpotQA file for hotpotqa-long (default: the bundled copy)"
    )
    p.add_argument("--output", required=True, help="output folder (rerun to resume)")
    p.add_argument(
        "--bundle",
        default=None,
        metavar="DIR",
        help="after training, write the trained artefact into DIR as ctxsel ships one: its files, MODEL_CARD.md "
        "and manifest.json (each file's sha256 and size, checked before it is read). ldar: OUTPUT/policy; "
        "context-picker: the last stage trained, in float16 (on a bundled model, at most 10 MB)",
    )
    train_ldar_cmd.add_arguments(p)
    train_context_picker_cmd.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    return METHODS[args.method](args)
