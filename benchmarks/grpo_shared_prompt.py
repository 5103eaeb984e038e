"""Seconds per GRPO step of the picker with each question's prompt read once for its group
(``ctxsel.train.context_picker.shared_prompt``, the default) against TRL's way (every sample's prompt read again).

    python -m benchmarks.grpo_shared_prompt --run runs/picker_grpo --steps 2 --prompts-per-step 2

Both ways train the same rows (RUN/rows.json from ``context_picker_grpo.py prepare``) from the same
untrained model, each in a fresh process so that peak memory is its own; the training reward is
not compared (the two draw different samples), the tests check that the log-probabilities and
gradients agree. Writes benchmarks/results/grpo_shared_prompt.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._common import (
    RESULTS_DIR,
    child_env,
    header_md,
    loadavg,
    machine_info,
    md_table,
    module_argv,
    setup_threads,
    write_report,
)

MODES = {"separate": False, "shared": True}


def one(args: argparse.Namespace) -> None:
    """Train ``args.steps`` stage-1 steps one way; print the step times and peak memory as JSON."""
    from ctxsel.train.context_picker.config import PickerTrainConfig
    from ctxsel.train.context_picker.trainer import train_picker

    data = json.loads((args.run / "rows.json").read_text(encoding="utf-8"))
    cfg = PickerTrainConfig(
        base=args.base,
        stage1_max_steps=args.steps,
        stage2_steps=0,
        prompts_per_step=args.prompts_per_step,
        eval_every=0,
        n_tokens=data["pool_tokens"],
        threads=args.threads,
        share_prompt=MODES[args.one],
    )
    with tempfile.TemporaryDirectory() as out:
        res = train_picker(data["train"], [], out, cfg)
    curve = res["curves"]["stage1"]
    print(
        json.dumps(
            {
                "seconds": [s["seconds"] for s in curve["seconds"]],
                "reward": [t["reward"] for t in curve["train"]],
                "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            }
        )
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, default=Path("runs/picker_grpo"), help="folder with rows.json")
    p.add_argument("--base", default="qwen-0.5b")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--prompts-per-step", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--one", choices=list(MODES), help=argparse.SUPPRESS)  # the child process
    args = p.parse_args(argv)
    info_threads = setup_threads(args.threads)
    if args.one:
        return one(args)
    info = machine_info(info_threads, versions=("torch", "transformers", "trl"))
    data = json.loads((args.run / "rows.json").read_text(encoding="utf-8"))
    results = {}
    for mode in MODES:
        cmd = [
            *module_argv("benchmarks.grpo_shared_prompt"),
            *(argv if argv is not None else sys.argv[1:]),
            "--one",
            mode,
        ]
        print(f"{mode}: {args.steps} steps ...", file=sys.stderr, flush=True)
        done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=child_env())
        results[mode] = {**json.loads(done.stdout.strip().splitlines()[-1]), "loadavg_after": loadavg()}
    info["loadavg_end"] = loadavg()
    base = statistics.mean(results["separate"]["seconds"])
    rows = [
        [
            mode,
            " / ".join(f"{s:.0f}" for s in r["seconds"]),
            f"{statistics.mean(r['seconds']):.1f}",
            f"{base / statistics.mean(r['seconds']):.2f}x",
            f"{r['peak_rss_gb']:.1f}",
        ]
        for mode, r in results.items()
    ]
    md = header_md(
        "GRPO step time: one prompt pass per group against one per sample",
        info,
        [
            f"{args.base}, rows {args.run / 'rows.json'} (pool B = {data['pool_tokens']:,} tokens), "
            f"{args.prompts_per_step} questions x 8 samples a step, stage-1 steps from the untrained model, "
            "fp32 on CPU; `separate` is TRL's way (with its activation recomputation), `shared` "
            "ctxsel.train.context_picker.shared_prompt (recomputation per group)",
        ],
    )
    md += "\n" + md_table(["prompt read", "seconds a step", "mean s", "speed-up", "peak memory GB"], rows)
    write_report("grpo_shared_prompt", RESULTS_DIR, md, {"info": info, "args": vars(args) | {"run": str(args.run)},
                                                         "results": results})  # fmt: skip
    print(md)


if __name__ == "__main__":
    main()
