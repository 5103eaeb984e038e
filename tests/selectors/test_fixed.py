"""The fixed baselines: top-k, top-n-tokens, full context, score threshold."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ctxsel
from ctxsel.selectors.fixed import FullContext, ScoreThreshold, TopK, TopNTokens
from ctxsel.types import Chunk


def chunks(tokens: list[int]) -> list[Chunk]:
    return [Chunk(id=f"c{i}", text=f"chunk {i}", doc_id="d", position=i, n_tokens=t) for i, t in enumerate(tokens)]


#               c0   c1   c2   c3   c4
SCORES = [0.2, 0.9, 0.5, 0.9, 0.1]
# rank order (score desc, ties by position): c1 (0.9), c3 (0.9), c2 (0.5), c0 (0.2), c4 (0.1)
RANKING = ["c1", "c3", "c2", "c0", "c4"]
TOKENS = [10, 20, 30, 40, 50]
# tokens in rank order: 20, 40, 30, 10, 50 -> cumulative 20, 60, 90, 100, 150


class TestTopK:
    @pytest.mark.parametrize("k", [1, 2, 3, 5])
    def test_keeps_the_k_best_in_rank_order(self, k: int) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), f"top-k@{k}", scores=SCORES)
        assert sel.ids == RANKING[:k]
        assert sel.k == k
        assert sel.scores == [SCORES[int(i[1:])] for i in RANKING[:k]]
        assert sel.method == "top-k"
        assert sel.config["k"] == k
        assert sel.n_candidates == 5

    def test_k_above_n_keeps_all(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "top-k@50", scores=SCORES)
        assert sel.ids == RANKING
        assert "kept 5 of 5" in sel.explanation

    def test_tokens_of_the_selection(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "top-k@3", scores=SCORES)
        assert sel.n_tokens == 20 + 40 + 30

    def test_reading_order(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "top-k@3", scores=SCORES)
        assert sel.reading_order == ["c1", "c2", "c3"]

    def test_k_zero_is_raised_by_min_k_default(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "top-k@0", scores=SCORES)
        assert sel.ids == ["c1"]
        assert "raised to min_k=1" in sel.explanation

    def test_k_zero_with_min_k_zero_is_empty(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "top-k@0", scores=SCORES, min_k=0)
        assert sel.ids == [] and sel.k == 0

    def test_negative_k_raises(self) -> None:
        with pytest.raises(ValueError, match="k must be >= 0"):
            TopK(k=-1)
        with pytest.raises(ValueError, match="k must be >= 0"):
            ctxsel.get_selector("top-k@-3")

    def test_direct_class(self) -> None:
        assert TopK(k=2).select("q", chunks(TOKENS), SCORES).ids == ["c1", "c3"]


class TestTopNTokens:
    @pytest.mark.parametrize(
        ("budget", "expected_k", "expected_tokens"),
        [
            (20, 1, 20),  # exactly the first chunk
            (59, 1, 20),  # 20 + 40 = 60 > 59
            (60, 2, 60),  # exactly two
            (95, 3, 90),
            (100, 4, 100),
            (149, 4, 100),
            (150, 5, 150),
            (10_000, 5, 150),
        ],
    )
    def test_longest_prefix_that_fits(self, budget: int, expected_k: int, expected_tokens: int) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), f"top-n-tokens@{budget}", scores=SCORES)
        assert sel.k == expected_k
        assert sel.ids == RANKING[:expected_k]
        assert sel.n_tokens == expected_tokens

    def test_best_chunk_kept_even_if_longer_than_n(self) -> None:
        # the docstring: with the default min_k=1 the best chunk is kept even if alone longer than n
        sel = ctxsel.select("q", chunks(TOKENS), "top-n-tokens@5", scores=SCORES)
        assert sel.ids == ["c1"]
        assert sel.n_tokens == 20
        assert "raised to min_k=1" in sel.explanation

    def test_with_min_k_zero_nothing_fits(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "top-n-tokens@5", scores=SCORES, min_k=0)
        assert sel.ids == []

    def test_k_suffix_in_spec(self) -> None:
        sel = ctxsel.get_selector("top-n-tokens@5k")
        assert isinstance(sel, TopNTokens) and sel.n_tokens == 5000

    def test_explanation_counts(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "top-n-tokens@95", scores=SCORES)
        assert sel.explanation == "fixed 95 tokens: 3 chunks, 90 tokens"

    def test_negative_budget_raises(self) -> None:
        with pytest.raises(ValueError, match="n_tokens must be >= 0"):
            TopNTokens(n_tokens=-1)

    def test_zero_token_chunks_always_fit(self) -> None:
        sel = ctxsel.select("q", chunks([0, 0, 0]), "top-n-tokens@0", scores=[0.3, 0.2, 0.1])
        assert sel.ids == ["c0", "c1", "c2"]


class TestFullContext:
    def test_all_chunks_ranked_by_score(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "full", scores=SCORES)
        assert sel.ids == RANKING
        assert sel.n_tokens == 150
        assert sel.explanation == "full context: all 5 chunks"

    def test_without_scores_keeps_input_order(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "full")
        assert sel.ids == ["c0", "c1", "c2", "c3", "c4"]
        assert sel.scores == [None] * 5

    def test_needs_no_scores_directly(self) -> None:
        sel = FullContext().select("q", ["a", "b"])
        assert sel.ids == ["0", "1"]

    def test_given_scores_are_reported(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "full", scores=SCORES)
        assert sel.scores == [0.9, 0.9, 0.5, 0.2, 0.1]

    def test_max_tokens_cuts_full(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "full", scores=SCORES, max_tokens=95)
        assert sel.ids == RANKING[:3]
        assert "cut to 3 by max_tokens=95" in sel.explanation

    def test_full_takes_no_value(self) -> None:
        with pytest.raises(ValueError, match="takes no @value"):
            ctxsel.get_selector("full@3")

    def test_full_with_nan_policy_last_keeps_every_chunk(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "full", scores=[0.2, math.nan, 0.5, -math.inf, 0.1], nan_policy="last")
        # finite ones first by score, then the non-finite ones in position order
        assert sel.ids == ["c2", "c0", "c4", "c1", "c3"]


class TestScoreThreshold:
    @pytest.mark.parametrize(
        ("threshold", "expected"),
        [
            (0.9, ["c1", "c3"]),  # >= is inclusive
            (0.5, ["c1", "c3", "c2"]),
            (0.2, ["c1", "c3", "c2", "c0"]),
            (0.15, ["c1", "c3", "c2", "c0"]),
            (0.1, RANKING),
            (-5.0, RANKING),
        ],
    )
    def test_keeps_scores_at_least_threshold(self, threshold: float, expected: list[str]) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), f"threshold@{threshold}", scores=SCORES)
        assert sel.ids == expected

    def test_nothing_above_threshold_raised_to_min_k(self) -> None:
        sel = ctxsel.select("q", chunks(TOKENS), "threshold@0.95", scores=SCORES)
        assert sel.ids == ["c1"]
        assert sel.explanation.startswith("score >= 0.95: 0 of 5 chunks")

    def test_nothing_above_threshold_with_min_k_zero(self) -> None:
        assert ctxsel.select("q", chunks(TOKENS), "threshold@0.95", scores=SCORES, min_k=0).ids == []

    @pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
    def test_threshold_must_be_finite(self, bad: float) -> None:
        with pytest.raises(ValueError, match="threshold must be finite"):
            ScoreThreshold(threshold=bad)

    def test_threshold_is_float_in_config(self) -> None:
        assert ScoreThreshold(threshold=1).config()["threshold"] == 1.0
        assert isinstance(ScoreThreshold(threshold=1).threshold, float)

    def test_negative_scores(self) -> None:
        sel = ctxsel.select("q", chunks([1, 1, 1]), "threshold@-0.5", scores=[-0.4, -0.6, -0.5])
        assert sel.ids == ["c0", "c2"]


def test_config_records_shared_parameters() -> None:
    cfg = ctxsel.get_selector("top-k@3", min_k=2, max_tokens=100, nan_policy="last").config()
    assert cfg == {"k": 3, "min_k": 2, "max_tokens": 100, "nan_policy": "last"}


def test_numpy_scores_accepted() -> None:
    sel = ctxsel.select("q", chunks(TOKENS), "top-k@2", scores=np.asarray(SCORES, dtype=np.float32))
    assert sel.ids == ["c1", "c3"]
    assert all(isinstance(s, float) for s in sel.scores)
