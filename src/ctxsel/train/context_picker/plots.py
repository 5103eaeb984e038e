"""The two stages' reward curves in one PNG (``OUT/reward_curves.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxsel.plotting import pyplot


def plot_curves(path: Path, curves: dict[str, Any]) -> None:
    """The stages' reward curves in one PNG; nothing without matplotlib (``ctxsel.plotting``)."""
    plt = pyplot()
    if plt is None:
        return
    stages = [curves[k] for k in ("stage1", "stage2") if k in curves]
    fig, axes = plt.subplots(1, max(1, len(stages)), figsize=(5.5 * max(1, len(stages)), 3.8), squeeze=False)
    for ax, c in zip(axes[0], stages):
        if c["train"]:
            ax.plot([p["step"] for p in c["train"]], [p["reward"] for p in c["train"]], lw=1, label="train (sampled)")
        if c["val"]:
            ax.plot(
                [p["step"] for p in c["val"]], [p["reward"] for p in c["val"]], "o-", ms=4, label="validation (greedy)"
            )
        r = c["reward"]
        ax.set_title(f"stage {c['stage']}: red={r['red']}, alpha={r['alpha']}", fontsize=9)
        ax.set_xlabel("GRPO step")
        ax.set_ylabel("reward")
        ax.set_ylim(-1.05, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


__all__ = ["plot_curves"]
