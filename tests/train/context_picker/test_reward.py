"""The picker reward's three rules (paper Sec. 3.3) on literal cases, per stage."""

from __future__ import annotations

import pytest

from ctxsel.selectors.context_picker.picker import PickerDetails
from ctxsel.train.context_picker.reward import (
    INVALID_REWARD,
    STAGE1,
    STAGE2,
    PickerReward,
    coverage,
    picker_reward,
)
from ctxsel.types import Chunk, Example, Selection

GOLD = ["a", "b"]


def test_stage_constants_follow_the_papers_ordering():
    assert (STAGE1.red, STAGE1.alpha) == (3, 0.05)
    assert (STAGE2.red, STAGE2.alpha) == (1, 0.25)
    assert STAGE2.red < STAGE1.red and STAGE2.alpha > STAGE1.alpha


@pytest.mark.parametrize(
    "selected, stage, expected",
    [
        (None, 1, -1.0),  # invalid reply
        (None, 2, -1.0),
        (["a", "b"], 1, 1.0),  # exact gold
        (["a", "b"], 2, 1.0),
        (["a"], 1, 0.5),  # half covered, no oversampling
        (["a", "x"], 1, 0.5),  # same size as gold: no penalty
        (["a", "b", "x"], 1, 0.95),  # one extra: 1 - 0.05
        (["a", "b", "x"], 2, 0.75),  # one extra: 1 - 0.25
        (["a", "b", "x", "y", "z"], 1, 0.85),  # |S| = |gold| + red_1: still scored
        (["a", "b", "x", "y", "z", "w"], 1, 0.0),  # beyond the margin: 0
        (["a", "b", "x", "y"], 2, 0.0),  # beyond red_2 = 1
        (["x", "y", "z"], 2, -0.25),  # valid, covers nothing, oversamples
        (["x"], 2, 0.0),
    ],
)
def test_literal_rewards(selected, stage, expected):
    assert picker_reward(selected, GOLD, stage) == pytest.approx(expected)


def test_a_valid_pick_always_beats_an_invalid_one_and_coverage_dominates_in_stage_1():
    worst_valid = min(
        picker_reward(s, GOLD, st) for st in (1, 2) for s in (["x"], ["x", "y", "z"], ["x", "y", "z", "w", "v"])
    )
    assert worst_valid > INVALID_REWARD
    assert picker_reward(["a", "b", "x", "y", "z"], GOLD, 1) > picker_reward(["a"], GOLD, 1)
    assert picker_reward(["a", "b"], GOLD, 2) > picker_reward(["a", "b", "x"], GOLD, 2) > picker_reward(["a"], GOLD, 2)


def test_coverage_and_empty_gold():
    assert coverage(["a", "b", "c"], ["a", "d"]) == 0.5
    with pytest.raises(ValueError, match="S_gold is empty"):
        picker_reward(["a"], [], 1)


def test_shared_reward_shape_scores_fallbacks_as_invalid():
    chunks = [Chunk(c, c, n_tokens=1) for c in "abx"]
    ex = Example("e", "q", chunks, gold_ids=GOLD)

    def sel(ids, valid):
        return Selection(
            ids=ids,
            scores=[None] * len(ids),
            chunks=[c for c in chunks if c.id in ids],
            method="context-picker",
            config={},
            explanation="",
            n_candidates=3,
            details=PickerDetails(None, valid, not valid, 0, [], [], 0, 0.0),
        )

    r = PickerReward(2)([ex, ex, ex], [sel(["a", "b"], True), sel(["a", "b", "x"], True), sel(["a", "b"], False)])
    assert r == pytest.approx([1.0, 0.75, -1.0])
    assert PickerReward(1).describe()["red"] == 3
    with pytest.raises(ValueError, match="2 examples but 1 selections"):
        PickerReward(1)([ex, ex], [sel(["a"], True)])
