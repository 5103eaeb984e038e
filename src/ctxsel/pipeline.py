"""Score if needed, re-rank if asked, then select: the one path every entry point takes.

``ctxsel.select``, the service, the framework integrations, ``ctxsel eval`` and
the CLI all hold a :class:`Pipeline` and call :meth:`Pipeline.select`, so a
rule about when to score, how an expansion re-ranks or what a selection's
``meta`` records is written once. A caller with scores of its own (a
retriever's, a request's, the eval runner's shared per-example scores) passes
them, or a :class:`Scored` from :meth:`Pipeline.score`, and nothing is scored
twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxsel.errors import InputError, InputTypeError
from ctxsel.inputs import check_question
from ctxsel.selectors import get_selector
from ctxsel.selectors.base import Selector
from ctxsel.types import Chunk, ChunkLike, Selection, as_chunks

if TYPE_CHECKING:
    from ctxsel.expansion import Expanded, Expansion
    from ctxsel.expansion.rerank import Rerank, Reranked
    from ctxsel.scoring.base import Scorer


@dataclass
class Scored:
    """One question's scores over one pool: what the selector ranks by.

    ``scores`` is None when nothing needed scoring (a score-free method without
    given scores); ``notes`` are the scorer's remarks for ``Selection.meta``
    (text its window cut); ``expanded`` and ``expansion`` are set when an
    expansion re-ranked (the selection then says what came in, and from where);
    ``reranked`` and ``rerank`` when a second stage re-scored the top chunks.
    """

    scores: np.ndarray | Sequence[float] | None
    notes: dict[str, Any] = field(default_factory=dict)
    expanded: Expanded | None = None
    expansion: Expansion | None = None
    reranked: Reranked | None = None
    rerank: Rerank | None = None


class Pipeline:
    """A selector, and what it needs: a scorer (built on first use), a rerank, an expansion, resources.

    ``scorer`` is a Scorer or a scorer spec (``"dense"``, ``"hybrid[bm25=0.5]"``);
    it is built only when a selection needs scores nobody gave. ``rerank`` is a
    second stage, ``"SCORER@M"`` (:mod:`ctxsel.expansion.rerank`): it re-scores the
    first stage's (or the given scores') top M before any expansion and the cut.
    ``expand`` is an expansion spec or :class:`~ctxsel.expansion.Expansion`. Both off by default.
    """

    def __init__(
        self, selector: Selector, scorer: Scorer | str | None = None, expand: Any = None, rerank: Any = None
    ) -> None:
        self.selector = selector
        if scorer is not None and not isinstance(scorer, str) and not callable(getattr(scorer, "score", None)):
            raise InputTypeError(
                "scorer must be a scorer spec such as 'dense' or 'bm25', or an object with "
                f"score(question, chunks), got {type(scorer).__name__}"
            )
        self._scorer: Any = scorer
        self.expansion: Expansion | None = None
        if expand is not None:
            from ctxsel.expansion import parse_expansion

            self.expansion = parse_expansion(expand)
            if self.expansion is not None and not selector.needs_scores:
                raise InputError(f"expand={expand!r} re-ranks scores, and method {selector.name!r} uses none")
        self.rerank: Rerank | None = None
        self._second: Scorer | None = None
        self._second_of: Any = None  # a RerankingScorer given as the scorer: its second stage
        if rerank is None and scorer is not None and not isinstance(scorer, str):
            from ctxsel.expansion.rerank import RerankingScorer

            if isinstance(scorer, RerankingScorer):  # two stages given as one scorer: run them as stages
                self._scorer, rerank, self._second = scorer.first, scorer.rerank, scorer.second_if_built()
                self._second_of = scorer
        if rerank is not None:
            from ctxsel.expansion.rerank import parse_rerank

            self.rerank = parse_rerank(rerank)
            if self.rerank is not None and not selector.needs_scores:
                raise InputError(f"rerank={rerank!r} re-scores the top chunks, and method {selector.name!r} uses none")

    @classmethod
    def from_spec(
        cls,
        method: str | Selector = "adaptive-k",
        *,
        scorer: Scorer | str | None = None,
        expand: Any = None,
        rerank: Any = None,
        llm: Any = None,
        **options: Any,
    ) -> Pipeline:
        """A pipeline from a method spec and the selector's keyword options."""
        return cls(get_selector(method, llm=llm, **options), scorer, expand, rerank)

    @property
    def scorer(self) -> Scorer:
        """The scorer, built from its spec on first use (the default is the bundled dense model)."""
        if self._scorer is None or isinstance(self._scorer, str):
            from ctxsel.scoring import get_scorer

            self._scorer = get_scorer(self._scorer or "dense")
        return self._scorer  # type: ignore[no-any-return]

    @property
    def second(self) -> Scorer:
        """The rerank stage's scorer, built from its spec on first use."""
        if self._second is None:
            from ctxsel.expansion.rerank import build_second

            assert self.rerank is not None, "no rerank stage"
            of = self._second_of
            self._second = of.second if of is not None else build_second(self.rerank)
        return self._second

    def needs_scorer(self, scores: object, chunks: Sequence[Chunk]) -> bool:
        """Whether selecting over ``chunks`` with ``scores`` will call the scorer."""
        if not chunks:
            return False
        hop = self.expansion is not None and self.expansion.hop is not None
        return (scores is None and self.selector.needs_scores) or hop

    def score(self, question: str, chunks: Sequence[Chunk], scores: Any = None) -> Scored:
        """The scores the selector will rank by: ``scores`` as given, or the scorer's; then the expansion's."""
        notes: dict[str, Any] = {}
        if scores is None and self.selector.needs_scores and chunks:
            from ctxsel.scoring.base import score_with_notes

            scores, notes = score_with_notes(self.scorer, question, chunks)
        elif scores is None and not chunks:
            scores = []
        reranked = None
        if self.rerank is not None and chunks and scores is not None:
            from ctxsel.expansion.rerank import rerank

            reranked = rerank(question, chunks, scores, self.second, self.rerank.m)
            scores = reranked.scores
        if self.expansion is None or not chunks:
            return Scored(scores, notes, reranked=reranked, rerank=self.rerank if reranked else None)
        from ctxsel.expansion import expand

        scorer = self.scorer if self.expansion.hop is not None else None
        expanded = expand(question, chunks, scores, scorer, self.expansion)
        return Scored(expanded.scores, notes, expanded, self.expansion, reranked, self.rerank if reranked else None)

    def select(
        self,
        question: str,
        chunks: Sequence[ChunkLike],
        scores: Any = None,
        *,
        choices: Sequence[str] | None = None,
        gold_ids: Sequence[str] | None = None,
        scored: Scored | None = None,
    ) -> Selection:
        """Select for ``question``: score unless ``scores`` (or a precomputed ``scored``) are given.

        ``choices`` are a multiple-choice question's answer options (SAGE reads
        them); ``gold_ids`` go to reference methods that take them (the oracle).
        """
        check_question(question)
        chunk_list = as_chunks(chunks)
        if scored is None:
            scored = self.score(question, chunk_list, scores)
        extra: dict[str, Any] = {"gold_ids": list(gold_ids or [])} if self.selector.takes_gold_ids else {}
        sel = self.selector.select(question, chunk_list, scored.scores, choices=list(choices or []) or None, **extra)
        sel.meta.update(scored.notes)
        if scored.reranked is not None and scored.rerank is not None:
            ids = [c.id for c in sel.chunks]
            sel.meta["rerank"] = info = scored.reranked.meta(scored.rerank, chunk_list, ids)
            sel.explanation += f"; re-ranked: {info['stage']} re-scored the first stage's top {info['rescored']}"
            if info["moved_up"]:
                sel.explanation += f", moving up {', '.join(map(str, info['moved_up']))}"
        if scored.expanded is not None and scored.expansion is not None:
            from ctxsel.expansion import annotate

            annotate(sel, chunk_list, scored.expanded, scored.expansion)
        return sel


__all__ = ["Pipeline", "Scored"]
