"""The ranking chain: scorer, then an optional rerank, then an optional expansion.

One object that every surface (the Python API, the CLI, the service, ``ctxsel eval``
and the framework components) ranks with, so the rules of when to score, how a
second stage combines with the first and how an expansion re-ranks are written
here once. A chain is not a scorer: :meth:`Ranking.rank` takes a checked
:class:`~ctxsel.query.Query` and returns a :class:`Scored`, which says what each
link did, and :meth:`Ranking.annotate` writes that into the selection made on it.

    chain = Ranking("dense", rerank="dense[model=nomic-v1.5]@50", expand="hop")
    scored = chain.rank(query)          # scores, plus what rerank and expansion did
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ctxsel.errors import InputError, InputTypeError
from ctxsel.query import Query
from ctxsel.ranking.expansion import Expansion, parse_expansion
from ctxsel.ranking.rerank import Rerank, Reranked, parse_rerank
from ctxsel.types import Selection

if TYPE_CHECKING:
    from ctxsel.ranking.expand import Expanded
    from ctxsel.scoring.base import Scorer


@dataclass
class Scored:
    """One query's scores from one chain: what a method ranks by.

    ``scores`` is None when nothing needed scoring (a score-free method without
    given scores); ``notes`` are the scorer's remarks for ``Selection.meta``
    (text its window cut); ``reranked`` is set when a second stage re-scored the top
    chunks, ``expanded`` when an expansion re-ranked.
    """

    scores: np.ndarray | None
    notes: dict[str, Any] = field(default_factory=dict)
    reranked: Reranked | None = None
    expanded: Expanded | None = None


class Ranking:
    """A scorer (built on first use), an optional rerank and an optional expansion.

    ``scorer`` is a Scorer (an object with ``score(question, chunks)``) or a scorer spec
    (``"dense"``, ``"hybrid[bm25=0.5]"``; None: the default, :func:`ctxsel.scoring.default_scorer`); it is built only
    when a query needs scores nobody gave. ``rerank`` is ``"SCORER@M"`` or a
    :class:`~ctxsel.ranking.rerank.Rerank` (the second scorer re-scores the first ranking's top
    M; ``second`` is that scorer when the caller has built it, to share one model between
    chains); ``expand`` an expansion spec (``"hop"``, ``"links"``, ``"hop+links[m=3]"``) or an
    :class:`~ctxsel.ranking.expansion.Expansion`. Both off by default.
    """

    def __init__(
        self,
        scorer: Scorer | str | None = None,
        *,
        rerank: Rerank | str | None = None,
        expand: Expansion | str | None = None,
        second: Scorer | None = None,
    ) -> None:
        if scorer is not None and not isinstance(scorer, str) and not callable(getattr(scorer, "score", None)):
            raise InputTypeError(
                "scorer must be a scorer spec such as 'dense' or 'bm25', or an object with "
                f"score(question, chunks), got {type(scorer).__name__}"
            )
        self._scorer: Any = scorer
        self.rerank = parse_rerank(rerank)
        self.expansion = parse_expansion(expand)
        self._second = second

    @property
    def scorer(self) -> Scorer:
        """The scorer, built from its spec on first use (None: the default scorer)."""
        if self._scorer is None or isinstance(self._scorer, str):
            from ctxsel.scoring import get_scorer

            self._scorer = get_scorer(self._scorer)
        return self._scorer  # type: ignore[no-any-return]

    @property
    def built_scorer(self) -> Scorer | None:
        """The scorer if it is built (it scored this chain's queries), else None: never builds one."""
        return None if self._scorer is None or isinstance(self._scorer, str) else self._scorer

    @property
    def second(self) -> Scorer:
        """The rerank's scorer, built from its spec on first use unless one was given."""
        if self._second is None:
            from ctxsel.ranking.rerank import build_second

            assert self.rerank is not None, "no rerank in this chain"
            self._second = build_second(self.rerank)
        return self._second

    def check_method(self, name: str, needs_scores: bool) -> None:
        """A rerank or an expansion re-ranks scores: a method that reads none cannot use them."""
        if needs_scores:
            return
        if self.rerank is not None:
            raise InputError(f"rerank={self.rerank.spec()!r} re-scores the top chunks, and method {name!r} uses none")
        if self.expansion is not None:
            raise InputError(f"expand={self.expansion.spec()!r} re-ranks scores, and method {name!r} uses none")

    def rank(self, query: Query, needs_scores: bool = True) -> Scored:
        """The scores a method ranks ``query`` by: the query's own or the scorer's, then the rerank's,
        then the expansion's. ``needs_scores`` False (a score-free method): nothing is scored."""
        scores, chunks = query.scores, query.chunks
        notes: dict[str, Any] = {}
        if not chunks:
            return Scored(np.zeros(0, dtype=np.float64))
        if scores is None and needs_scores:
            from ctxsel.scoring.base import score_with_notes

            raw, notes = score_with_notes(self.scorer, query.question, chunks)
            scores = _scorer_output(raw, len(chunks), self.scorer)
        if scores is None:
            return Scored(None)
        reranked = None
        if self.rerank is not None:
            from ctxsel.ranking.rerank import rerank

            reranked = rerank(query.question, chunks, scores, self.second, self.rerank.m)
            scores = reranked.scores
        if self.expansion is None:
            return Scored(scores, notes, reranked)
        from ctxsel.ranking.expand import expand

        scorer = self.scorer if self.expansion.hop is not None else None
        expanded = expand(query.question, chunks, scores, scorer, self.expansion)
        return Scored(expanded.scores, notes, reranked, expanded)

    def annotate(self, selection: Selection, query: Query, scored: Scored) -> Selection:
        """Say in ``selection`` what the chain did: the scorer's notes (a cascade's head: ``meta["cascade"]``),
        which chunks the rerank moved up (``meta["rerank"]``) and which came in by expansion
        (``meta["expansion"]``)."""
        notes = dict(scored.notes)
        cascade = notes.pop("cascade", None)
        selection.meta.update(notes)
        if isinstance(cascade, dict) and "head_end" in cascade:  # the cascade scorer: where its head ended
            from ctxsel.ranking.cascade import explain

            selection.meta["cascade"], clause = explain([c.id for c in selection.chunks], cascade)
            selection.explanation += clause
        if scored.reranked is not None and self.rerank is not None:
            ids = [c.id for c in selection.chunks]
            selection.meta["rerank"] = info = scored.reranked.meta(self.rerank, query.chunks, ids)
            selection.explanation += f"; re-ranked: {info['stage']} re-scored the first stage's top {info['rescored']}"
            if info["moved_up"]:
                selection.explanation += f", moving up {', '.join(map(str, info['moved_up']))}"
        if scored.expanded is not None and self.expansion is not None:
            from ctxsel.ranking.explain import annotate

            annotate(selection, query.chunks, scored.expanded, self.expansion)
        return selection

    @property
    def name(self) -> str:
        """The chain as a run's config names it: ``SCORER``, ``>RERANK`` and ``+EXPANSION`` after it
        (builds the scorer)."""
        out = self.scorer.name
        if self.rerank is not None:
            out += f">{self.rerank.spec()}"
        if self.expansion is not None:
            out += f"+{self.expansion.spec()}"
        return out

    @property
    def model_id(self) -> str:
        """What identifies the chain's scores: the scorer's model, then each link's spec (and the
        rerank's model, once built)."""
        sc = self.scorer
        out = getattr(sc, "model_id", "")
        if self.rerank is not None:
            second = getattr(self._second, "model_id", "") if self._second is not None else ""
            out = (out or sc.name) + f"|rerank={self.rerank.spec()}" + (f"({second})" if second else "")
        if self.expansion is not None:
            out += f"|expand={self.expansion.spec()}"
        return out.lstrip("|")

    def __repr__(self) -> str:
        links = [x.spec() for x in (self.rerank, self.expansion) if x is not None]
        return f"Ranking({self._scorer!r}{''.join(', ' + x for x in links)})"


def scores_id(scorer: Scorer | Ranking) -> str:
    """What names a run's scores (its config, a trained policy's card): the scorer's name and model,
    and a chain's links (builds the scorer)."""
    return f"{scorer.name}:{getattr(scorer, 'model_id', '')}".rstrip(":")


T = TypeVar("T")

#: a vectors id's route tag (:func:`ctxsel.scoring.dense.vector_id`): MiniLM's int8 ONNX, or a GGUF
#: embedder's llama.cpp, ONNX fp32 and int8 routes
_ROUTE = re.compile(r"\|(?:llama-[A-Za-z0-9_]+|onnx(?:-int8)?-v\d+(?:-[A-Za-z0-9.]+)*)")


def same_scores(scores_id: str) -> str:
    """``scores_id`` with its backends' route tags taken out: what a trained or calibrated rule
    compares, since one model's routes move a cosine by quantisation error only (0.99 and above
    against the reference vectors: ``benchmarks/results/nomic_routes.md``), so a rule fitted on one
    route holds on a CPU that runs another."""
    return _ROUTE.sub("", scores_id)


def find_same(by_id: Mapping[str, T], scores_id: str) -> T | None:
    """The value of ``by_id`` whose key names the same scores as ``scores_id`` (:func:`same_scores`)."""
    want = same_scores(scores_id)
    return next((v for k, v in by_id.items() if same_scores(k) == want), None)


def as_ranking(ranking: Ranking | Scorer | str | None) -> Ranking:
    """A chain from a chain, a scorer or a scorer spec (a scorer alone is a chain of one)."""
    return ranking if isinstance(ranking, Ranking) else Ranking(ranking)


def _scorer_output(raw: Any, n: int, scorer: Any) -> np.ndarray:
    """A scorer's scores as a float64 array, one per chunk: a scorer that gives another count is a bug
    in it, named here rather than deep inside a cut."""
    arr = np.asarray(raw, dtype=np.float64).reshape(-1)
    if arr.shape[0] != n:
        name = getattr(scorer, "name", type(scorer).__name__)
        raise InputError(f"scorer {name!r} returned {arr.shape[0]} scores for {n} chunks; it must return one per chunk")
    return arr


__all__ = ["Ranking", "Scored", "as_ranking"]
