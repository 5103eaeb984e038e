"""``window``: add each kept chunk's neighbours in document order.

A cut picks chunks by their own similarity, so a short chunk that names the topic (a heading, a
sentence that ends mid-thought) can be kept while the one after it, which holds the answer, is
not. This stage adds, for each kept chunk, the ``n`` chunks before and after it in the document
(same ``doc_id``, by ``position``; the pool's order for plain texts), as LlamaIndex's
sentence-window retrieval and ``SentenceEmbeddingOptimizer``'s context window do. Overlapping
windows merge: a chunk is added once.

Added chunks rank after every kept one, nearest first (distance 1 before distance 2), then in the
kept chunk's rank order, so that ``max_tokens`` (a budget for the whole selection) drops the
farthest neighbours of the weakest chunks first; a neighbour that would pass the budget is
skipped, and the explanation says how many were. The kept chunks are never dropped, even when
they alone pass the budget. An added chunk's score is the method's score for it (None for a
score-free method). Put ``window`` before ``reorder``: the neighbours belong between the kept
chunks, so this stage reads in document order and drops a reading order set before it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

from ctxsel.options import option
from ctxsel.query import Query
from ctxsel.stages.base import Stage
from ctxsel.types import Chunk, Selection, TextChunks

if TYPE_CHECKING:
    from ctxsel.ranking.chain import Ranking


def document_neighbours(pool: object, index: dict[str, int], ids: list[str], n: int) -> list[list[int]]:
    """Per distance d = 1..n, the pool indices d steps before and after each of ``ids`` in document
    order (in the order of ``ids``; a neighbour may repeat across ids, the caller merges)."""
    if type(pool) is TextChunks:  # one document, positions in pool order
        size = len(pool)

        def step(i: int, d: int) -> list[int]:
            return [j for j in (i - d, i + d) if 0 <= j < size]

    else:
        chunks: list[Chunk] = list(pool)  # type: ignore[call-overload]
        by_doc: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(chunks):
            by_doc[c.doc_id].append(i)
        place: dict[int, tuple[list[int], int]] = {}
        for members in by_doc.values():
            members.sort(key=lambda i: chunks[i].position)
            for rank, i in enumerate(members):
                place[i] = (members, rank)

        def step(i: int, d: int) -> list[int]:
            members, rank = place[i]
            return [members[r] for r in (rank - d, rank + d) if 0 <= r < len(members)]

    return [[j for cid in ids for j in step(index[cid], d)] for d in range(1, n + 1)]


@dataclasses.dataclass(frozen=True)
class Window(Stage):
    """Add each kept chunk's ``n`` neighbours on either side in document order, within ``max_tokens``."""

    n: int = option(1, minimum=1, maximum=100, doc="neighbours added on each side of every kept chunk")
    max_tokens: int | None = option(None, minimum=0, doc="a token budget for the selection with its neighbours")

    def apply(
        self, selection: Selection, query: Query, scores: np.ndarray | None, *, ranking: Ranking | None = None
    ) -> Selection:
        del ranking
        if not selection.ids:
            return selection
        pool = query.chunks
        index = {cid: i for i, cid in enumerate(pool_ids(pool))}
        seen = set(selection.ids)
        budget = None if self.max_tokens is None else self.max_tokens - selection.n_tokens
        added: list[str] = []
        skipped = 0
        for ring in document_neighbours(pool, index, selection.ids, self.n):
            for j in ring:
                c = pool[j]
                if c.id in seen:
                    continue
                seen.add(c.id)
                if budget is not None and c.n_tokens > budget:
                    skipped += 1
                    continue
                added.append(c.id)
                selection.ids.append(c.id)
                selection.chunks.append(c)
                selection.scores.append(None if scores is None else float(scores[j]))
                if budget is not None:
                    budget -= c.n_tokens
        if selection.reading is not None:
            selection.reading = None  # the neighbours sit between the kept chunks: document order
        selection.meta["window"] = {"added": added, "skipped_for_budget": skipped}
        if added or skipped:
            what = f"; window[n={self.n}] added {len(added)} neighbour(s)"
            if skipped:
                what += f", skipped {skipped} past max_tokens={self.max_tokens}"
            selection.explanation += what
        return selection


def pool_ids(pool: object) -> list[str]:
    """The ids of a pool's chunks in order, without building a columnar pool's Chunks."""
    if type(pool) is TextChunks:
        return [str(i) for i in range(len(pool))] if pool.ids is None else list(pool.ids)
    return [c.id for c in pool]  # type: ignore[attr-defined]


__all__ = ["Window", "document_neighbours", "pool_ids"]
