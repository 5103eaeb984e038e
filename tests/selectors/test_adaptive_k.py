"""Adaptive-k (Taguchi et al., EMNLP 2025).

largest_gap is checked against a literal re-implementation of the paper's
Algorithm 1 written here in plain Python loops; moving_avg and 2diff_spike
on hand-computed cases (integers, so every value is exact in binary).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxsel
from ctxsel.selectors.adaptive_k import (
    AdaptiveK,
    AdaptiveKGap,
    largest_gap_index,
    moving_avg_index,
    second_diff_spike_index,
)
from ctxsel.types import Chunk

MAX_N = 300
POOL = [Chunk(id=f"c{i}", text="x", doc_id="d", position=i, n_tokens=1) for i in range(MAX_N)]


def reference_algorithm_1(
    scores: list[float], buffer: int, head_fraction: float, tail_fraction: float = 0.1
) -> tuple[int, list[int]]:
    """The paper's Algorithm 1, literally: returns (k, selected input positions in rank order)."""
    n = len(scores)
    # sort descending; ties keep their original position order
    order = list(range(n))
    for a in range(1, n):  # insertion sort: stable, no library sort involved
        j = a
        while j > 0 and scores[order[j - 1]] < scores[order[j]]:
            order[j - 1], order[j] = order[j], order[j - 1]
            j -= 1
    s = [scores[i] for i in order]
    if n == 0:
        return 0, []
    gaps = []
    for i in range(n - 1):
        gaps.append(s[i] - s[i + 1])
    tail = math.floor((n - 1) * tail_fraction)
    head = math.floor((n - 1) * head_fraction)
    best_i = None
    best_gap = 0.0
    for i in range(head, n - 1 - tail):
        if best_i is None or gaps[i] > best_gap:  # strict: the first largest gap wins
            best_i = i
            best_gap = gaps[i]
    k = n if best_i is None else min(n, best_i + 1 + buffer)
    return k, order[:k]


def chunks(n: int) -> list[Chunk]:
    return POOL[:n]


def _scores_strategy() -> st.SearchStrategy[list[float]]:
    tie_prone = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, -0.5])
    small_ints = st.integers(-3, 3).map(float)
    general = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
    unit32 = st.floats(-1, 1, width=32)
    element = st.one_of(tie_prone, small_ints, general, unit32)
    return st.one_of(
        st.lists(element, min_size=1, max_size=MAX_N),
        st.lists(tie_prone, min_size=1, max_size=MAX_N),  # many ties
        st.integers(1, MAX_N).flatmap(lambda n: st.lists(general, min_size=n, max_size=n)),
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scores=_scores_strategy(), buffer=st.integers(0, 10), head_fraction=st.sampled_from([0.0, 0.05]))
def test_largest_gap_matches_algorithm_1(scores: list[float], buffer: int, head_fraction: float) -> None:
    expected_k, expected_positions = reference_algorithm_1(scores, buffer, head_fraction)
    sel = ctxsel.select(
        "q", chunks(len(scores)), "adaptive-k@largest_gap", scores=scores, buffer=buffer, head_fraction=head_fraction
    )
    assert sel.k == expected_k
    assert sel.ids == [f"c{i}" for i in expected_positions]


@pytest.mark.parametrize("n", [1, 2, 3, 10, 11, 21, 101, 300])
@pytest.mark.parametrize("head_fraction", [0.0, 0.05])
def test_largest_gap_matches_algorithm_1_on_fixed_random_vectors(n: int, head_fraction: float) -> None:
    rng = random.Random(n)
    for _ in range(5):
        scores = [rng.choice([rng.random(), round(rng.random(), 1)]) for _ in range(n)]
        for buffer in (0, 5):
            k, positions = reference_algorithm_1(scores, buffer, head_fraction)
            sel = ctxsel.select("q", chunks(n), "adaptive-k", scores=scores, buffer=buffer, head_fraction=head_fraction)
            assert (sel.k, sel.ids) == (k, [f"c{i}" for i in positions])


