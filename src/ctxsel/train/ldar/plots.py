"""LDAR's reward curve as a PNG (``OUTPUT/reward_curve.png``): the batch rewards and the
deterministic policy's on the training questions, beside the mean number of chunks selected."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def moving_average(x: Sequence[float], w: int) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if len(a) == 0:
        return a
    w = max(1, min(w, len(a)))
    c = np.cumsum(np.insert(a, 0, 0.0))
    head = c[1:w] / np.arange(1, w)
    return np.concatenate([head, (c[w:] - c[:-w]) / w])


def plot_curve(path: Path, doc: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in doc["steps"]]
    rewards = [r["reward"] for r in doc["steps"]]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    if steps:
        ax.plot(steps, rewards, lw=0.8, alpha=0.45, color="tab:blue", label="batch reward (sampled bands)")
        ax.plot(steps, moving_average(rewards, 10), lw=1.8, color="tab:blue", label="moving average (10 steps)")
    ev = doc.get("deterministic_train") or []
    if ev:
        ax.plot(
            [e["step"] for e in ev],
            [e["reward"] for e in ev],
            "o-",
            color="tab:green",
            ms=4,
            label="Beta-mean policy, training questions",
        )
    rb = doc.get("reference", {}).get("random_band")
    if rb:
        ax.axhline(rb["reward"], color="gray", ls="--", lw=1, label=f"uniform random band ({rb['reward']:.3f})")
    reward = doc.get("reward", {})
    ax.set_title(
        f"LDAR {doc.get('variant', '')}: reward = {reward.get('name')} "
        + (f"(beta={reward['beta']:g})" if "beta" in reward else ""),
        fontsize=9,
    )
    ax.set_xlabel("REINFORCE step")
    ax.set_ylabel("reward")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if steps:
        ax2.plot(steps, [max(r["k"], 0.5) for r in doc["steps"]], color="tab:orange", lw=1, label="sampled")
    if ev:
        ax2.plot(
            [e["step"] for e in ev],
            [max(e["k"], 0.5) for e in ev],
            "o-",
            color="tab:green",
            ms=4,
            label="Beta-mean policy",
        )
    ax2.set_yscale("log")
    ax2.set_xlabel("REINFORCE step")
    ax2.set_ylabel("chunks selected (mean k)")
    ax2.grid(alpha=0.3, which="both")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(path)
    return path


__all__ = ["moving_average", "plot_curve"]
