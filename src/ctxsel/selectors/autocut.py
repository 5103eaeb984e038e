"""Weaviate's autocut: cut before the N-th jump in the score curve.

Scores sorted descending are normalised to [0, 1] from the first to the last
(``(s_i - s_0) / (s_last - s_0)``), the straight line ``i / (n - 1)`` is
subtracted, and the result is cut at the N-th local maximum of that
difference (the last point counts as a maximum when it exceeds its two
predecessors). Fewer than N maxima keep everything. This follows Weaviate's
``usecases/autocut`` Go code; two cases it leaves undefined are fixed here:
all-equal scores (0/0) keep everything, and with n = 2 the last-point rule,
which reads two predecessors, is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ctxsel.options import CommonOptions, option
from ctxsel.selectors._fastcut import SMALL_N, RankView
from ctxsel.selectors.base import Cut, ScoreCutSelector


def autocut_k(sorted_scores: np.ndarray, jumps: int = 1) -> int:
    """Number of results to keep for scores sorted descending."""
    y = np.asarray(sorted_scores, dtype=np.float64)
    n = len(y)
    if n <= 1:
        return n
    span = y[-1] - y[0]
    if span == 0:
        return n
    diff = (y - y[0]) / span - np.arange(n) / (n - 1)
    # interior local maxima: strictly above both neighbours
    inner = np.flatnonzero((diff[1:-1] > diff[:-2]) & (diff[1:-1] > diff[2:])) + 1
    if len(inner) >= jumps:
        return int(inner[jumps - 1])
    if len(inner) + 1 == jumps and n > 2 and diff[-1] > diff[-2] and diff[-1] > diff[-3]:
        return n - 1
    return n


def autocut_k_prefix(top_values: np.ndarray, n: int, span: float, jumps: int = 1) -> int | None:
    """The same answer from the first ``len(top_values)`` sorted scores of ``n``
    (``span`` = last - first), when the ``jumps``-th interior maximum lies among
    them; None when the rest of the curve is needed."""
    y = np.asarray(top_values, dtype=np.float64)
    diff = (y - y[0]) / span - np.arange(len(y)) / (n - 1)
    inner = np.flatnonzero((diff[1:-1] > diff[:-2]) & (diff[1:-1] > diff[2:])) + 1
    return int(inner[jumps - 1]) if len(inner) >= jumps else None


class Autocut(ScoreCutSelector):
    cut_reads_tokens = False

    @dataclass(frozen=True)
    class Options(CommonOptions):
        jumps: int = option(1, minimum=1, doc="cut after the N-th local maximum of the normalised curve")

    def _fast_cut(self, view: RankView, n_tokens: np.ndarray) -> Cut:
        """The N-th interior maximum usually lies near the top: look for it in a
        ranked prefix (grown 8x up to N/8); only the normalisation needs the
        last score, which is the minimum. Otherwise sort the values (np.sort)."""
        n = view.n_finite
        if n > SMALL_N:
            span = float(np.float64(view.vmin()) - np.float64(view.vmax()))
            if span == 0:
                return self._explain(n, n)
            m = 2048
            while 8 * m <= n:
                top = view.prefix(m)
                k = autocut_k_prefix(view.x[top], n, span, self.jumps)
                if k is not None:
                    return self._explain(k, n)
                m *= 8
        return self._cut(view.sorted_values(), n_tokens)

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        return self._explain(autocut_k(sorted_scores, self.jumps), len(sorted_scores))

    def _explain(self, k: int, n: int) -> Cut:
        if k == n:
            return Cut(k, f"autocut N={self.jumps}: fewer than {self.jumps} jumps, kept all {n}")
        return Cut(k, f"autocut N={self.jumps}: jump {self.jumps} before rank {k + 1}, kept {k} of {n}")
