"""dedup: five copies of one sentence keep one, the best-ranked."""

from __future__ import annotations

import ctxsel

TEXTS = ["same sentence"] * 5 + ["other"]
SCORES = [0.5, 0.9, 0.4, 0.8, 0.3, 0.1]


def test_five_copies_keep_the_best_ranked_one() -> None:
    sel = ctxsel.select("q?", TEXTS, "top-k@6", scores=SCORES, stages=["dedup"])
    assert sel.ids == ["1", "5"] and sel.scores == [0.9, 0.1]
    assert [c.id for c in sel.chunks] == sel.ids and sel.reading_order == ["1", "5"]
    assert set(sel.meta["dedup"]["dropped"]) == {"0", "2", "3", "4"} and sel.meta["dedup"]["vectors"] is False
    assert "dedup dropped" in sel.explanation


def test_empty_and_one() -> None:
    assert ctxsel.select("q?", ["a"], "top-k@1", scores=[1.0], stages=["dedup"]).ids == ["0"]
