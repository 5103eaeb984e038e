"""The Scorer protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ctxsel.errors import InputError
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


def cosine_scores(query_embedding: Sequence[float], embeddings: Sequence[Sequence[float]]) -> np.ndarray:
    """Cosine similarity of each of ``embeddings`` (one row per chunk) to ``query_embedding``, both
    L2-normalised; a zero chunk vector scores 0. Ragged rows, a dimension mismatch, NaN or a zero
    query vector are errors that say which."""
    q = np.asarray(query_embedding, dtype=np.float32)
    try:
        emb = np.asarray(embeddings, dtype=np.float32)
    except ValueError:
        raise InputError("every embedding must have the same dimension") from None
    n = len(embeddings)
    if n and (emb.ndim != 2 or emb.shape[1] != q.shape[0]):
        raise InputError(
            f"embeddings have dimension {emb.shape[-1] if emb.ndim == 2 else '?'} but query_embedding has {q.shape[0]}"
        )
    if not n:
        return np.zeros(0)
    if not (np.isfinite(emb).all() and np.isfinite(q).all()):
        raise InputError("embeddings contain NaN or infinite values")
    qn = float(np.linalg.norm(q))
    if qn == 0.0:
        raise InputError("query_embedding is all zeros: cosine similarity is undefined")
    norms = np.linalg.norm(emb, axis=1)
    norms[norms == 0] = 1.0  # a zero chunk vector scores 0
    return (emb @ (q / qn)) / norms  # type: ignore[no-any-return]