class TestLargestGapHand:
    def test_simple(self) -> None:
        # sorted [.9, .85, .8, .3, .25, .2]: gaps .05 .05 .5 .05 .05; N=6, tail=floor(.5)=0
        # largest at i=2 -> k = 3 + B
        s = [0.9, 0.85, 0.8, 0.3, 0.25, 0.2]
        assert largest_gap_index(np.array(s)) == 2
        sel = ctxsel.select("q", chunks(6), "adaptive-k[buffer=0]", scores=s)
        assert sel.ids == ["c0", "c1", "c2"]
        assert sel.explanation == "largest gap 0.500 between ranks 3 and 4; kept 3 + buffer 0 = 3 of 6"
        gap = sel.details_as(AdaptiveKGap)
        assert (gap.cut_index, gap.strategy) == (2, "largest_gap") and gap.gap == pytest.approx(0.5)
        assert ctxsel.select("q", chunks(6), "adaptive-k[buffer=1]", scores=s).k == 4
        assert ctxsel.select("q", chunks(6), "adaptive-k", scores=s).k == 4  # default B: 6 // 20 -> at least 1
        assert ctxsel.select("q", chunks(6), "adaptive-k[buffer=5]", scores=s).k == 6  # the paper's B=5, capped at N

    def test_tail_is_excluded(self) -> None:
        # N=11: tail = floor(10 * .1) = 1 -> the last gap (10 -> 0) is not searched
        s = [20, 19, 18, 15, 14, 13, 12, 11, 10.5, 10, 0]
        # gaps: 1 1 3 1 1 1 1 .5 .5 10 -> window gaps[0:9] -> i=2
        assert largest_gap_index(np.array(s, dtype=float)) == 2
        assert ctxsel.select("q", chunks(11), "adaptive-k[buffer=0]", scores=s).k == 3
        # with tail_fraction=0 the last gap wins
        assert ctxsel.select("q", chunks(11), "adaptive-k[buffer=0,tail_fraction=0]", scores=s).k == 10

    def test_head_is_excluded(self) -> None:
        # N = 21: head = floor(20 * .05) = 1 -> the first gap is not searched; tail = 2
        s = [100.0, 50.0] + [float(49 - i) for i in range(18)] + [0.0]
        # gaps: [50, 1, 1, ..., 1 (indices 1..18), 32 (index 19)]; window gaps[0:18]
        assert largest_gap_index(np.array(s)) == 0
        # with head: gaps[1:18] are all 1 -> the first of them, i = 1
        assert largest_gap_index(np.array(s), head_fraction=0.05) == 1
        sel = ctxsel.select("q", chunks(21), "adaptive-k[buffer=0,head_fraction=0.05]", scores=s)
        assert sel.ids == ["c0", "c1"]

    def test_unsorted_input_and_ties(self) -> None:
        # positions:      0    1    2    3    4
        s = [0.1, 0.9, 0.9, 0.5, 0.9]
        # sorted [.9(1), .9(2), .9(4), .5(3), .1(0)]; N=5 tail=0; gaps 0 0 .4 .4 -> first max i=2
        sel = ctxsel.select("q", chunks(5), "adaptive-k[buffer=0]", scores=s)
        assert sel.ids == ["c1", "c2", "c4"]


