"""Knee: cut the sorted score curve at its knee, found by Kneedle.

Kneedle (Satopää, Albrecht, Irwin and Raghavan, "Finding a 'Kneedle' in a
Haystack", ICDCS workshops 2011), as the ``kneed`` package implements it
offline with ``curve="convex", direction="decreasing"``: ranks and scores
are normalised to [0, 1], the scores are flipped to a concave increasing
curve, the straight line is subtracted, and the knee is the first local
maximum of that difference after which the difference falls below the
maximum minus ``sensitivity`` times the mean step (kneed's ``S``; 1, the
paper's default). The knee is the first point of the flat tail, so the
chunks ranked above it are kept: ``k`` is the knee's rank.

Where kneed warns and returns no knee (no local maximum, or a curve that
never falls below the threshold), and where it is undefined (fewer than
three scores, all scores equal), every chunk is kept, as autocut does when
its curve has no jump. The common ``min_k`` is the floor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ctxsel.options import CommonOptions, option
from ctxsel.selectors.base import Cut, ScoreCutSelector


def knee_index(sorted_scores: np.ndarray, sensitivity: float = 1.0) -> int | None:
    """The knee's rank in scores sorted descending, or None where there is none."""
    y = np.asarray(sorted_scores, dtype=np.float64)
    n = len(y)
    if n < 3 or y[0] == y[-1]:
        return None
    x = np.arange(n) / (n - 1)
    d = (y[0] - y) / (y[0] - y[-1]) - x  # flipped to concave increasing, minus the diagonal
    left, right = np.r_[d[0], d[:-1]], np.r_[d[1:], d[-1]]
    is_max = (d >= left) & (d >= right)  # scipy's argrelextrema(np.greater_equal), mode "clip"
    is_min = (d <= left) & (d <= right)
    maxima = np.flatnonzero(is_max)
    if not len(maxima):
        return None
    drop = sensitivity * (1.0 / (n - 1))  # S times the mean step of the normalised ranks
    threshold, at = 0.0, int(maxima[0])
    for i in range(int(maxima[0]), n - 1):
        if is_max[i]:
            threshold, at = d[i] - drop, i
        if is_min[i]:
            threshold = 0.0
        if d[i + 1] < threshold:
            return at
    return None


class Knee(ScoreCutSelector):
    cut_reads_tokens = False

    @dataclass(frozen=True)
    class Options(CommonOptions):
        sensitivity: float = option(
            1.0, minimum=0.0, doc="Kneedle's S: how far the difference curve must fall past a maximum"
        )

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        n = len(sorted_scores)
        at = knee_index(sorted_scores, self.sensitivity)
        if at is None:
            return Cut(n, f"knee S={self.sensitivity:g}: no knee in the curve, kept all {n}")
        return Cut(at, f"knee S={self.sensitivity:g}: knee at rank {at + 1}, kept {at} of {n}")
