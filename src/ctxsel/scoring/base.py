"""The Scorer protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from ctxsel.types import Chunk


@runtime_checkable
class Scorer(Protocol):
    """Relevance of each chunk to a question; higher is more relevant."""

    name: str

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray: ...
