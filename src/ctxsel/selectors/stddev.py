"""Stddev: keep the chunks scoring at least ``z`` standard deviations above the mean.

A cut seen in agent-memory systems (MemMachine) and in anomaly rules:
``threshold = mean + z * std`` over the pool's finite scores, with the
population standard deviation (``ddof=0``), and every chunk at or above it
is kept. Unlike a fixed threshold it follows the scorer's scale.

Edge cases: all scores equal (std 0) keeps every chunk, since each is at
the mean; one score is kept for the same reason; non-finite scores follow
the common ``nan_policy`` and are left out of the mean and the deviation.
The common ``min_k`` is the floor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ctxsel.options import CommonOptions, option
from ctxsel.selectors._fastcut import RankView
from ctxsel.selectors.base import Cut, ScoreCutSelector


class Stddev(ScoreCutSelector):
    cut_reads_tokens = False

    @dataclass(frozen=True)
    class Options(CommonOptions):
        z: float = option(1.0, doc="keep scores at least mean + z * std (the population deviation)")

    def _threshold(self, finite: np.ndarray) -> float:
        x = finite.astype(np.float64, copy=False)
        if x.max() == x.min():  # the mean of equal values can round above them
            return float(x.min())
        return float(x.mean() + self.z * x.std())

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        t = self._threshold(sorted_scores)
        k = int(np.searchsorted(-sorted_scores.astype(np.float64), -t, side="right"))
        return self._explain(k, len(sorted_scores), t)

    def _fast_cut(self, view: RankView, n_tokens: np.ndarray) -> Cut:
        finite = view.xf  # a count, no ranking
        t = self._threshold(finite)
        return self._explain(int(np.count_nonzero(finite >= t)), len(finite), t)

    def _explain(self, k: int, n: int, t: float) -> Cut:
        return Cut(k, f"mean + {self.z:g} std = {t:.4g}: kept {k} of {n}")