class TestMovingAverage:
    def test_hand_case_window_2(self) -> None:
        # sorted s = [16, 14, 12, 4, 2, 0], w = 2, N = 6, head = 0, tail = floor(5 * .1) = 0
        # moving average (valid): [15, 13, 8, 3, 1]; drops: [2, 5, 5, 2] -> first largest at i = 1
        s = [16.0, 14.0, 12.0, 4.0, 2.0, 0.0]
        assert moving_avg_index(np.array(s), 2) == 1
        sel = ctxsel.select("q", chunks(6), "adaptive-k[strategy=moving_avg,window=2,buffer=0]", scores=s)
        assert sel.ids == ["c0", "c1"]  # k = i + 1 + B = 2
        assert "largest moving-average (w=2) drop after rank 2" in sel.explanation
        # largest_gap on the same scores: gaps [2, 2, 8, 2, 2] -> i = 2, k = 3
        assert ctxsel.select("q", chunks(6), "adaptive-k[buffer=0]", scores=s).k == 3

    def test_hand_case_window_3_with_tail(self) -> None:
        # N = 12, w = 3, head = 0, tail = floor(11 * .1) = 1
        s = [20, 19, 18, 17, 10, 9, 8, 7, 6, 5, 4, -30]
        # ma = [19, 18, 15, 12, 9, 8, 7, 6, 5, -7]   (e.g. (5 + 4 - 30) / 3 = -7)
        # drops = [1, 3, 3, 3, 1, 1, 1, 1, 12]; search drops[0 : 9 - 1] (12 excluded) -> i = 1
        assert moving_avg_index(np.array(s, dtype=float), 3) == 1
        sel = ctxsel.select("q", chunks(12), "adaptive-k[strategy=moving_avg,window=3]", scores=s)
        assert sel.k == 3  # 1 + 1 + B(12 chunks: 12 // 20, at least 1)
        assert sel.config["window"] == 3
        # largest_gap: gaps [1,1,1,7,1,1,1,1,1,1,34], last excluded -> i = 3, k = 4 + 1 = 5; 4 + 5 = 9 with B = 5
        assert ctxsel.select("q", chunks(12), "adaptive-k", scores=s).k == 5
        assert ctxsel.select("q", chunks(12), "adaptive-k[buffer=5]", scores=s).k == 9

    def test_shuffled_input(self) -> None:
        s = [16.0, 14.0, 12.0, 4.0, 2.0, 0.0]
        perm = [3, 0, 5, 1, 4, 2]
        sel = ctxsel.select(
            "q", chunks(6), "adaptive-k[strategy=moving_avg,window=2,buffer=0]", scores=[s[p] for p in perm]
        )
        # the two best (16, 14) sit at input positions 1 and 3
        assert sel.ids == ["c1", "c3"]

    def test_fallback_when_n_below_window_plus_one(self) -> None:
        # N = 4 < w + 1 = 6: moving average undefined -> largest_gap: gaps [.1, .6, .1] -> i = 1
        s = [0.9, 0.8, 0.2, 0.1]
        assert moving_avg_index(np.array(s), 5) is None
        sel = ctxsel.select("q", chunks(4), "adaptive-k[strategy=moving_avg,buffer=0]", scores=s)
        assert sel.ids == ["c0", "c1"]
        assert "fell back to largest_gap" in sel.explanation

    def test_all_equal_scores_keep_first_plus_buffer(self) -> None:
        sel = ctxsel.select("q", chunks(50), "adaptive-k@moving_avg", scores=[0.1] * 50)
        assert sel.k == 3  # 1 + B(50 chunks: 50 // 20 = 2)
        assert "all scores equal" in sel.explanation

    def test_window_one_is_largest_gap_on_exact_values(self) -> None:
        s = [float(x) for x in (9, 8, 7, 3, 2, 1, 0)]
        assert moving_avg_index(np.array(s), 1) == largest_gap_index(np.array(s)) == 2


class TestSecondDiffSpike:
    def test_spike_found(self) -> None:
        # s = [10, 9, 8, 4, 3, 2, 1], N = 7, head = tail = 0
        # d1 = [-1, -1, -4, -1, -1, -1]; d2 = [0, -3, 3, 0, 0]
        # first j >= 1 with d2[j] > 0 after some d2 < 0: j = 2 -> i = j + 1 = 3 -> k = 4 + B
        s = [10.0, 9.0, 8.0, 4.0, 3.0, 2.0, 1.0]
        assert second_diff_spike_index(np.array(s)) == (3, False)
        sel = ctxsel.select("q", chunks(7), "adaptive-k[strategy=2diff_spike,buffer=0]", scores=s)
        assert sel.ids == ["c0", "c1", "c2", "c3"]
        assert "second-difference spike after rank 4" in sel.explanation
        assert "fell back" not in sel.explanation
        # largest_gap would cut one earlier (gap 8 -> 4 at i = 2)
        assert ctxsel.select("q", chunks(7), "adaptive-k[buffer=0]", scores=s).k == 3

    def test_spike_with_head(self) -> None:
        # head_fraction .2: head = floor(6 * .2) = 1, trimmed = [9, 8, 4, 3, 2, 1]
        # d1 = [-1, -4, -1, -1, -1]; d2 = [-3, 3, 0, 0] -> j = 1 -> i = j + 1 + head = 3
        s = [10.0, 9.0, 8.0, 4.0, 3.0, 2.0, 1.0]
        assert second_diff_spike_index(np.array(s), head_fraction=0.2) == (3, False)

    def test_fallback_concave_curve(self) -> None:
        # s = [10, 9.5, 8.5, 6.5, 2.5]: d1 = [-.5, -1, -2, -4]; d2 = [-.5, -1, -2] never > 0
        # -> largest_gap on the trimmed scores (N = 5, tail = 0): gaps [.5, 1, 2, 4] -> i = 3
        s = [10.0, 9.5, 8.5, 6.5, 2.5]
        assert second_diff_spike_index(np.array(s)) == (3, True)
        sel = ctxsel.select("q", chunks(5), "adaptive-k[strategy=2diff_spike,buffer=0]", scores=s)
        assert sel.k == 4
        assert "no second-difference spike: fell back to largest_gap" in sel.explanation

    def test_fallback_applies_the_tail_rule_twice(self) -> None:
        # s_i = 100 - i^2, i = 0..20 (N = 21): d2 = -2 everywhere -> fallback.
        # tail = floor(20 * .1) = 2 -> trimmed = s[0:19] (19 values); inside the fallback
        # tail' = floor(18 * .1) = 1 -> gaps 2i+1 searched for i in [0, 17) -> i = 16 -> k = 17.
        # Plain largest_gap searches i in [0, 18) -> i = 17 -> k = 18.
        s = [float(100 - i * i) for i in range(21)]
        assert second_diff_spike_index(np.array(s)) == (16, True)
        assert ctxsel.select("q", chunks(21), "adaptive-k[strategy=2diff_spike,buffer=0]", scores=s).k == 17
        assert ctxsel.select("q", chunks(21), "adaptive-k[buffer=0]", scores=s).k == 18

    def test_fallback_adds_head_back(self) -> None:
        # same curve, head_fraction .05: head = floor(20 * .05) = 1, tail = 2 -> trimmed = s[1:19]
        # (18 values). Fallback on trimmed: head' = floor(17 * .05) = 0, tail' = floor(1.7) = 1,
        # gaps[t] = 2(t+1)+1 searched for t in [0, 16) -> t = 15 -> i = t + head = 16 -> k = 17
        # (the authors' code would return 15 here: they do not add head back).
        s = [float(100 - i * i) for i in range(21)]
        assert second_diff_spike_index(np.array(s), head_fraction=0.05) == (16, True)
        sel = ctxsel.select("q", chunks(21), "adaptive-k[strategy=2diff_spike,buffer=0,head_fraction=0.05]", scores=s)
        assert sel.k == 17

    def test_two_scores(self) -> None:
        # d2 is empty -> fallback -> largest_gap on 2 scores -> i = 0 -> k = min(2, 1 + 5) = 2
        assert second_diff_spike_index(np.array([0.9, 0.1])) == (0, True)
        assert ctxsel.select("q", chunks(2), "adaptive-k@2diff_spike", scores=[0.1, 0.9]).ids == ["c1", "c0"]


