"""The example and the fake dense model that the fault and home-folder tests share."""

from __future__ import annotations

from typing import Any

import numpy as np

from ctxsel.types import Chunk
from tests.support.paths import EXAMPLE_MD

QUESTION = "How heavy is the meteorite?"
EXPECTED_TOP2 = ["15", "6"]  # top-k@2 of example.md for QUESTION (the meteorite paragraph first)
CHUNKS = [Chunk(id=str(i), text=f"passage {i} about the museum and meteorite number {i}") for i in range(40)]


class CountingBackend:
    """Deterministic unit vectors per text; counts what it was asked to embed."""

    name = "torch"

    def __init__(self) -> None:
        self.texts: list[str] = []

    def encode(self, texts: list[str], batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        self.texts.extend(texts)
        rows = [np.random.default_rng(sum(t.encode())).normal(size=8) for t in texts]
        return np.stack([r / np.linalg.norm(r) for r in rows]).astype(np.float32)


def fake_dense(cache: Any) -> Any:
    from ctxsel.scoring.dense import DenseScorer

    sc = DenseScorer(model="fake-model", backend="torch", cache=cache)
    sc._model = CountingBackend()
    return sc


def example_chunks() -> list[Chunk]:
    from ctxsel.chunking import chunk_text

    return chunk_text(EXAMPLE_MD.read_text(encoding="utf-8"), "paragraphs")
