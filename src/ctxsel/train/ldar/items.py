"""LDAR's training questions and the light Selections its sampled actions make of them, for the
reward functions (a band of ranks, or the Bernoulli ablation's picks)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ctxsel.errors import InputError
from ctxsel.selectors.base import rank
from ctxsel.selectors.ldar.band import LDARBand, band_ranks, select_band
from ctxsel.types import Example, Selection


@dataclass
class TrainItem:
    """One training question: its example and the chunks' scores (chunk order)."""

    example: Example
    scores: np.ndarray
    order: np.ndarray = field(init=False)
    ascending: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        s = np.asarray(self.scores, dtype=np.float64)
        if len(s) != len(self.example.chunks):
            raise InputError(f"{self.example.id}: {len(s)} scores for {len(self.example.chunks)} chunks")
        order, n_finite = rank(s, "last")
        if n_finite == 0:
            raise InputError(f"{self.example.id}: no finite scores to train on")
        self.order = order[:n_finite]  # non-finite scores take no part, as in the selector
        self.ascending = s[self.order][::-1].astype(np.float32).copy()

    @property
    def n(self) -> int:
        return len(self.order)


def selection_from(item: TrainItem, idx: np.ndarray, details: LDARBand) -> Selection:
    """A light Selection of chunk indices ``idx`` (most similar first) for a reward function."""
    chunks = [item.example.chunks[int(i)] for i in idx]
    return Selection(
        ids=[c.id for c in chunks],
        scores=[float(item.scores[int(i)]) for i in idx],
        chunks=chunks,
        method="ldar",
        config={},
        explanation="",
        n_candidates=len(item.example.chunks),
        details=details,
    )


def band_selection(item: TrainItem, q_l: float, q_d: float, snap_top: bool) -> Selection:
    q_u = min(1.0, q_l + (1.0 - q_l) * q_d)
    l, u = band_ranks(item.n, q_l, q_u, snap_top=snap_top)
    band = LDARBand(item.n, sample=True, l=l, u=u, q_l=q_l, q_d=q_d, q_u=q_u)
    return selection_from(item, select_band(item.order, l, u), band)


def picks_selection(item: TrainItem, picks: np.ndarray) -> Selection:
    """Bernoulli picks over ascending positions -> chunks, most similar first."""
    asc = np.flatnonzero(picks[: item.n])
    idx = item.order[item.n - 1 - asc[::-1]] if len(asc) else np.zeros(0, dtype=np.int64)
    return selection_from(item, idx, LDARBand(item.n, sample=True, n_picked=len(asc)))


__all__ = ["TrainItem", "band_selection", "picks_selection", "selection_from"]
