"""Unit vectors for chunks from the chain's scorer, read from its cache: a stage never embeds twice.

The dense scorer keeps one row per text it scored, keyed by its document prefix, so asking it for
the kept chunks' vectors after it scored them is a cache hit. A scorer that fuses others names the
one whose vectors stand for its chunks (``vector_source``: a hybrid's dense part, a cascade's fast
part, which scored every chunk). A scorer without vectors (bm25, keywords), a scorer not built (the
caller gave scores) or one without a cache gives None: the stage that asked says what it does then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxsel.types import Chunk

if TYPE_CHECKING:
    from ctxsel.ranking.chain import Ranking


def embedding_scorer(scorer: Any) -> Any:
    """The scorer that embeds for ``scorer`` into a cache (itself, or the one its ``vector_source``
    chain ends at), or None when none does."""
    while scorer is not None and getattr(scorer, "embed", None) is None:
        scorer = getattr(scorer, "vector_source", None)
    if scorer is None or not callable(getattr(scorer, "embed", None)) or getattr(scorer, "cache", None) is None:
        return None
    return scorer


def chunk_vectors(ranking: Ranking | None, chunks: Sequence[Chunk]) -> np.ndarray | None:
    """One unit row per chunk from the scorer's cache, or None when the scorer has none to give."""
    scorer = embedding_scorer(ranking.built_scorer if ranking is not None else None)
    if scorer is None:
        return None
    embed = scorer.embed
    if not chunks:
        return np.zeros((0, 0), dtype=np.float32)
    vecs = np.asarray(embed([c.text for c in chunks], getattr(scorer, "document_prefix", "")), dtype=np.float64)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs / np.where(norms > 0, norms, 1.0)


__all__ = ["chunk_vectors", "embedding_scorer"]
