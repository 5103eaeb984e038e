"""``mmr``: maximal marginal relevance. The method decides how many chunks, MMR decides which.

The method's cut fixes k, the number of chunks it kept. This stage picks k chunks again, from the
ranking's candidates: the ``fetch`` best chunks by the scores the method ranked by (default
``max(2k, 20)``), plus any kept chunk outside them. It picks greedily, each time the candidate with
the highest

    lambda * rel(d) - (1 - lambda) * max over picked d' of cos(d, d')

(Carbonell & Goldstein, 1998). ``rel`` is the method's score min-max scaled over the candidates (the
best 1, the worst 0; all 1 when they are equal), so that the two terms share a scale whatever the
scorer's range: a cosine, a reranker's logit or a fused rank. ``cos`` is the cosine of the chunks'
vectors from the scorer's cache (:mod:`ctxsel.stages.vectors`), so nothing is embedded twice. The
first pick is the best-ranked candidate; a tie goes to the better-ranked. ``lambda=1`` gives the
ranking's top k (the method's own selection, for a method that keeps a prefix); smaller values trade
relevance for diversity. The picks keep MMR's order as their rank order and their own scores.

Re-ranking before the cut was measured against a filter after it (drop a kept chunk whose marginal
relevance among the kept falls below a threshold) on the hotpotqa-long training split
(``python -m experiments.mmr_hotpotqa``; the numbers are in ``benchmarks/results/mmr_hotpotqa.md``
and docs/methods/stages.md).

Put ``mmr`` first after the cut: it picks again from the pool, so a chunk it swaps in has not seen the
stages before it (``window``'s neighbours count towards k, ``prune`` has not pruned it).
MMR keeps the method's count, not its tokens: a ``max_tokens`` budget the method cut by is not
checked again, and the picks may hold more or fewer tokens than the chunks they replace.

A method that reads no scores (SAGE, full context) gets the chain's ranking of the pool, scored
once here. The chunks need vectors: a scorer without them (bm25, keywords, hybrid), or scores given
by the caller with no scorer built, is an error that names the scorers that have them.

Sources: Carbonell & Goldstein, "The use of MMR, diversity-based reranking for reordering documents
and producing summaries", SIGIR 1998; LangChain's ``max_marginal_relevance_search`` (``fetch_k=20``,
``lambda_mult=0.5``, raw cosines for both terms); Haystack's ``SentenceTransformersDiversityRanker``
(``strategy="maximum_margin_relevance"``, ``lambda_threshold=0.5``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ctxsel.errors import InputError
from ctxsel.numbers import short_number
from ctxsel.options import option
from ctxsel.query import Query
from ctxsel.stages.base import Stage
from ctxsel.stages.vectors import chunk_vectors
from ctxsel.stages.window import pool_ids
from ctxsel.types import Selection

if TYPE_CHECKING:
    from ctxsel.ranking.chain import Ranking

#: the scorers whose chunks have vectors (the dense scorer, its presets, and the scorers whose dense
#: part scored every chunk)
VECTOR_SCORERS = ("dense", "fast", "accurate", "hybrid", "cascade")


def scaled(scores: np.ndarray) -> np.ndarray:
    """Scores min-max scaled to [0, 1] (the best 1); all 1 when they are equal or there is one."""
    s = np.asarray(scores, dtype=np.float64)
    if len(s) == 0:
        return s
    lo, hi = float(s.min()), float(s.max())
    return np.ones_like(s) if hi <= lo else (s - lo) / (hi - lo)


def mmr_order(rel: np.ndarray, vecs: np.ndarray, lam: float, k: int) -> tuple[list[int], list[float]]:
    """The first ``k`` greedy MMR picks among candidates given best-ranked first: their indices and the
    marginal value each had when picked. ``rel``: relevance per candidate; ``vecs``: unit rows."""
    n = len(rel)
    k = min(k, n)
    picked: list[int] = []
    values: list[float] = []
    if k <= 0:
        return picked, values
    nearest = np.full(n, -np.inf)  # each candidate's highest cosine to a picked one
    free = np.ones(n, dtype=bool)
    for _ in range(k):
        redundancy = np.where(np.isfinite(nearest), nearest, 0.0)
        value = lam * rel - (1.0 - lam) * redundancy
        value = np.where(free, value, -np.inf)
        best = int(np.argmax(value))  # the first of equal values: the better-ranked
        picked.append(best)
        values.append(float(value[best]))
        free[best] = False
        nearest = np.maximum(nearest, vecs @ vecs[best])
    return picked, values


@dataclasses.dataclass(frozen=True)
class Mmr(Stage):
    """Pick the method's k chunks again from the ranking's top candidates by maximal marginal relevance."""

    name: ClassVar[str] = "mmr"  # as registered, so a directly built Mmr names itself
    needs_ranking: ClassVar[bool] = True

    lam: float = option(
        0.7,
        minimum=0.0,
        maximum=1.0,
        key="lambda",
        doc="relevance's weight against redundancy (1: the ranking's top k)",
    )
    fetch: int | None = option(
        None, minimum=1, doc="how many of the ranking's best chunks MMR picks from; none: max(2k, 20)"
    )

    def apply(
        self, selection: Selection, query: Query, scores: np.ndarray | None, *, ranking: Ranking | None = None
    ) -> Selection:
        k = len(selection.ids)
        pool = query.chunks
        if k == 0 or len(pool) == 0:
            selection.meta["mmr"] = {"candidates": 0, "swapped_in": [], "swapped_out": [], "values": []}
            return selection
        if scores is None:
            if ranking is None:
                raise InputError("the mmr stage picks among ranked chunks, and it was given no scores and no scorer")
            scores = ranking.rank(query).scores
            assert scores is not None
        s = np.asarray(scores, dtype=np.float64)
        s = np.where(np.isfinite(s), s, -np.inf)  # NaN ranked last, as nan_policy="last" does
        fetch = self.fetch if self.fetch is not None else max(2 * k, 20)
        order = np.argsort(-s, kind="stable")
        rank = np.empty(len(order), dtype=np.intp)
        rank[order] = np.arange(len(order))
        top = [int(i) for i in order[:fetch]]
        index = {cid: i for i, cid in enumerate(pool_ids(pool))}
        in_top = set(top)
        extra = [i for i in (index[cid] for cid in selection.ids) if i not in in_top]
        cand = top + sorted(extra, key=lambda i: int(rank[i]))
        chunks = [pool[i] for i in cand]
        vecs = chunk_vectors(ranking, chunks)
        if vecs is None:
            raise InputError(_no_vectors())
        finite = np.isfinite(s[cand])
        floor = float(s[cand][finite].min()) if finite.any() else 0.0
        rel = scaled(np.where(finite, s[cand], floor))
        picks, values = mmr_order(rel, vecs, self.lam, k)
        chosen = [cand[j] for j in picks]
        before = set(selection.ids)
        ids = [pool[i].id for i in chosen]
        swapped_in = [cid for cid in ids if cid not in before]
        swapped_out = [cid for cid in selection.ids if cid not in set(ids)]
        given = {c.id: c for c in selection.chunks}  # a kept chunk stays as an earlier stage left it
        selection.ids = ids
        selection.chunks = [given.get(pool[i].id, pool[i]) for i in chosen]
        selection.scores = [float(scores[i]) if np.isfinite(scores[i]) else None for i in chosen]
        if selection.reading is not None:
            selection.reading = None  # a new set: document order (put reorder after mmr)
        selection.meta["mmr"] = {
            "candidates": len(cand),
            "swapped_in": swapped_in,
            "swapped_out": swapped_out,
            "values": [round(v, 6) for v in values],
        }
        lam = short_number(self.lam, 2)
        if swapped_in:
            selection.explanation += (
                f"; mmr[lambda={lam}] chose {k} of the top {len(cand)}: {', '.join(swapped_in)} in place of "
                f"{', '.join(swapped_out)}"
            )
        else:
            selection.explanation += f"; mmr[lambda={lam}] kept the same {k} of the top {len(cand)}, in its order"
        return selection


def _no_vectors() -> str:
    """One message on every surface, whichever scorer (or none) the ranking had."""
    return (
        "the mmr stage compares chunks by their vectors, and the ranking has none: let a scorer with vectors "
        f"({', '.join(VECTOR_SCORERS)}) score the chunks; bm25, keywords and given scores have none"
    )


__all__ = ["VECTOR_SCORERS", "Mmr", "mmr_order", "scaled"]
