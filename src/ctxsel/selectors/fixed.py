"""The fixed baselines the papers compare against: top-k, top-n-tokens
(the Adaptive-k paper's "fixed-n"), full context, and an absolute threshold."""

from __future__ import annotations

from typing import Any

import numpy as np

from ctxsel.selectors.base import Cut, Decision, Selector, as_int, rank


class TopK(Selector):
    """The k highest-scoring chunks."""

    name = "top-k"

    def __init__(self, k: int = 5, **kw: Any) -> None:
        super().__init__(**kw)
        k = as_int("k", k)
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
        n_tokens = as_int("n_tokens", n_tokens)
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

    def decide(self, scores: np.ndarray, n_tokens: np.ndarray) -> Decision:
        # every chunk, also those with non-finite scores under nan_policy="last"
        order, _ = rank(scores, self.nan_policy)
        n = len(scores)
        if n == 0:
            return Decision(order, 0, "empty context: nothing to select", {})
        k, explanation = self._apply_limits(n, f"full context: all {n} chunks", n_tokens[order], n)
        return Decision(order, k, explanation, {})

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:  # pragma: no cover
        return Cut(len(sorted_scores), "full context")


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
