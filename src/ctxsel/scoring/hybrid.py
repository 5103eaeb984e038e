"""Dense + BM25 in one score: the two rankings miss different chunks.

Dense similarity finds paraphrases; BM25 finds the rare names a question
spells out. ``HybridScorer`` fuses them per question, over the chunks given:

- ``fusion="minmax"`` (default): each scorer's scores are min-max normalised
  to [0, 1] over the pool, then averaged with the weights:
  ``s = (w_dense * mm(dense) + w_bm25 * mm(bm25)) / (w_dense + w_bm25)``.
  The fused curve stays in [0, 1] and a gap in it is the weighted sum of the
  gaps of the two normalised curves, so Adaptive-k's "largest gap" still
  means "the place where both signals drop", and thresholds are comparable
  across questions. A scorer whose scores are all equal (BM25 on a question
  made of stopwords) contributes 0 everywhere rather than dividing by zero.
- ``fusion="rrf"``: reciprocal rank fusion, ``s = sum w / (rrf_k + rank)``
  with 1-based ranks (ties by position). It ignores score magnitudes, so its
  curve decays smoothly like 1/rank and its gaps mostly mark where the two
  rankings agree; prefer a fixed cut (top-k, top-n-tokens) with it.

The dense part is a normal :class:`~ctxsel.scoring.dense.DenseScorer`, so
its embedding cache is shared with ``--scorer dense``; the BM25 index is
kept for the next question on the same pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxsel.errors import InputError
from ctxsel.scoring.base import Scorer
from ctxsel.types import Chunk

FUSIONS = ("minmax", "rrf")


def minmax(scores: np.ndarray) -> np.ndarray:
    """Scores mapped to [0, 1] over the pool (all zeros when they are all equal or there are none)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return s
    finite = np.isfinite(s)
    if not finite.any():
        return np.zeros_like(s)
    lo, hi = float(s[finite].min()), float(s[finite].max())
    if hi <= lo:
        return np.zeros_like(s)
    return np.where(finite, (s - lo) / (hi - lo), 0.0)


def reciprocal_ranks(scores: np.ndarray, k: float) -> np.ndarray:
    """``1 / (k + rank)``, rank 1 for the best score, ties broken by position."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    ranks = np.empty(len(order), dtype=np.float64)
    ranks[order] = np.arange(1, len(order) + 1)
    return 1.0 / (k + ranks)


class HybridScorer:
    """Weighted fusion of a dense and a BM25 scorer (see the module docstring).

    The default weights (dense 1, BM25 0.25, min-max) are the best of a small grid on
    hotpotqa-long's training split (``experiments/recall_hotpotqa.py``)."""

    name = "hybrid"

    def __init__(
        self,
        dense: float = 1.0,
        bm25: float = 0.25,
        *,
        fusion: str = "minmax",
        rrf_k: float = 60.0,
        dense_scorer: Scorer | None = None,
        bm25_scorer: Scorer | None = None,
        **dense_options: Any,
    ) -> None:
        if fusion not in FUSIONS:
            raise InputError(f"fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
        for label, w in (("dense", dense), ("bm25", bm25)):
            if not isinstance(w, (int, float)) or isinstance(w, bool) or not np.isfinite(w) or w < 0:
                raise InputError(f"hybrid weight {label} must be a number >= 0, got {w!r}")
        if dense + bm25 <= 0:
            raise InputError("hybrid weights dense and bm25 are both 0: give at least one a positive weight")
        if rrf_k <= 0:
            raise InputError(f"rrf_k must be > 0, got {rrf_k!r}")
        self.w_dense, self.w_bm25 = float(dense), float(bm25)
        self.fusion, self.rrf_k = fusion, float(rrf_k)
        if dense_scorer is None and self.w_dense > 0:
            from ctxsel.scoring.dense import DenseScorer

            dense_scorer = DenseScorer(**dense_options)
        if bm25_scorer is None and self.w_bm25 > 0:
            from ctxsel.scoring.bm25 import BM25Scorer

            bm25_scorer = BM25Scorer()
        self.dense_scorer, self.bm25_scorer = dense_scorer, bm25_scorer
        dense_id = getattr(dense_scorer, "model_id", "") if dense_scorer is not None else ""
        #: what result files record: the dense model and every setting that changes the scores
        self.model_id = f"{dense_id}|dense={self.w_dense:g},bm25={self.w_bm25:g},fusion={fusion}" + (
            f",rrf_k={self.rrf_k:g}" if fusion == "rrf" else ""
        )

    @property
    def vector_source(self) -> Scorer | None:
        """The scorer whose vectors stand for the chunks (:mod:`ctxsel.stages.vectors`): the dense part."""
        return self.dense_scorer

    def parts(self, question: str, chunks: Sequence[Chunk]) -> dict[str, np.ndarray]:
        """The raw score of each part with a positive weight (``dense``, ``bm25``)."""
        out: dict[str, np.ndarray] = {}
        if self.w_dense > 0 and self.dense_scorer is not None:
            out["dense"] = np.asarray(self.dense_scorer.score(question, chunks), dtype=np.float64)
        if self.w_bm25 > 0 and self.bm25_scorer is not None:
            out["bm25"] = np.asarray(self.bm25_scorer.score(question, chunks), dtype=np.float64)
        return out

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        if not chunks:
            return np.zeros(0, dtype=np.float32)
        weights = {"dense": self.w_dense, "bm25": self.w_bm25}
        fused = np.zeros(len(chunks), dtype=np.float64)
        total = 0.0
        for part, raw in self.parts(question, chunks).items():
            w = weights[part]
            fused += w * (minmax(raw) if self.fusion == "minmax" else reciprocal_ranks(raw, self.rrf_k))
            total += w
        return (fused / total).astype(np.float32)
