"""The hybrid scorer: fused scores are the documented weighted min-max sum (or RRF), with real parts."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsel.scoring import get_scorer
from ctxsel.scoring.bm25 import BM25Scorer
from ctxsel.scoring.hybrid import HybridScorer, minmax, reciprocal_ranks
from ctxsel.scoring.keywords import KeywordScorer
from ctxsel.types import as_chunks

CHUNKS = as_chunks(
    [
        "The meteorite in the museum weighs three kilograms.",
        "The museum opens at noon on Sundays.",
        "Bananas are a yellow fruit.",
        "A meteorite is a rock from space.",
    ]
)
QUESTION = "How heavy is the meteorite in the museum?"


def test_minmax_maps_to_unit_interval_and_flat_to_zero() -> None:
    assert minmax(np.array([2.0, 4.0, 3.0])).tolist() == [0.0, 1.0, 0.5]
    assert minmax(np.array([5.0, 5.0])).tolist() == [0.0, 0.0]
    assert minmax(np.array([1.0, np.nan, 3.0])).tolist()[::2] == [0.0, 1.0]


def test_reciprocal_ranks_break_ties_by_position() -> None:
    assert reciprocal_ranks(np.array([0.5, 0.9, 0.5]), k=1).tolist() == [1 / 3, 1 / 2, 1 / 4]


def test_minmax_fusion_is_the_weighted_mean_of_normalised_parts() -> None:
    kw, bm = KeywordScorer(), BM25Scorer()
    h = HybridScorer(dense=2.0, bm25=1.0, dense_scorer=kw, bm25_scorer=bm)
    want = (2 * minmax(kw.score(QUESTION, CHUNKS)) + minmax(bm.score(QUESTION, CHUNKS))) / 3
    got = h.score(QUESTION, CHUNKS)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.dtype == np.float32 and got.min() >= 0.0 and got.max() <= 1.0
    assert int(np.argmax(got)) == 0  # names meteorite and museum


def test_rrf_fusion() -> None:
    kw, bm = KeywordScorer(), BM25Scorer()
    h = HybridScorer(dense=1.0, bm25=1.0, fusion="rrf", rrf_k=60, dense_scorer=kw, bm25_scorer=bm)
    want = (reciprocal_ranks(kw.score(QUESTION, CHUNKS), 60) + reciprocal_ranks(bm.score(QUESTION, CHUNKS), 60)) / 2
    np.testing.assert_allclose(h.score(QUESTION, CHUNKS), want, rtol=1e-6)
    assert "fusion=rrf,rrf_k=60" in h.model_id


def test_zero_weight_part_is_not_built_or_used() -> None:
    h = HybridScorer(dense=0.0, bm25=1.0)
    assert h.dense_scorer is None
    np.testing.assert_allclose(h.score(QUESTION, CHUNKS), minmax(BM25Scorer().score(QUESTION, CHUNKS)), rtol=1e-6)


def test_stopword_question_gives_flat_bm25_part_not_nan() -> None:
    h = HybridScorer(dense=1.0, bm25=1.0, dense_scorer=KeywordScorer())
    scores = h.score("the of and", CHUNKS)
    assert np.isfinite(scores).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dense": 0, "bm25": 0}, "both 0"),
        ({"bm25": -1}, "bm25 must be a number >= 0"),
        ({"fusion": "sum"}, "fusion must be one of minmax, rrf"),
        ({"rrf_k": 0}, "rrf_k must be > 0"),
    ],
)
def test_bad_options_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HybridScorer(dense_scorer=KeywordScorer(), **kwargs)


def test_spec_reaches_the_scorer() -> None:
    h = get_scorer("hybrid[dense=0,bm25=1,fusion=rrf]")
    assert isinstance(h, HybridScorer) and (h.w_dense, h.w_bm25, h.fusion) == (0.0, 1.0, "rrf")
    with pytest.raises(ValueError, match="unknown scorer 'hybird'; choose dense, bm25, keywords, hybrid"):
        get_scorer("hybird")
