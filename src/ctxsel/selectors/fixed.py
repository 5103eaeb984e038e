"""The fixed baselines the papers compare against: top-k, top-n-tokens
(the Adaptive-k paper's "fixed-n"), full context, and an absolute threshold."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ctxsel.options import CommonOptions, option
from ctxsel.selectors._fastcut import RankView, fit_count, running_tokens
from ctxsel.selectors.base import Cut, Decision, ScoreCutSelector, rank


class TopK(ScoreCutSelector):
    """The k highest-scoring chunks (under nan_policy="last", non-finite ones fill places past the finite)."""

    counts_positions = True
    cut_reads_tokens = False

    @dataclass(frozen=True)
    class Options(CommonOptions):
        k: int = option(5, minimum=0, doc="how many of the best chunks to keep")

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        return self._top_k(len(sorted_scores))

    def _fast_cut(self, view: RankView, n_tokens: np.ndarray) -> Cut:
        return self._top_k(view.n)  # the ranking's prefix is taken by decide()

    def _top_k(self, n: int) -> Cut:
        k = min(self.k, n)
        return Cut(k, f"fixed top-{self.k}: kept {k} of {n}")


class TopNTokens(ScoreCutSelector):
    """The longest prefix of the ranking whose tokens fit in ``n_tokens``.

    Unlike ``max_tokens`` (a hard cap every selector honours), this is the
    method itself: the paper's fixed-n retrieval. With the default min_k=1
    the best chunk is kept even if it alone is longer than n.
    """

    counts_positions = True

    @dataclass(frozen=True)
    class Options(CommonOptions):
        n_tokens: int = option(5000, minimum=0, doc="the token budget the best chunks fill")

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        return self._fit(running_tokens(sorted_tokens))

    def _fast_cut(self, view: RankView, n_tokens: np.ndarray) -> Cut:
        """Rank only a prefix long enough to exceed the budget (grown 4x while it is not).

        With token counts >= 0 the running sum never falls, so a prefix whose
        sum passes ``n_tokens`` holds the whole answer."""
        nf = view.n  # the whole ranking, non-finite scores last (counts_positions)
        t_min = int(n_tokens.min())
        if t_min < 0:  # a falling running sum: the whole ranking decides
            return super()._fast_cut(view, n_tokens)
        m = min(nf, max(64, self.n_tokens // max(t_min, 1) + 1))
        while True:
            cum = running_tokens(n_tokens[view.top(m)])
            k = fit_count(cum, self.n_tokens)
            if k < m or m >= nf:
                return self._fit(cum)
            m = min(nf, 4 * m)

    def _fit(self, cum: np.ndarray) -> Cut:
        k = fit_count(cum, self.n_tokens)
        used = int(cum[k - 1]) if k else 0
        return Cut(k, f"fixed {self.n_tokens} tokens: {k} chunks, {used} tokens")


class FullContext(ScoreCutSelector):
    """Everything, ranked by score when scores are given (else in input order)."""

    needs_scores = False

    def decide(self, scores: np.ndarray, n_tokens: np.ndarray) -> Decision:
        # every chunk, also those with non-finite scores under nan_policy="last"
        order, _ = rank(scores, self.nan_policy)
        n = len(scores)
        if n == 0:
            return Decision(order, 0, "empty context: nothing to select")
        k, explanation = self._apply_limits(n, f"full context: all {n} chunks", n_tokens[order], n)
        return Decision(order, k, explanation)

    def _cut(
        self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray
    ) -> Cut:  # pragma: no cover - decide() keeps all
        return Cut(len(sorted_scores), "full context")


class ScoreThreshold(ScoreCutSelector):
    """Every chunk whose score is at least ``threshold``."""

    cut_reads_tokens = False

    @dataclass(frozen=True)
    class Options(CommonOptions):
        threshold: float = option(0.5, doc="keep every chunk whose score is at least this")

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        # scores are descending: count of those >= t is a search on the negated array
        k = int(np.searchsorted(-sorted_scores, -self.threshold, side="right"))
        return Cut(k, f"score >= {self.threshold:g}: {k} of {len(sorted_scores)} chunks")

    def _fast_cut(self, view: RankView, n_tokens: np.ndarray) -> Cut:
        # a count, no ranking (non-finite scores are -inf in view.x: never >= a finite threshold)
        k = int(np.count_nonzero(view.x >= self.threshold))
        return Cut(k, f"score >= {self.threshold:g}: {k} of {view.n_finite} chunks")
