"""The reference rows: ``closed-book`` (no context) and ``oracle`` (exactly the gold chunks)."""

from __future__ import annotations

import pytest

import ctxsel
from ctxsel.selectors import available_methods, get_selector
from ctxsel.selectors.reference import ClosedBook, Oracle
from ctxsel.types import Chunk

# two documents, given out of reading order
CHUNKS = [
    Chunk("b1", "second doc, first part", doc_id="b", position=0),
    Chunk("a2", "first doc, third part", doc_id="a", position=2),
    Chunk("a0", "first doc, first part", doc_id="a", position=0),
    Chunk("a1", "first doc, second part", doc_id="a", position=1),
]


def test_both_are_registered_without_a_main_parameter() -> None:
    methods = available_methods()
    assert methods["oracle"].target == "ctxsel.selectors.reference:Oracle" and methods["oracle"].main_param is None
    assert methods["closed-book"].target == "ctxsel.selectors.reference:ClosedBook"
    assert isinstance(get_selector("oracle"), Oracle) and isinstance(get_selector("closed-book"), ClosedBook)
    assert get_selector("oracle").takes_gold_ids and not get_selector("closed-book").takes_gold_ids
    assert not get_selector("top-k@1").takes_gold_ids


def test_oracle_is_exactly_the_gold_chunks_in_reading_order() -> None:
    sel = Oracle().select("q?", CHUNKS, gold_ids=["b1", "a2", "a0"])
    assert sel.ids == ["a0", "a2", "b1"] and sel.reading_order == ["a0", "a2", "b1"]
    assert sel.scores == [None, None, None] and sel.k == 3 and sel.n_candidates == 4
    assert sel.method == "oracle" and "3 gold chunks of 4" in sel.explanation
    assert sel.text(" | ") == "first doc, first part | first doc, third part | second doc, first part"


def test_oracle_copies_scores_and_ignores_repeated_gold_ids() -> None:
    sel = Oracle().select("q?", CHUNKS, [0.1, 0.2, 0.3, 0.4], gold_ids=["a1", "a1", "b1"])
    assert sel.ids == ["a1", "b1"] and sel.scores == pytest.approx([0.4, 0.1])


def test_oracle_without_gold_ids_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="needs the example's gold chunk ids"):
        Oracle().select("q?", CHUNKS)
    with pytest.raises(ValueError, match="needs the example's gold chunk ids"):
        Oracle().select("q?", CHUNKS, gold_ids=[])
    with pytest.raises(ValueError, match="needs the example's gold chunk ids"):
        ctxsel.select("q?", CHUNKS, method="oracle")


def test_oracle_with_a_gold_id_not_in_the_context_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"gold id\(s\) 'zz' are not among the example's 4 chunks"):
        Oracle().select("q?", CHUNKS, gold_ids=["a0", "zz"])


def test_reference_methods_take_no_budget() -> None:
    with pytest.raises(ValueError, match="bad options for method 'oracle'"):
        get_selector("oracle", max_tokens=100)


def test_closed_book_selects_nothing() -> None:
    sel = ClosedBook().select("q?", CHUNKS, [0.1, 0.2, 0.3, 0.4])
    assert sel.ids == [] and sel.chunks == [] and sel.n_tokens == 0 and sel.n_candidates == 4
    assert sel.text() == "" and sel.explanation == "closed book: none of the 4 chunks is read"
    assert ctxsel.select("q?", CHUNKS, method="closed-book").ids == []
