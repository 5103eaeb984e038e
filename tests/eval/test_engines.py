"""Engine choice: validation that needs no Ray cluster."""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import pytest

from ctxsel.eval.runner import ENGINES, evaluate
from ctxsel.types import Chunk, Example


def _examples() -> list[Example]:
    chunks = [Chunk(id=str(i), text=t, position=i) for i, t in enumerate(["alpha beta", "gamma", "beta delta"])]
    return [Example(id="q1", question="beta?", chunks=chunks, gold_ids=["0"])]


def test_unknown_engine(tmp_path: Path) -> None:
    assert ENGINES == ("local", "ray")
    with pytest.raises(ValueError, match="unknown engine 'spark'"):
        evaluate(_examples(), ["top-k@1"], output_dir=tmp_path, scorer="keywords", engine="spark", progress=False)


def test_local_engine_recorded_in_config(tmp_path: Path) -> None:
    import json

    evaluate(_examples(), ["top-k@1"], output_dir=tmp_path, scorer="keywords", progress=False)
    cfg = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    assert cfg["engine"] == "local"


def test_unpicklable_reader_needs_a_factory() -> None:
    pytest.importorskip("ray")
    from ctxsel.eval.ray_engine import run_on_ray
    from ctxsel.eval.runner import _make_selector, example_rows
    from ctxsel.ranking import Ranking
    from ctxsel.scoring.keywords import KeywordScorer

    class Reader:
        def __init__(self) -> None:
            self.lock = threading.Lock()

    with pytest.raises(ValueError, match="reader_factory"):
        run_on_ray(
            _examples(),
            {},
            Ranking(KeywordScorer()),
            None,
            reader=Reader(),
            make_selector=functools.partial(_make_selector, resources={}),  # as evaluate() passes it
            rows=example_rows,
        )


def test_scorers_pickle_without_their_state(tmp_path: Path) -> None:
    import pickle

    from ctxsel.scoring.bm25 import BM25Scorer
    from ctxsel.scoring.cache import EmbeddingCache

    cache = EmbeddingCache(tmp_path / "e.sqlite")
    back = pickle.loads(pickle.dumps(cache))
    assert back.path == cache.path and back.get_many(["x"]) == {}
    bm = BM25Scorer(k1=1.2)
    chunks = _examples()[0].chunks
    before = bm.score("beta", chunks)
    again = pickle.loads(pickle.dumps(bm))
    assert again.k1 == 1.2 and list(again.score("beta", chunks)) == list(before)


def test_joining_a_token_cluster_without_token_mode_says_how(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    from ctxsel.eval.ray_engine import RayOptions, connect

    class AuthenticationError(Exception):
        pass

    def refuse(**kw: object) -> None:
        try:
            raise AuthenticationError("RPC error: InvalidAuthToken: Authentication token is missing")
        except AuthenticationError as e:
            raise ConnectionError("Failed to connect to Ray cluster") from e

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(ConnectionError, match="RAY_AUTH_MODE=token"):
        connect(RayOptions(address="127.0.0.1:6379"))
    # any other failure passes through unchanged
    monkeypatch.setattr(ray, "init", lambda **kw: (_ for _ in ()).throw(ConnectionError("no route")))
    with pytest.raises(ConnectionError, match="^no route$"):
        connect(RayOptions(address="127.0.0.1:6379"))


def test_without_an_address_a_new_local_cluster_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """address="local": never join whatever `ray start` cluster (or stale record of one) this machine has."""
    ray = pytest.importorskip("ray")
    from ctxsel.eval.ray_engine import RayOptions, connect

    seen: dict[str, Any] = {}
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("CTXSEL_CACHE_DIR", "/tmp/somewhere")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(kw))
    _, started, _ = connect(RayOptions(num_cpus=2))
    assert started and seen["address"] == "local" and seen["num_cpus"] == 2 and seen["include_dashboard"] is False
    assert seen["runtime_env"]["env_vars"]["CTXSEL_CACHE_DIR"] == "/tmp/somewhere"
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    seen.clear()
    connect(RayOptions())
    assert seen["address"] == "127.0.0.1:6379" and "num_cpus" not in seen
