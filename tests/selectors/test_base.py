"""The rules every selector shares (selectors/base.py): ranking, score
validation, NaN policy, min_k, the hard max_tokens budget, bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ctxsel
from ctxsel.selectors.adaptive_k import AdaptiveKGap
from ctxsel.selectors.base import ScoreCutSelector, Selector, rank
from ctxsel.types import Chunk

SPECS = [
    "top-k@3",
    "top-n-tokens@50",
    "threshold@0.2",
    "autocut@1",
    "autocut@2",
    "adaptive-k@largest_gap",
    "adaptive-k@moving_avg",
    "adaptive-k@2diff_spike",
    "full",
]


def chunks(n: int, tokens: int = 10) -> list[Chunk]:
    return [Chunk(id=f"c{i}", text=f"chunk {i}", doc_id="d", position=i, n_tokens=tokens) for i in range(n)]


class TestRank:
    def test_descending_ties_by_position(self) -> None:
        order, n_finite = rank(np.array([0.1, 0.5, 0.1, 0.5, 0.3]))
        assert order.tolist() == [1, 3, 4, 0, 2]
        assert n_finite == 5

    def test_non_finite_last_in_position_order(self) -> None:
        order, n_finite = rank(np.array([math.nan, 0.2, -math.inf, 0.9, math.inf]), "last")
        assert order.tolist() == [3, 1, 0, 2, 4]
        assert n_finite == 2

    def test_raise_names_positions(self) -> None:
        with pytest.raises(ValueError, match=r"2 score\(s\) are NaN or infinite \(chunk positions 1, 3\)"):
            rank(np.array([0.1, math.nan, 0.2, math.inf]))

    def test_many_bad_positions_are_elided(self) -> None:
        with pytest.raises(ValueError, match=r"7 score\(s\).*positions 0, 1, 2, 3, 4 \.\.\.\)"):
            rank(np.full(7, math.nan))

    def test_empty(self) -> None:
        order, n_finite = rank(np.zeros(0))
        assert order.tolist() == [] and n_finite == 0


class TestEmptyAndTiny:
    @pytest.mark.parametrize("spec", SPECS)
    def test_n_zero_selects_nothing(self, spec: str) -> None:
        sel = ctxsel.select("q", [], spec, scores=[])
        assert sel.k == 0 and sel.ids == [] and sel.n_candidates == 0
        assert sel.explanation == "empty context: nothing to select"

    @pytest.mark.parametrize("spec", SPECS)
    def test_n_zero_without_scores_through_ctxsel_select(self, spec: str) -> None:
        # no scorer is built for an empty context
        assert ctxsel.select("q", [], spec).ids == []

    @pytest.mark.parametrize("spec", SPECS)
    def test_n_one_keeps_the_chunk(self, spec: str) -> None:
        sel = ctxsel.select("q", chunks(1), spec, scores=[0.7])
        assert sel.ids == ["c0"]
        assert sel.scores == [0.7]

    @pytest.mark.parametrize("spec", SPECS)
    def test_n_one_negative_score(self, spec: str) -> None:
        # threshold@0.2 keeps nothing by itself, min_k=1 raises it
        assert ctxsel.select("q", chunks(1), spec, scores=[-3.0]).ids == ["c0"]


class TestAllEqual:
    def test_fixed_methods_break_ties_by_position(self) -> None:
        s = [0.4] * 8
        assert ctxsel.select("q", chunks(8), "top-k@3", scores=s).ids == ["c0", "c1", "c2"]
        assert ctxsel.select("q", chunks(8), "threshold@0.4", scores=s).k == 8
        assert ctxsel.select("q", chunks(8), "full", scores=s).ids == [f"c{i}" for i in range(8)]

    def test_autocut_keeps_everything(self) -> None:
        sel = ctxsel.select("q", chunks(8), "autocut@1", scores=[0.4] * 8)
        assert sel.k == 8

    @pytest.mark.parametrize("strategy", ["largest_gap", "2diff_spike"])
    def test_adaptive_k_first_gap_plus_buffer(self, strategy: str) -> None:
        # every gap is 0: the first wins, k = min(N, 1 + B) = 3 with B = 40 // 20 (docstring)
        sel = ctxsel.select("q", chunks(40), f"adaptive-k@{strategy}", scores=[0.4] * 40)
        assert sel.ids == [f"c{i}" for i in range(3)]
        assert "all scores equal" in sel.explanation

    def test_adaptive_k_all_equal_small_n(self) -> None:
        assert ctxsel.select("q", chunks(3), "adaptive-k", scores=[0.4] * 3).k == 2  # 1 + B(at least 1)
        assert ctxsel.select("q", chunks(3), "adaptive-k[buffer=5]", scores=[0.4] * 3).k == 3


class TestNonFinite:
    @pytest.mark.parametrize("spec", SPECS)
    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
    def test_default_raises_naming_positions(self, spec: str, bad: float) -> None:
        with pytest.raises(ValueError, match=r"chunk positions 2\)"):
            ctxsel.select("q", chunks(4), spec, scores=[0.3, 0.2, bad, 0.1])

    def test_nan_policy_last_ranks_them_last(self) -> None:
        """ "last" means ranked last: a count (top-k's k) reaches them past the finite ones, in position order."""
        scores = [math.nan, 0.2, 0.9, -math.inf]
        sel = ctxsel.select("q", chunks(4), "top-k@4", scores=scores, nan_policy="last")
        assert sel.ids == ["c2", "c1", "c0", "c3"] and sel.scores == [0.9, 0.2, None, None]
        assert ctxsel.select("q", chunks(4), "top-k@3", scores=scores, nan_policy="last").ids == ["c2", "c1", "c0"]
        assert ctxsel.select("q", chunks(4), "top-k@2", scores=scores, nan_policy="last").ids == ["c2", "c1"]

    def test_issue_45_top_k_at_3_keeps_the_nan_chunk_third(self) -> None:
        sel = ctxsel.select("q", chunks(3), "top-k@3", scores=[0.9, math.nan, 0.5], nan_policy="last")
        assert sel.ids == ["c0", "c2", "c1"] and sel.explanation == "fixed top-3: kept 3 of 3"
        sel = ctxsel.select("q", chunks(3), "top-n-tokens@1k", scores=[0.9, math.nan, 0.5], nan_policy="last")
        assert sel.ids == ["c0", "c2", "c1"]

    def test_minus_inf_is_never_the_largest_gap(self) -> None:
        # finite sorted [0.9, 0.5, 0.45]: N=3, tail=floor(2*0.1)=0, gaps [0.4, 0.05] -> i=0, k=1 (B=0).
        # Were -inf part of the curve, the gap 0.45 - (-inf) = inf would win and k would be 4.
        sel = ctxsel.select(
            "q", chunks(4), "adaptive-k[buffer=0]", scores=[0.45, 0.9, -math.inf, 0.5], nan_policy="last"
        )
        assert sel.ids == ["c1"]
        assert sel.details_as(AdaptiveKGap).cut_index == 0
        assert sel.details_as(AdaptiveKGap).gap == pytest.approx(0.4)

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
    @pytest.mark.parametrize("strategy", ["largest_gap", "moving_avg", "2diff_spike"])
    def test_adaptive_k_ignores_non_finite(self, strategy: str, bad: float) -> None:
        finite = [0.9, 0.88, 0.86, 0.84, 0.5, 0.48, 0.46]
        spec = f"adaptive-k[strategy={strategy},buffer=0{',window=2' if strategy == 'moving_avg' else ''}]"
        ref = ctxsel.select("q", chunks(7), spec, scores=finite)
        sel = ctxsel.select(
            "q",
            chunks(9),
            spec,
            scores=[bad, *finite, bad],
            nan_policy="last",
        )
        # same cut, ids shifted by one position
        assert sel.ids == [f"c{int(i[1:]) + 1}" for i in ref.ids]
        assert 1 <= ref.k < 7  # a real cut, not "keep all"

    def test_autocut_ignores_minus_inf(self) -> None:
        s = [2, 1.95, 1.9, 0.2, 0.1, 0.1, -1]
        sel = ctxsel.select("q", chunks(8), "autocut@1", scores=[*s, -math.inf], nan_policy="last")
        assert sel.ids == ["c0", "c1", "c2"]

    def test_all_non_finite_min_k_takes_first_position(self) -> None:
        # documented: min_k raises k to min(min_k, N) even when nothing was ranked
        sel = ctxsel.select("q", chunks(3), "adaptive-k", scores=[math.nan] * 3, nan_policy="last")
        assert sel.ids == ["c0"]
        assert sel.scores == [None]
        assert sel.explanation.startswith("no finite scores")

    def test_all_non_finite_min_k_zero(self) -> None:
        sel = ctxsel.select("q", chunks(3), "adaptive-k", scores=[math.nan] * 3, nan_policy="last", min_k=0)
        assert sel.ids == []
        # a count takes them in position order, all being ranked last
        sel = ctxsel.select("q", chunks(3), "top-k@2", scores=[math.nan] * 3, nan_policy="last", min_k=0)
        assert sel.ids == ["c0", "c1"]

    def test_bad_nan_policy(self) -> None:
        with pytest.raises(ValueError, match="nan_policy must be one of 'raise', 'last'"):
            ctxsel.get_selector("top-k@1", nan_policy="ignore")


class TestInputValidation:
    def test_duplicate_chunk_ids(self) -> None:
        dup = [Chunk(id="a", text="x", n_tokens=1), Chunk(id="a", text="y", n_tokens=1)]
        with pytest.raises(ValueError, match="duplicate chunk id 'a'"):
            ctxsel.select("q", dup, "top-k@1", scores=[0.1, 0.2])

    def test_duplicate_texts_distinct_ids_are_fine_and_deterministic(self) -> None:
        texts = ["same text", "same text", "other", "same text"]
        scores = [0.5, 0.5, 0.1, 0.5]
        a = ctxsel.select("q", texts, "top-k@2", scores=scores)
        b = ctxsel.select("q", texts, "top-k@2", scores=scores)
        assert a.ids == b.ids == ["0", "1"]

    @pytest.mark.parametrize("n_scores", [0, 2, 4])
    def test_wrong_number_of_scores(self, n_scores: int) -> None:
        with pytest.raises(ValueError, match=f"got {n_scores} scores for 3 chunks"):
            ctxsel.select("q", chunks(3), "top-k@1", scores=[0.1] * n_scores)

    def test_score_based_selector_without_scores(self) -> None:
        with pytest.raises(ValueError, match="needs scores"):
            ctxsel.get_selector("top-k@1").select("q", chunks(3))

    def test_non_numeric_scores(self) -> None:
        with pytest.raises(ValueError):
            ctxsel.select("q", chunks(2), "top-k@1", scores=["high", "low"])

    @pytest.mark.parametrize("bad", ["-1", "-5"])
    def test_negative_min_k(self, bad: str) -> None:
        with pytest.raises(ValueError, match="min_k must be >= 0"):
            ctxsel.get_selector("top-k@1", min_k=int(bad))

    def test_negative_max_tokens(self) -> None:
        with pytest.raises(ValueError, match="max_tokens must be >= 0 or None"):
            ctxsel.get_selector("top-k@1", max_tokens=-1)


class TestMinK:
    def test_min_k_raises_k(self) -> None:
        sel = ctxsel.select("q", chunks(6), "top-k@1", scores=[0.1, 0.6, 0.5, 0.4, 0.3, 0.2], min_k=3)
        assert sel.ids == ["c1", "c2", "c3"]
        assert sel.explanation.endswith("; raised to min_k=3")

    def test_min_k_above_n_is_n(self) -> None:
        sel = ctxsel.select("q", chunks(2), "top-k@1", scores=[0.1, 0.6], min_k=10)
        assert sel.ids == ["c1", "c0"]
        assert "raised to min_k=10 (capped at all 2 chunks)" in sel.explanation

    def test_min_k_does_not_lower_k(self) -> None:
        assert ctxsel.select("q", chunks(6), "top-k@4", scores=[0.5] * 6, min_k=2).k == 4

    def test_min_k_in_spec(self) -> None:
        assert ctxsel.select("q", chunks(6), "threshold[threshold=0.9,min_k=2]", scores=[0.5] * 6).k == 2


class TestMaxTokens:
    def test_cuts_to_longest_prefix_that_fits(self) -> None:
        cs = [Chunk(id=f"c{i}", text="x", n_tokens=t) for i, t in enumerate([5, 7, 11, 13])]
        sel = ctxsel.select("q", cs, "full", scores=[0.4, 0.3, 0.2, 0.1], max_tokens=23)
        assert sel.ids == ["c0", "c1", "c2"]  # 5 + 7 + 11 = 23 <= 23
        assert sel.n_tokens == 23
        assert sel.explanation.endswith("; cut to 3 by max_tokens=23")

    def test_budget_wins_over_min_k_empty_selection(self) -> None:
        cs = [Chunk(id="big", text="x", n_tokens=100), Chunk(id="small", text="y", n_tokens=1)]
        sel = ctxsel.select("q", cs, "top-k@2", scores=[0.9, 0.1], max_tokens=50, min_k=2)
        assert sel.ids == []
        assert sel.n_tokens == 0
        assert "cut to 0 by max_tokens=50" in sel.explanation

    def test_prefix_not_knapsack(self) -> None:
        # the kept set is a prefix of the ranking: a later small chunk is not
        # taken in place of a big one that does not fit
        cs = [
            Chunk(id="a", text="x", n_tokens=5),
            Chunk(id="b", text="x", n_tokens=50),
            Chunk(id="c", text="x", n_tokens=1),
        ]
        sel = ctxsel.select("q", cs, "full", scores=[0.9, 0.8, 0.7], max_tokens=10)
        assert sel.ids == ["a"]

    def test_zero_budget(self) -> None:
        assert ctxsel.select("q", chunks(3), "top-k@3", scores=[0.3, 0.2, 0.1], max_tokens=0).ids == []

    def test_budget_larger_than_needed_changes_nothing(self) -> None:
        sel = ctxsel.select("q", chunks(3), "top-k@2", scores=[0.3, 0.2, 0.1], max_tokens=10_000)
        assert sel.ids == ["c0", "c1"]
        assert "max_tokens" not in sel.explanation


class TestDecide:
    def test_decide_on_arrays(self) -> None:
        sel = ctxsel.get_selector("top-k@2")
        assert isinstance(sel, ScoreCutSelector)
        d = sel.decide(np.array([0.1, 0.7, 0.3]), np.array([1, 1, 1]))
        assert d.order.tolist() == [1, 2, 0]
        assert d.k == 2

    def test_selector_instance_passes_through(self) -> None:
        inst = ctxsel.get_selector("top-k@2")
        assert ctxsel.get_selector(inst) is inst
        assert ctxsel.select("q", chunks(3), inst, scores=[0.1, 0.7, 0.3]).ids == ["c1", "c2"]

    def test_is_abstract(self) -> None:
        with pytest.raises(TypeError):
            Selector()  # type: ignore[abstract]
