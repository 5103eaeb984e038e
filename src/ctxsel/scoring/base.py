"""The Scorer protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ctxsel.types import Chunk


@runtime_checkable
class Scorer(Protocol):
    """Relevance of each chunk to a question; higher is more relevant."""

    name: str

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray: ...


def score_with_notes(scorer: Scorer, question: str, chunks: Sequence[Chunk]) -> tuple[np.ndarray, dict[str, Any]]:
    """Scores, plus what the scorer had to give up (``{"truncated": ...}`` from the dense scorer) for
    ``Selection.meta``; a scorer without ``score_detailed`` reports nothing."""
    detailed = getattr(scorer, "score_detailed", None)
    if detailed is None:
        return np.asarray(scorer.score(question, chunks)), {}
    scores, notes = detailed(question, chunks)
    return np.asarray(scores), dict(notes)
