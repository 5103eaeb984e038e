"""``dedup``: drop a kept chunk that repeats a higher-ranked kept one.

A chunk is dropped when its text equals a higher-ranked kept chunk's, or when its vector's cosine
to a higher-ranked kept chunk is at least ``threshold``. The higher-ranked chunk stays (LangChain's
``EmbeddingsRedundantFilter`` drops the earlier of a pair; this stage keeps the better-ranked
one). Vectors come from the scorer's cache (:mod:`ctxsel.stages.vectors`); when the scorer has
none (bm25, given scores), only exact duplicates are removed, and ``meta["dedup"]`` says so.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ctxsel.options import option
from ctxsel.query import Query
from ctxsel.stages.base import Stage
from ctxsel.stages.vectors import chunk_vectors
from ctxsel.types import Selection

if TYPE_CHECKING:
    from ctxsel.ranking.chain import Ranking


@dataclasses.dataclass(frozen=True)
class Dedup(Stage):
    """Drop kept chunks that repeat a higher-ranked kept chunk (same text, or cosine >= threshold)."""

    needs_ranking: ClassVar[bool] = True
    threshold: float = option(0.95, minimum=-1.0, maximum=1.0, doc="cosine at or above which a chunk is a repeat")

    def apply(
        self, selection: Selection, query: Query, scores: np.ndarray | None, *, ranking: Ranking | None = None
    ) -> Selection:
        del query, scores
        vecs = chunk_vectors(ranking, selection.chunks)
        keep: list[int] = []
        seen: dict[str, str] = {}
        dropped: dict[str, str] = {}
        for i, c in enumerate(selection.chunks):
            twin = seen.get(c.text)
            if twin is None and vecs is not None and keep:
                sims = vecs[keep] @ vecs[i]
                j = int(np.argmax(sims))
                if sims[j] >= self.threshold:
                    twin = selection.chunks[keep[j]].id
            if twin is not None:
                dropped[c.id] = twin
                continue
            keep.append(i)
            seen.setdefault(c.text, c.id)
        selection.ids = [selection.ids[i] for i in keep]
        selection.scores = [selection.scores[i] for i in keep]
        selection.chunks = [selection.chunks[i] for i in keep]
        if selection.reading is not None:
            selection.reading = [i for i in selection.reading if i not in dropped]
        selection.meta["dedup"] = {"dropped": dropped, "vectors": vecs is not None}
        if dropped:
            selection.explanation += f"; dedup dropped {', '.join(dropped)} (repeats of higher-ranked chunks)"
        return selection


__all__ = ["Dedup"]
