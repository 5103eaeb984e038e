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
    from ctxsel.scoring.base import Scorer


@dataclass
class Scored:
    """One question's scores over one pool: what the selector ranks by.

    ``scores`` is None when nothing needed scoring (a score-free method without
    given scores); ``notes`` are the scorer's remarks for ``Selection.meta``
    (text its window cut); ``expanded`` and ``expansion`` are set when an
    expansion re-ranked (the selection then says what came in, and from where).
    """

    scores: np.ndarray | Sequence[float] | None
    notes: dict[str, Any] = field(default_factory=dict)
    expanded: Expanded | None = None
    expansion: Expansion | None = None


class Pipeline:
    """A selector, and what it needs: a scorer (built on first use), an expansion, resources.

    ``scorer`` is a Scorer or a scorer spec (``"dense"``, ``"hybrid[bm25=0.5]"``);
    it is built only when a selection needs scores nobody gave. ``expand`` is an
    expansion spec or :class:`~ctxsel.expansion.Expansion` (off by default).
    """

    def __init__(self, selector: Selector, scorer: Scorer | str | None = None, expand: Any = None) -> None:
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

    @classmethod
    def from_spec(
        cls,
        method: str | Selector = "adaptive-k",
        *,
        scorer: Scorer | str | None = None,
        expand: Any = None,
        llm: Any = None,
        **options: Any,
    ) -> Pipeline:
        """A pipeline from a method spec and the selector's keyword options."""
        return cls(get_selector(method, llm=llm, **options), scorer, expand)

    @property
    def scorer(self) -> Scorer:
        """The scorer, built from its spec on first use (the default is the bundled dense model)."""
        if self._scorer is None or isinstance(self._scorer, str):
            from ctxsel.scoring import get_scorer

            self._scorer = get_scorer(self._scorer or "dense")
        return self._scorer  # type: ignore[no-any-return]

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
        if self.expansion is None or not chunks:
            return Scored(scores, notes)
        from ctxsel.expansion import expand

        scorer = self.scorer if self.expansion.hop is not None else None
        expanded = expand(question, chunks, scores, scorer, self.expansion)
        return Scored(expanded.scores, notes, expanded, self.expansion)

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
        if scored.expanded is not None and scored.expansion is not None:
            from ctxsel.expansion import annotate

            annotate(sel, chunk_list, scored.expanded, scored.expansion)
        return sel


__all__ = ["Pipeline", "Scored"]
