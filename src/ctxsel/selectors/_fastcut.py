"""Linear-time building blocks for the score cuts (no full sort of N scores).

:class:`RankView` wraps one score vector and answers, lazily and exactly,
what a cut asks of the ranking (score descending, ties by position,
non-finite scores last in position order -- the order :func:`rank` gives):

- ``top(m)``: the first ``m`` indices of that ranking. A strided sample of
  the scores gives a threshold ``t`` with (very likely) at least ``m``
  scores ``>= t``; those candidates are counted, gathered and sorted stably,
  which is exactly the ranking's prefix because ``{x >= t}`` is an upper set
  (every score equal to the boundary value is in it). If the sample was
  unlucky the exact m-th value comes from ``np.partition`` instead. Large
  ``m`` (over N/8) or small N use the full stable argsort.
- ``sorted_values()``: the finite scores in ranking order, by ``np.sort``
  (values only; much cheaper than the stable argsort), with the signs of
  zeros put back in position order so even ``-0.0`` matches.
- :func:`largest_gap` finds Adaptive-k's first largest gap over ranks
  ``[head, N-1-tail)`` in O(N): the gaps inside an exact top prefix are
  compared with an upper bound on every gap below it (the widest interval
  between sample points, which are scores themselves); when the bound does
  not settle it, the pigeonhole (bucket) method over the exact window
  ``[s_{N-1-tail}, s_head]`` does, with a check that falls back to sorting
  if floating-point rounding ever left the answer in doubt.

Everything here returns the same values as the full-sort reference
(``tests/support/reference_cuts.py``); the property tests compare them.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from ctxsel.inputs import nonfinite_scores_error

#: below this many scores the full stable argsort is as fast as anything here
SMALL_N = 2048
#: below this many scores, a gap the prefix bound cannot settle is found by np.sort, not buckets
_SORT_BELOW = 32_768
#: about this many sample points
_SAMPLE = 4096


#: a budget above this is no budget: token counts are at most ``MAX_CHUNK_TOKENS`` each, so no int64
#: running sum of a pool that fits in memory reaches it (and a larger Python int would not fit int64)
_BUDGET_CAP = 2**62


def running_tokens(tokens: np.ndarray) -> np.ndarray:
    """The running sum of token counts (int64). Exact: each count is at most
    :data:`ctxsel.inputs.MAX_CHUNK_TOKENS`, so the sum cannot wrap below nine billion chunks."""
    return np.cumsum(tokens, dtype=np.int64)


def fit_count(cum: np.ndarray, budget: int) -> int:
    """How many of the first counts fit ``budget``, from their running sum (:func:`running_tokens`)."""
    return int(np.searchsorted(cum, min(int(budget), _BUDGET_CAP), side="right"))


class RankView:
    """One score vector and cached, exact pieces of its ranking."""

    __slots__ = ("_max", "_min", "_order", "_prefix", "_sample", "n", "n_finite", "scores", "x", "xf")

    def __init__(self, scores: np.ndarray, nan_policy: str = "raise") -> None:
        self.scores = scores
        self.n = n = len(scores)
        finite_all = bool(np.isfinite(scores).all()) if n else True
        if finite_all:
            self.x = self.xf = scores
            self.n_finite = n
        else:
            finite = np.isfinite(scores)
            if nan_policy == "raise":
                raise nonfinite_scores_error(finite)
            # -inf for non-finite: ranked after every finite score, ties by position,
            # exactly like rank()'s key +inf on the negated scores
            self.x = np.where(finite, scores, -np.inf)
            self.xf = scores[finite]
            self.n_finite = int(finite.sum())
        self._order: np.ndarray | None = None
        self._prefix: np.ndarray | None = None
        self._sample: np.ndarray | None = None
        self._min: float | None = None
        self._max: float | None = None

    # -- the ranking -------------------------------------------------------------------

    def order(self) -> np.ndarray:
        """The full ranking (the stable argsort; only for callers that need all of it)."""
        if self._order is None:
            self._order = np.argsort(-self.x, kind="stable")
        return self._order

    def top(self, m: int) -> np.ndarray:
        """The first ``m`` indices of the ranking."""
        m = max(0, min(int(m), self.n))
        if self._order is not None:
            return self._order[:m]
        if self._prefix is not None and len(self._prefix) >= m:
            return self._prefix[:m]
        if m == 0:
            return np.zeros(0, dtype=np.intp)
        if self.n <= SMALL_N or m > self.n_finite or 8 * m > self.n:
            return self.order()[:m]
        self._prefix = self._exact_prefix(m)
        return self._prefix[:m]

    def prefix(self, m: int) -> np.ndarray:
        """An exact prefix of the ranking with at least ``m`` entries (maybe more, already paid for)."""
        top = self.top(m)
        if self._order is None and self._prefix is not None and len(self._prefix) > len(top):
            return self._prefix
        return top

    def sample(self) -> np.ndarray:
        """Every ``N // 4096``-th finite score, sorted ascending."""
        if self._sample is None:
            stride = max(1, self.n_finite // _SAMPLE)
            self._sample = np.sort(self.xf[::stride])
        return self._sample

    def _exact_prefix(self, m: int) -> np.ndarray:
        x, nf = self.x, self.n_finite
        sample = self.sample()
        stride = max(1, nf // _SAMPLE)
        j = int(m * 1.25 / stride) + 4  # the j-th largest sample point has about j * stride scores above it
        cand = None
        for _ in range(2):
            if j >= len(sample):
                break
            cand = np.flatnonzero(x >= sample[-j])
            if len(cand) >= m:
                break
            cand, j = None, j * 4
        if cand is None:  # an unlucky sample: the exact m-th largest value
            v = np.partition(x, len(x) - m)[len(x) - m]
            cand = np.flatnonzero(x >= v)
        xc = x[cand]
        if len(cand) <= 4 * m + 8192:
            return cast(np.ndarray, cand[stable_desc(xc)])
        # many scores tie at the threshold: those above the m-th value, ranked, then
        # the first of the ties by position
        v = np.partition(xc, len(xc) - m)[len(xc) - m]
        above = xc > v
        ranked = cand[above][stable_desc(xc[above])]
        ties = cand[xc == v][: m - len(ranked)]
        return np.concatenate([ranked, ties])

    # -- values -------------------------------------------------------------------------

    def vmin(self) -> float:
        if self._min is None:
            self._min = self.xf.min()
        return self._min

    def vmax(self) -> float:
        if self._max is None:
            self._max = self.xf.max()
        return self._max

    def sorted_values(self) -> np.ndarray:
        """The finite scores in ranking order (what ``scores[order[:n_finite]]`` was)."""
        if self._order is not None:
            return cast(np.ndarray, self.scores[self._order[: self.n_finite]])
        s = np.sort(self.xf)[::-1]
        # equal values are interchangeable except 0.0 and -0.0: put their signs in position order
        lo = np.searchsorted(s[::-1], 0, side="left")
        hi = np.searchsorted(s[::-1], 0, side="right")
        if hi > lo:
            zeros = self.xf[self.xf == 0]
            if np.signbit(zeros).any():
                s = s.copy()
                s[len(s) - hi : len(s) - lo] = zeros
        return s


def stable_desc(values: np.ndarray) -> np.ndarray:
    """``np.argsort(-values, kind="stable")``, via the (several times faster) default
    sort when no two values are equal -- then every order agrees."""
    o = np.argsort(-values)
    sv = values[o]
    if len(sv) > 1 and bool((sv[1:] == sv[:-1]).any()):
        o = np.argsort(-values, kind="stable")
    return o


# -- Adaptive-k's largest gap ----------------------------------------------------------


def largest_gap(view: RankView, head: int, tail: int) -> tuple[int | None, float]:
    """``(i, s_i - s_{i+1})`` for the first largest gap of the finite scores sorted
    descending, over ``i`` in ``[head, n-1-tail)`` (``(None, 0.0)`` if that is empty)."""
    n = view.n_finite
    end = n - 1 - tail
    if n < 2 or end - head <= 0:
        return None, 0.0
    if n <= SMALL_N:
        return _from_sorted(view.sorted_values(), head, end)
    x = view.x
    m = min(n, max(head + 2, 1024))
    top = view.prefix(m)
    m = min(len(top), n)
    hv = x[top[:m]]
    gaps = hv[:-1] - hv[1:]
    stop = min(m - 1, end)
    if stop == end:  # the prefix holds the whole window
        return _first_max(gaps, head, end)
    if stop > head:
        win = gaps[head:stop]
        g = win.max()
        if _gap_bound_below(view, hv[-1]) <= g:
            return _first_max(gaps, head, stop)
    if n <= _SORT_BELOW:  # np.sort of a few ten thousand values costs less than the buckets
        return _from_sorted(view.sorted_values(), head, end)
    return _bucket_window(view, head, tail)


def _from_sorted(s: np.ndarray, head: int, end: int) -> tuple[int, float]:
    return _first_max(s[:-1] - s[1:], head, end)


def _first_max(gaps: np.ndarray, head: int, end: int) -> tuple[int, float]:
    i = head + int(np.argmax(gaps[head:end]))
    return i, float(gaps[i])


def _gap_bound_below(view: RankView, h_last: float) -> float:
    """An upper bound on every gap between consecutive finite scores <= ``h_last``.

    The sample points are scores, so two consecutive scores never have a
    sample point strictly between them: each such gap lies inside one interval
    between neighbouring points of {min} + sample + {h_last}.
    """
    sample = view.sample()
    lo = view.vmin()
    pts = sample[: np.searchsorted(sample, h_last, side="left")]
    pts = np.concatenate([[lo], pts, [h_last]]).astype(view.xf.dtype, copy=False)
    return float(np.max(pts[1:] - pts[:-1]))


def _bucket_window(view: RankView, head: int, tail: int) -> tuple[int | None, float]:
    """Largest gap over ranks [head, n-1-tail] by the pigeonhole method, exact values."""
    xf, n = view.xf, view.n_finite
    lo = np.partition(xf, tail)[tail]  # s_{n-1-tail}
    hi = view.x[view.top(head + 1)[-1]]  # s_head
    if lo == hi:  # a flat window: the first gap (0) wins
        top = view.top(head + 2)
        return head, float(view.x[top[head]] - view.x[top[head + 1]])
    found = _bucket_max_gap(xf, float(lo), float(hi), n - tail - head)
    if found is None:  # rounding left the answer in doubt: sort (never seen in the tests)
        return _from_sorted(view.sorted_values(), head, n - 1 - tail)
    a, gap = found
    return int(np.count_nonzero(xf >= a)) - 1, gap


def _bucket_max_gap(xf: np.ndarray, lo: float, hi: float, c: int) -> tuple[float, float] | None:
    """``(a, a - b)`` for the first (highest) largest gap between consecutive distinct
    values in ``[lo, hi]``, ``lo < hi``, where at most ``c`` values lie; None if unsure.

    With B = 2c buckets of width w, the largest gap is at least span/(c-1) > 2w, so
    it straddles a run of empty buckets; only buckets next to the longest runs are
    examined, and the answer is accepted only if it beats a bound on every gap
    left out (adjacent buckets: < 2w; runs of L empty buckets: < (L+2)w).
    """
    span = hi - lo
    nb = 2 * max(int(c), 2)
    scale = nb / span
    if not np.isfinite(scale) or not np.isfinite(span):
        return None
    w = xf.astype(np.float64, copy=False)
    q = w - lo
    q *= scale
    np.floor(q, out=q)
    np.clip(q, 0, nb - 1, out=q)
    q[(w < lo) | (w > hi)] = nb  # outside the window: an ignored bucket
    qi = q.astype(np.intp)
    del q
    seen = np.zeros(nb + 1, dtype=bool)
    seen[qi] = True
    occ = np.flatnonzero(seen[:nb])
    if len(occ) < 2:
        return None
    runs = np.diff(occ) - 1
    lmax = int(runs.max())
    pick = np.flatnonzero(runs >= lmax - 2)
    j1, j2 = occ[pick], occ[pick + 1]
    need = np.zeros(nb + 1, dtype=bool)
    need[j1] = True
    need[j2] = True
    sel = need[qi]
    vals, qs = xf[sel], qi[sel]
    ids = np.flatnonzero(need)  # the examined buckets, compacted (few, usually)
    slot = np.searchsorted(ids, qs)
    bmax = np.full(len(ids), -np.inf, dtype=np.float64)
    bmin = np.full(len(ids), np.inf, dtype=np.float64)
    np.maximum.at(bmax, slot, vals)
    np.minimum.at(bmin, slot, vals)
    j1, j2 = np.searchsorted(ids, j1), np.searchsorted(ids, j2)
    a = bmin[j2].astype(xf.dtype)
    gaps = a - bmax[j1].astype(xf.dtype)
    g = gaps.max()
    width = span / nb
    left_out = (max(1, lmax - 1) + 1e-6) * width * (1 + 1e-6)
    if not float(g) > left_out:
        return None
    best = np.flatnonzero(gaps == g)[-1]  # the highest pair comes first in the ranking
    return a[best], float(g)
