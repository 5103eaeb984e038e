"""The README's Context-Picker table: the picker with the bundled Gemma 3 270M beside top-k and adaptive-k.

Runs ``ctxsel eval`` on the 20 held-out hotpotqa-long questions (the fixed
test split every ``ctxsel train`` uses) with the local reader, and copies
its tables (recall, tokens, answer SubEM, LLM calls, invalid replies,
fallbacks) to benchmarks/results/context_picker_hotpotqa.md. Resumable and
cached: a rerun reuses runs/eval_picker.

    OMP_NUM_THREADS=1 python benchmarks/context_picker_hotpotqa.py [--methods ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_METHODS = "context-picker@1000,top-k@5,adaptive-k"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default=DEFAULT_METHODS)
    p.add_argument("--output", default="runs/eval_picker")
    p.add_argument("--result", type=Path, default=ROOT / "benchmarks" / "results" / "context_picker_hotpotqa.md")
    args = p.parse_args(argv)
    from ctxsel.cli.main import main as ctxsel

    cmd = [
        "eval",
        "--dataset",
        "hotpotqa-long",
        "--split",
        "test",
        "--methods",
        args.methods,
        "--reader",
        "local",
        "--output",
        args.output,
        "--threads",
        "1",
    ]
    rc = ctxsel(cmd)
    if rc:
        return rc
    summary = (Path(args.output) / "summary.md").read_text(encoding="utf-8")
    args.result.write_text(
        summary + f"\nCommand: `ctxsel {' '.join(cmd)}` (via `python benchmarks/context_picker_hotpotqa.py`)\n",
        encoding="utf-8",
    )
    print(f"wrote {args.result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