class TestDegenerate:
    @pytest.mark.parametrize("strategy", ["largest_gap", "moving_avg", "2diff_spike"])
    def test_single_score(self, strategy: str) -> None:
        sel = ctxsel.select("q", chunks(1), f"adaptive-k@{strategy}", scores=[0.3])
        assert sel.ids == ["c0"]
        assert "no gap to search among 1 scores, kept all" in sel.explanation

    def test_index_helpers_on_tiny_input(self) -> None:
        assert largest_gap_index(np.array([0.5])) is None
        assert moving_avg_index(np.array([0.5, 0.4]), 5) is None
        assert second_diff_spike_index(np.array([0.5])) == (None, True)

    def test_empty_window_keeps_all(self) -> None:
        # head .6 + tail .5 of the gaps leaves nothing to search
        sel = ctxsel.select(
            "q",
            chunks(11),
            "adaptive-k[head_fraction=0.6,tail_fraction=0.5,buffer=0]",
            scores=[float(10 - i) for i in range(11)],
        )
        assert sel.k == 11
        assert "kept all" in sel.explanation


class TestConfig:
    def test_defaults(self) -> None:
        sel = AdaptiveK()
        assert sel.config() == {
            "strategy": "largest_gap",
            "buffer": None,
            "head_fraction": 0.0,
            "tail_fraction": 0.1,
            "min_k": 1,
            "max_tokens": None,
            "nan_policy": "raise",
        }

    def test_window_only_recorded_for_moving_avg(self) -> None:
        assert "window" not in ctxsel.get_selector("adaptive-k@2diff_spike").config()
        assert ctxsel.get_selector("adaptive-k[strategy=moving_avg,window=7]").config()["window"] == 7

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"strategy": "biggest"}, "strategy must be one of"),
            ({"buffer": -1}, "buffer must be >= 0"),
            ({"head_fraction": 1.0}, "head_fraction must be >= 0 and < 1"),
            ({"head_fraction": -0.1}, "head_fraction must be >= 0 and < 1"),
            ({"tail_fraction": 1.5}, "tail_fraction must be >= 0 and < 1"),
            ({"strategy": "moving_avg", "window": 0}, "window must be >= 1"),
            ({"window": 3}, "window is the moving average's width: it applies to strategy=moving_avg"),
        ],
    )
    def test_bad_options(self, options: dict, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            AdaptiveK(**options)
        with pytest.raises(ValueError, match=message):
            ctxsel.get_selector("adaptive-k", **options)
