"""The one door: a Query checks the inputs once, and its pool builds a Chunk only for what a
selection returns, on the Python API and over HTTP alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ctxsel
from ctxsel import types as ctxsel_types
from ctxsel.errors import InputError, InputTypeError
from ctxsel.query import Query
from ctxsel.types import Chunk, TextChunks

TEXTS = [f"chunk number {i} says something about topic {i % 7}." for i in range(1000)]
SCORES = [float((i * 37) % 101) for i in range(1000)]


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The ids of the Chunk objects built while the test runs (the pool's and the constructor's)."""
    seen: list[str] = []
    checked = ctxsel_types._checked_chunk

    def counting(cid: str, *rest: Any) -> Chunk:
        seen.append(cid)
        return checked(cid, *rest)

    post_init = Chunk.__post_init__

    def counting_init(self: Chunk) -> None:
        seen.append(self.id)
        post_init(self)

    monkeypatch.setattr(ctxsel_types, "_checked_chunk", counting)
    monkeypatch.setattr(Chunk, "__post_init__", counting_init)
    yield seen


def test_a_query_is_checked_once_and_immutable() -> None:
    q = Query("How heavy?", ["a", "b"], [0.1, 0.9], choices=["x"], gold_ids=["1"])
    assert q.question == "How heavy?" and len(q) == 2 and q.choices == ("x",) and q.gold_ids == ("1",)
    assert isinstance(q.chunks, TextChunks) and q.scores is not None and q.scores.dtype == np.float64
    with pytest.raises(AttributeError, match="immutable"):
        q.question = "other"
    with pytest.raises(InputError, match="question is empty"):
        Query(" \u200b ", ["a"])
    with pytest.raises(InputError, match="got 1 scores for 2 chunks"):
        Query("q", ["a", "b"], [0.5])
    with pytest.raises(InputTypeError, match="choices must be a list of strings"):
        Query("q", ["a"], choices="abc")


def test_id_and_text_objects_stay_columnar() -> None:
    q = Query("q", [{"id": "x", "text": "a"}, {"id": "y", "text": "b"}])
    assert isinstance(q.chunks, TextChunks) and [c.id for c in q.chunks] == ["x", "y"]
    with pytest.raises(InputError, match="duplicate chunk id 'x'"):
        Query("q", [{"id": "x", "text": "a"}, {"id": "x", "text": "b"}])


@pytest.mark.parametrize("shape", ["texts", "objects"])
def test_only_the_returned_chunks_are_built(shape: str, built: list[str]) -> None:
    chunks: Any = TEXTS if shape == "texts" else [{"id": f"c{i}", "text": t} for i, t in enumerate(TEXTS)]
    sel = ctxsel.select("What about topic 3?", chunks, "adaptive-k", scores=SCORES)
    assert 0 < sel.k < 50
    assert sorted(built) == sorted(sel.ids)  # one Chunk per kept chunk, none for the other ~990


def test_only_the_returned_chunks_are_built_over_http(built: list[str], service_client: Any) -> None:
    from ctxsel.service import ServiceSettings

    client = service_client(ServiceSettings(scorer="keywords"))
    built.clear()  # the server's warm-up scores one chunk of its own
    body = {"question": "What about topic 3?", "chunks": [{"id": f"c{i}", "text": t} for i, t in enumerate(TEXTS)]}
    got = client.post("/select", json={**body, "scores": SCORES, "method": "adaptive-k"})
    assert got.status_code == 200
    assert sorted(built) == sorted(got.json()["ids"])
