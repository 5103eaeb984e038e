"""Property test of the Python API, ``ctxsel.select``, with random input:
strings of every kind (RTL and zero-width marks, lone surrogates, emoji),
huge and non-finite numbers, options of any type, and nested junk where a
string or a list belongs.

Whatever the input, ``select`` either returns a Selection whose ids are
among the chunks' ids, or raises ValueError or TypeError with a message
(what a caller catches for bad input): never another exception from deep
inside (AttributeError, IndexError, a numpy error), and never a hang. The
keyword scorer keeps it fast (no model).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxsel

MARKS = st.sampled_from(["\u202e", "\u200b", "\u200f", "\ufeff", "\u0645", "\u05d0", "\U0001f600", "\ud800", "\udfff"])
TEXT = st.text(alphabet=st.characters() | MARKS, max_size=30)
NUMBER = (
    st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, -1, 2**63, 1e308])
)
SCALAR = st.none() | st.booleans() | NUMBER | TEXT
JUNK = st.recursive(
    SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8
)
METHOD = st.sampled_from(
    [
        "adaptive-k",
        "top-k@2",
        "autocut@1",
        "threshold@0.5",
        "top-n-tokens@5k",
        "full",
        "adaptive-k[strategy=moving_avg,window=3]",
        "top-k[k=two]",
        "adaptive-k[buffer=-1]",
        f"top-k@{10**30}",
        "threshold@nan",
        "??",
        "",
    ]
)
OPTION_KEY = st.sampled_from(["min_k", "max_tokens", "buffer", "k", "nan_policy", "strategy", "window"])


@st.composite
def calls(draw: Any) -> tuple[Any, Any, str, Any, dict[str, Any]]:
    chunks = draw(
        st.lists(
            TEXT | st.builds(lambda i, t: ctxsel.Chunk(id=i, text=t), TEXT.filter(bool), TEXT), min_size=0, max_size=8
        )
    )
    question = draw(TEXT)
    scores: Any = None
    if draw(st.booleans()):
        scores = draw(st.lists(NUMBER, min_size=len(chunks), max_size=len(chunks)) | st.lists(NUMBER, max_size=4))
    options = draw(st.dictionaries(OPTION_KEY, SCALAR, max_size=2))
    return question, chunks, draw(METHOD), scores, options


@settings(
    max_examples=200,
    deadline=timedelta(seconds=10),
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(calls())
def test_select_returns_a_selection_or_raises_a_clear_error(call: tuple[Any, Any, str, Any, dict[str, Any]]) -> None:
    question, chunks, method, scores, options = call
    t0 = time.monotonic()
    try:
        sel = ctxsel.select(question, chunks, method, scores, scorer="keywords", **options)
    except (ValueError, TypeError) as e:
        assert str(e), f"{type(e).__name__} without a message"
        assert "not supported between" not in str(e), str(e)
    else:
        ids = [c.id if isinstance(c, ctxsel.Chunk) else str(i) for i, c in enumerate(chunks)]
        assert set(sel.ids) <= set(ids)
        assert len(sel.ids) == len(set(sel.ids)) == sel.k
    assert time.monotonic() - t0 < 10


@settings(
    max_examples=100, deadline=timedelta(seconds=10), derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(JUNK, JUNK)
def test_junk_where_a_question_and_chunks_belong_is_a_clear_error(question: Any, chunks: Any) -> None:
    try:
        ctxsel.select(question, chunks, "top-k@2", scorer="keywords")
    except (ValueError, TypeError) as e:
        assert str(e)
