"""Scorers: ``score(question, chunks) -> float32 array``, one per chunk.

Heavy backends (sentence-transformers, bm25s) load only when a scorer of
that kind is built.
"""

from __future__ import annotations

from typing import Any

from ctxsel.scoring.base import Scorer


def get_scorer(name: str = "dense", **options: Any) -> Scorer:
    """``dense`` (sentence-transformers), ``bm25`` (bm25s) or ``keywords``."""
    if name == "dense":
        from ctxsel.scoring.dense import DenseScorer

        return DenseScorer(**options)
    if name == "bm25":
        from ctxsel.scoring.bm25 import BM25Scorer

        return BM25Scorer(**options)
    if name == "keywords":
        from ctxsel.scoring.keywords import KeywordScorer

        return KeywordScorer(**options)
    raise ValueError(f"unknown scorer {name!r}; choose dense, bm25 or keywords")


__all__ = ["Scorer", "get_scorer"]
