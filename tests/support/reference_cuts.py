"""The score cuts as they were before the linear-time paths: a full stable
argsort of N scores, then each method's cut on the sorted array.

Kept verbatim (only gathered into one module) as the reference that the
property tests and ``benchmarks/selection_latency.py`` compare the fast
paths against: same ids, scores, k, explanation and meta on every input.
A test helper: ctxsel itself never imports it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ctxsel.errors import InputError
from ctxsel.numbers import short_number
from ctxsel.selectors.base import NanPolicy


def rank(scores: np.ndarray, nan_policy: NanPolicy = "raise") -> tuple[np.ndarray, int]:
    finite = np.isfinite(scores)
    n_finite = int(finite.sum())
    if n_finite < len(scores):
        if nan_policy == "raise":
            bad = np.flatnonzero(~finite)
            shown = ", ".join(str(i) for i in bad[:5]) + (" ..." if len(bad) > 5 else "")
            raise InputError(
                f"scores: {len(bad)} score(s) are NaN or infinite (chunk positions {shown}); "
                "fix the scorer, or pass nan_policy='last' to rank them after all finite scores"
            )
    key = np.where(finite, -scores, np.inf)
    order = np.argsort(key, kind="stable")
    return order, n_finite


# -- the cuts -------------------------------------------------------------------------


def _bounds(n: int, head_fraction: float, tail_fraction: float) -> tuple[int, int]:
    return math.floor((n - 1) * head_fraction), math.floor((n - 1) * tail_fraction)


def largest_gap_index(s: np.ndarray, head_fraction: float = 0.0, tail_fraction: float = 0.1) -> int | None:
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
    ma = np.convolve(s, np.full(window, 1.0 / window), mode="valid")
    gaps = ma[:-1] - ma[1:]
    win = gaps[head : len(gaps) - tail]
    if len(win) == 0:
        return None
    return head + int(np.argmax(win))


def second_diff_spike_index(
    s: np.ndarray, head_fraction: float = 0.0, tail_fraction: float = 0.1
) -> tuple[int | None, bool]:
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


def adaptive_k_cut(sel: Any, s: np.ndarray) -> tuple[int, str, dict[str, Any] | None]:
    n = len(s)
    note = ""
    if sel.strategy == "largest_gap":
        i = largest_gap_index(s, sel.head_fraction, sel.tail_fraction)
    elif sel.strategy == "moving_avg":
        i = moving_avg_index(s, sel.window, sel.head_fraction, sel.tail_fraction)
        if i is None and n >= 2:
            i = largest_gap_index(s, sel.head_fraction, sel.tail_fraction)
            note = f" (N < window+1={sel.window + 1}: fell back to largest_gap)"
    else:
        i, fell_back = second_diff_spike_index(s, sel.head_fraction, sel.tail_fraction)
        if fell_back:
            note = " (no second-difference spike: fell back to largest_gap)"
    if i is None:
        return n, f"adaptive-k {sel.strategy}: no gap to search among {n} scores, kept all", None
    buffer = min(5, max(1, n // 20)) if sel.buffer is None else sel.buffer  # the default scales with the pool
    k = min(n, i + 1 + buffer)
    gap = float(s[i] - s[i + 1]) if i + 1 < n else 0.0
    if s[0] == s[-1]:
        what = "all scores equal, no gap"
    else:
        what = f"largest gap {short_number(gap)} between ranks {i + 1} and {i + 2}"
        if sel.strategy == "moving_avg":
            what = f"largest moving-average (w={sel.window}) drop after rank {i + 1}"
        elif sel.strategy == "2diff_spike" and not note:
            what = f"second-difference spike after rank {i + 1}"
    return (
        k,
        f"{what}{note}; kept {i + 1} + buffer {buffer} = {k} of {n}",
        {"cut_index": i, "gap": gap, "strategy": sel.strategy},
    )


def autocut_k(sorted_scores: np.ndarray, jumps: int = 1) -> int:
    y = np.asarray(sorted_scores, dtype=np.float64)
    n = len(y)
    if n <= 1:
        return n
    span = y[-1] - y[0]
    if span == 0:
        return n
    diff = (y - y[0]) / span - np.arange(n) / (n - 1)
    inner = np.flatnonzero((diff[1:-1] > diff[:-2]) & (diff[1:-1] > diff[2:])) + 1
    maxima = inner.tolist()
    if n > 2 and diff[-1] > diff[-2] and diff[-1] > diff[-3]:
        maxima.append(n - 1)
    return int(maxima[jumps - 1]) if len(maxima) >= jumps else n


def _cut(sel: Any, s: np.ndarray, t: np.ndarray) -> tuple[int, str, dict[str, Any] | None]:
    name = sel.name
    n = len(s)
    if name == "top-k":
        k = min(sel.k, n)
        return k, f"fixed top-{sel.k}: kept {k} of {n}", None
    if name == "top-n-tokens":
        cum = np.cumsum(t)
        k = int(np.searchsorted(cum, sel.n_tokens, side="right"))
        used = int(cum[k - 1]) if k else 0
        return k, f"fixed {sel.n_tokens} tokens: {k} chunks, {used} tokens", None
    if name == "threshold":
        k = int(np.searchsorted(-s, -sel.threshold, side="right"))
        return k, f"score >= {sel.threshold:g}: {k} of {n} chunks", None
    if name == "autocut":
        k = autocut_k(s, sel.jumps)
        if k == n:
            return k, f"autocut N={sel.jumps}: fewer than {sel.jumps} jumps, kept all {n}", None
        return k, f"autocut N={sel.jumps}: jump {sel.jumps} before rank {k + 1}, kept {k} of {n}", None
    if name == "adaptive-k":
        return adaptive_k_cut(sel, s)
    raise InputError(f"no reference cut for method {name!r}")


def _apply_limits(sel: Any, k: int, explanation: str, sorted_tokens: np.ndarray, n: int) -> tuple[int, str]:
    k = max(0, min(int(k), n))
    floor = min(sel.min_k, n)
    if k < floor:
        explanation += f"; raised to min_k={sel.min_k}" + (f" (capped at all {n} chunks)" if sel.min_k > n else "")
        k = floor
    if sel.max_tokens is not None and k > 0:
        fit = int(np.searchsorted(np.cumsum(sorted_tokens[:k]), sel.max_tokens, side="right"))
        if fit < k:
            explanation += f"; cut to {fit} by max_tokens={sel.max_tokens}"
            k = fit
    return k, explanation


def reference_decide(sel: Any, scores: np.ndarray, n_tokens: np.ndarray) -> tuple[np.ndarray, int, str, dict[str, Any]]:
    """``(order, k, explanation, meta)`` exactly as ``sel.decide`` computed them before
    the linear-time paths (``full`` and every cut above)."""
    n = len(scores)
    order, n_finite = rank(scores, sel.nan_policy)
    if n == 0:
        return order, 0, "empty context: nothing to select", {}
    sorted_tokens = n_tokens[order]
    if sel.name == "full":
        k, explanation = _apply_limits(sel, n, f"full context: all {n} chunks", sorted_tokens, n)
        return order, k, explanation, {}
    m = n if sel.name in ("top-k", "top-n-tokens") else n_finite  # counts reach the non-finite tail
    if m == 0:
        k, explanation, meta = 0, "no finite scores: nothing ranked", None
    else:
        k, explanation, meta = _cut(sel, scores[order[:m]], sorted_tokens[:m])
    k, explanation = _apply_limits(sel, k, explanation, sorted_tokens, n)
    return order, k, explanation, meta or {}


#: the methods ``reference_decide`` knows
METHODS = ("top-k", "top-n-tokens", "threshold", "autocut", "adaptive-k", "full")
