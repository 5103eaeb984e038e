"""The fixed baselines the papers compare against: top-k, top-n-tokens
(the Adaptive-k paper's "fixed-n"), full context, and an absolute threshold."""

from __future__ import annotations

from typing import Any

import numpy as np

from ctxsel.selectors.base import Cut, Selector


class TopK(Selector):
    """The k highest-scoring chunks."""

    name = "top-k"

    def __init__(self, k: int = 5, **kw: Any) -> None:
        super().__init__(**kw)
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self.k = k

    def config(self) -> dict[str, Any]:
        return {"k": self.k, **super().config()}

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        k = min(self.k, len(sorted_scores))
        return Cut(k, f"fixed top-{self.k}: kept {k} of {len(sorted_scores)}")


class TopNTokens(Selector):
    """The longest prefix of the ranking whose tokens fit in ``n_tokens``.

    Unlike ``max_tokens`` (a hard cap every selector honours), this is the
    method itself: the paper's fixed-n retrieval. With the default min_k=1
    the best chunk is kept even if it alone is longer than n.
    """

    name = "top-n-tokens"

    def __init__(self, n_tokens: int = 5000, **kw: Any) -> None:
        super().__init__(**kw)
        if n_tokens < 0:
            raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
        self.n_tokens = n_tokens

    def config(self) -> dict[str, Any]:
        return {"n_tokens": self.n_tokens, **super().config()}

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        cum = np.cumsum(sorted_tokens)
        k = int(np.searchsorted(cum, self.n_tokens, side="right"))
        used = int(cum[k - 1]) if k else 0
        return Cut(k, f"fixed {self.n_tokens} tokens: {k} chunks, {used} tokens")


class FullContext(Selector):
    """Everything, ranked by score when scores are given (else in input order)."""

    name = "full"
    needs_scores = False

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        return Cut(len(sorted_scores), f"full context: all {len(sorted_scores)} chunks")


class ScoreThreshold(Selector):
    """Every chunk whose score is at least ``threshold``."""

    name = "threshold"

    def __init__(self, threshold: float = 0.5, **kw: Any) -> None:
        super().__init__(**kw)
        if not np.isfinite(threshold):
            raise ValueError(f"threshold must be finite, got {threshold}")
        self.threshold = float(threshold)

    def config(self) -> dict[str, Any]:
        return {"threshold": self.threshold, **super().config()}

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        # scores are descending: count of those >= t is a search on the negated array
        k = int(np.searchsorted(-sorted_scores, -self.threshold, side="right"))
        return Cut(k, f"score >= {self.threshold:g}: {k} of {len(sorted_scores)} chunks")
