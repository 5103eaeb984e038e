"""Adaptive-k (Taguchi, Maekawa, Bhutani, EMNLP 2025): cut at the largest
drop in the sorted similarities, plus a small buffer.

The three strategies follow the authors' ``retriever.py`` (megagonlabs/
adaptive-k-retrieval) index for index. With scores sorted descending
s_0 >= ... >= s_{N-1}:

- ``largest_gap`` (the paper's Algorithm 1): gaps g_i = s_i - s_{i+1},
  i = 0..N-2; search i in [head, N-1-tail) with tail = floor((N-1) *
  tail_fraction) (0.1: "the top 90%") and head = floor((N-1) *
  head_fraction) (0 by default; the authors use 0.05 on HoloBench); take the
  first i with the largest gap.
- ``moving_avg``: the same search over the gaps of a moving average of
  window w (valid convolution, N-w+1 values), with head and tail computed
  from N as the authors do.
- ``2diff_spike``: trim the scores to [head, N-tail), take first and second
  differences d1, d2; the cut is the first j >= 1 with d2[j] > 0 after some
  d2 < 0 before it (i = j + 1 + head). Without such a j it falls back to
  largest_gap *on the trimmed scores*, as the authors' code does (so the
  90% rule applies twice there); unlike their code we add ``head`` back to
  that fallback index, which only differs when head_fraction > 0.

Then k = min(N, i + 1 + buffer). The paper's buffer is B = 5, set on pools of about a thousand
passages; over a retriever's top-5 it keeps all five. By default the buffer scales with the pool
(:func:`retriever_buffer`): one chunk per 20 in the pool, at least 1 and at most the paper's 5,
so pools of 100 chunks or more get the paper's rule unchanged and a top-5 to top-20 gets 1. The
rule was chosen by ``python -m experiments.retriever_buffer`` on the hotpotqa-long training split
(F2 over the top 5, 10, 20 and 50 of the dense ranking peaks at a buffer of 1 or 2 for every size;
benchmarks/results/retriever_buffer_train.md). ``adaptive-k[buffer=5]`` is the paper's rule at
every size.

Degenerate inputs: N = 1 keeps the one chunk; with all scores equal every
gap is 0, so the first one wins and k = min(N, 1 + B) (the explanation says
the scores carried no signal); an empty search window keeps all chunks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ctxsel.numbers import short_number
from ctxsel.options import CommonOptions, option
from ctxsel.selectors._fastcut import SMALL_N, RankView, largest_gap
from ctxsel.selectors.base import Cut, ScoreCutSelector
from ctxsel.types import MethodDetails

Strategy = Literal["largest_gap", "moving_avg", "2diff_spike"]
STRATEGIES: tuple[str, ...] = ("largest_gap", "moving_avg", "2diff_spike")
#: The paper's buffer B.
PAPER_BUFFER = 5


@dataclass(frozen=True, slots=True)
class AdaptiveKGap(MethodDetails):
    """Adaptive-k's cut: the rank index (0-based) after which the largest gap fell, its size,
    and the strategy that found it."""

    cut_index: int
    gap: float
    strategy: str


def retriever_buffer(n: int) -> int:
    """The default buffer for a pool of ``n`` chunks: ``n // 20`` within [1, 5] (the paper's 5 from
    100 chunks up; 1 over a retriever's top-5 to top-39)."""
    return min(PAPER_BUFFER, max(1, n // 20))


def _bounds(n: int, head_fraction: float, tail_fraction: float) -> tuple[int, int]:
    """(head, tail) counts as the authors compute them: int((N-1) * f)."""
    return math.floor((n - 1) * head_fraction), math.floor((n - 1) * tail_fraction)


def largest_gap_index(s: np.ndarray, head_fraction: float = 0.0, tail_fraction: float = 0.1) -> int | None:
    """Index i of the first largest drop s_i - s_{i+1} in the search window,
    or None if the window is empty."""
    n = len(s)
    if n < 2:
        return None
    head, tail = _bounds(n, head_fraction, tail_fraction)
    gaps = s[:-1] - s[1:]
    window = gaps[head : n - 1 - tail]
    if len(window) == 0:
        return None
    return head + int(np.argmax(window))


def moving_avg_index(s: np.ndarray, window: int, head_fraction: float = 0.0, tail_fraction: float = 0.1) -> int | None:
    n = len(s)
    if n < window + 1:
        return None
    head, tail = _bounds(n, head_fraction, tail_fraction)
    ma = np.convolve(s, np.full(window, 1.0 / window), mode="valid")  # exact on ties, unlike cumsum
    gaps = ma[:-1] - ma[1:]
    win = gaps[head : len(gaps) - tail]
    if len(win) == 0:
        return None
    return head + int(np.argmax(win))


def second_diff_spike_index(
    s: np.ndarray, head_fraction: float = 0.0, tail_fraction: float = 0.1
) -> tuple[int | None, bool]:
    """(index, used_fallback)."""
    n = len(s)
    if n < 2:
        return None, True
    head, tail = _bounds(n, head_fraction, tail_fraction)
    trimmed = s[head : n - tail]
    d2 = np.diff(np.diff(trimmed))
    if len(d2) >= 2:
        prior_min = np.minimum.accumulate(d2)[:-1]
        hits = np.flatnonzero((d2[1:] > 0) & (prior_min < 0))
        if len(hits):
            return int(hits[0]) + 2 + head, False
    i = largest_gap_index(trimmed, head_fraction, tail_fraction)
    return (None if i is None else i + head), True


class AdaptiveK(ScoreCutSelector):
    """Keep the ranks up to the largest similarity drop, plus ``buffer``."""

    cut_reads_tokens = False

    @dataclass(frozen=True)
    class Options(CommonOptions):
        strategy: Strategy = option("largest_gap", doc="largest_gap (the paper's rule) or moving_avg")
        buffer: int | None = option(
            None, minimum=0, doc="chunks kept past the cut (the paper's B = 5; none: pool size // 20, within 1..5)"
        )
        head_fraction: float = option(0.0, minimum=0, below=1, doc="share of the top ranks the cut skips")
        tail_fraction: float = option(0.1, minimum=0, below=1, doc="share of the bottom ranks the cut skips")
        window: int = option(5, minimum=1, doc="the moving average's width (strategy=moving_avg)")

        def refuse(self, given: frozenset[str]) -> str | None:
            if "window" in given and self.strategy != "moving_avg":
                return f"window is the moving average's width: it applies to strategy=moving_avg, not {self.strategy}"
            return None

    def config(self) -> dict[str, Any]:
        cfg = super().config()
        if self.strategy != "moving_avg":
            del cfg["window"]
        return cfg

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        s = sorted_scores
        n = len(s)
        note = ""
        if self.strategy == "largest_gap":
            i = largest_gap_index(s, self.head_fraction, self.tail_fraction)
        elif self.strategy == "moving_avg":
            i = moving_avg_index(s, self.window, self.head_fraction, self.tail_fraction)
            if i is None and n >= 2:
                i = largest_gap_index(s, self.head_fraction, self.tail_fraction)
                note = f" (N < window+1={self.window + 1}: fell back to largest_gap)"
        else:
            i, fell_back = second_diff_spike_index(s, self.head_fraction, self.tail_fraction)
            if fell_back:
                note = " (no second-difference spike: fell back to largest_gap)"
        gap = float(s[i] - s[i + 1]) if i is not None and i + 1 < n else 0.0
        return self._explain(n, i, gap, bool(s[0] == s[-1]), note)

    def _fast_cut(self, view: RankView, n_tokens: np.ndarray) -> Cut:
        """largest_gap in O(N) (see :func:`ctxsel.selectors._fastcut.largest_gap`);
        moving_avg and 2diff_spike read the whole sorted curve, so they sort the
        values (``np.sort``, not the stable argsort) and cut as :meth:`_cut` does."""
        n = view.n_finite
        if self.strategy == "moving_avg" or (self.strategy == "2diff_spike" and n <= SMALL_N):
            return self._cut(view.sorted_values(), n_tokens)
        flat = bool(view.vmax() == view.vmin())
        head, tail = _bounds(n, self.head_fraction, self.tail_fraction)
        note = ""
        if self.strategy == "2diff_spike":
            i = self._spike_in_prefix(view, head, tail)
            if i is not None:
                x = view.x[view.top(i + 2)]
                return self._explain(n, i, float(x[i] - x[i + 1]), flat, "")
            note = " (no second-difference spike: fell back to largest_gap)"
            # the authors' fallback: largest_gap on the trimmed scores s[head : n - tail]
            head2, tail2 = _bounds(n - tail - head, self.head_fraction, self.tail_fraction)
            head, tail = head + head2, tail + tail2
        i, gap = largest_gap(view, head, tail)
        return self._explain(n, i, gap, flat, note)

    def _spike_in_prefix(self, view: RankView, head: int, tail: int) -> int | None:
        """second_diff_spike_index's spike, found in a ranked prefix of the trimmed
        scores (grown 8x); None when there is none (then the caller falls back)."""
        n = view.n_finite
        end = n - tail
        m = head + 2048
        while True:
            whole = m >= end or 8 * m > n
            trimmed = view.sorted_values()[head:end] if whole else view.x[view.prefix(m)[head:end]]
            d2 = np.diff(np.diff(trimmed))
            if len(d2) >= 2:
                prior_min = np.minimum.accumulate(d2)[:-1]
                hits = np.flatnonzero((d2[1:] > 0) & (prior_min < 0))
                if len(hits):
                    return int(hits[0]) + 2 + head
            if whole:
                return None
            m *= 8

    def _explain(self, n: int, i: int | None, gap: float, flat: bool, note: str) -> Cut:
        if i is None:
            return Cut(n, f"adaptive-k {self.strategy}: no gap to search among {n} scores, kept all")
        buffer = retriever_buffer(n) if self.buffer is None else self.buffer
        k = min(n, i + 1 + buffer)
        if flat:
            what = "all scores equal, no gap"
        else:
            what = f"largest gap {short_number(gap)} between ranks {i + 1} and {i + 2}"
            if self.strategy == "moving_avg":
                what = f"largest moving-average (w={self.window}) drop after rank {i + 1}"
            elif self.strategy == "2diff_spike" and not note:
                what = f"second-difference spike after rank {i + 1}"
        return Cut(
            k,
            f"{what}{note}; kept {i + 1} + buffer {buffer} = {k} of {n}",
            AdaptiveKGap(i, gap, self.strategy),
        )
