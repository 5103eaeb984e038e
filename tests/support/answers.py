"""Reading the answer an answering method (SAGE, Self-Route, a reader) put on its Selection."""

from __future__ import annotations

from ctxsel.types import RoutedAnswer, Selection


def answer_of(sel: Selection) -> RoutedAnswer:
    """``sel.answer``, which the test expects to be there (it fails here if the method gave none)."""
    assert sel.answer is not None, "the method gave no answer"
    return sel.answer
