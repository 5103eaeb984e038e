"""Query -> ranking chain -> the method's cut -> stages: the one path every entry point takes.

``ctxsel.select``, the service, the framework integrations, ``ctxsel eval`` and
the CLI all hold a :class:`Pipeline`: each builds one checked
:class:`~ctxsel.query.Query`, the :class:`~ctxsel.ranking.Ranking` chain scores it
(unless scores were given and nothing re-ranks them), the method cuts, and the
stages (:mod:`ctxsel.stages`) run after the cut in order. A caller with scores of
its own (a retriever's, a request's) puts them in the Query; a caller that ranks
once for several methods (the eval runner) passes the chain's :class:`Scored`,
and nothing is scored twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ctxsel.errors import InputError
from ctxsel.query import Query
from ctxsel.ranking.chain import Ranking, Scored, as_ranking, scores_id
from ctxsel.selectors import get_selector
from ctxsel.selectors.base import Selector
from ctxsel.stages import Stage, parse_stages
from ctxsel.types import ChunkLike, Selection, SelectionView

if TYPE_CHECKING:
    from ctxsel.scoring.base import Scorer


class Pipeline:
    """A method, the ranking chain it reads (built on first use) and the stages after its cut.

    ``ranking`` is a :class:`~ctxsel.ranking.Ranking`, a Scorer or a scorer spec
    (``"dense"``, ``"hybrid[bm25=0.5]"``; None: the default scorer, built only
    when a selection needs scores nobody gave). ``stages`` are stage specs or
    :class:`~ctxsel.stages.Stage` objects, run in order after the cut.
    """

    def __init__(
        self,
        selector: Selector,
        ranking: Ranking | Scorer | str | None = None,
        *,
        stages: str | Stage | Sequence[str | Stage] | None = None,
    ) -> None:
        self.selector = selector
        self.ranking = as_ranking(ranking)
        self.ranking.check_method(selector.name, selector.needs_scores)
        self.stages = parse_stages(stages)

    @classmethod
    def from_spec(
        cls,
        method: str | Selector = "adaptive-k",
        *,
        scorer: Ranking | Scorer | str | None = None,
        expand: Any = None,
        rerank: Any = None,
        stages: str | Stage | Sequence[str | Stage] | None = None,
        llm: Any = None,
        **options: Any,
    ) -> Pipeline:
        """A pipeline from a method spec, the chain's parts and the selector's keyword options."""
        selector = get_selector(method, llm=llm, **options)
        if isinstance(scorer, Ranking):
            if expand is not None or rerank is not None:
                raise InputError("give rerank and expand in the Ranking, or a scorer with them, not both")
            return cls(selector, scorer, stages=stages)
        return cls(selector, Ranking(scorer, rerank=rerank, expand=expand), stages=stages)

    def rank(self, query: Query) -> Scored:
        """The scores the method will rank ``query`` by (the chain's, or the query's own)."""
        return self.ranking.rank(query, self.selector.needs_scores)

    def run(self, query: Query, scored: Scored | None = None) -> Selection:
        """Select for a checked ``query``: rank it (unless ``scored`` is given), cut, annotate, run the stages."""
        if scored is None:
            scored = self.rank(query)
        selector = self.selector
        if query.scores is None and scored.scores is not None and self.ranking.built_scorer is not None:
            selector = selector.for_scores(scores_id(self.ranking))  # the chain scored: say whose scores
        sel = selector._select(query, scored.scores)
        self.ranking.annotate(sel, query, scored)
        for stage in self.stages:
            if stage.needs_ranking:
                sel = stage.apply(sel, query, scored.scores, ranking=self.ranking)
            else:
                sel = stage.apply(sel, query, scored.scores)
        if self.stages:
            sel.meta["stages"] = [s.spec() for s in self.stages]
        sel.view = SelectionView(query.question, query.chunks, scored.scores)
        return sel

    def select(
        self,
        question: str,
        chunks: Sequence[ChunkLike],
        scores: Any = None,
        *,
        choices: Sequence[str] | None = None,
        gold_ids: Sequence[str] | None = None,
    ) -> Selection:
        """Select for ``question``: score unless ``scores`` are given.

        ``choices`` are a multiple-choice question's answer options (SAGE reads
        them); ``gold_ids`` go to reference methods that take them (the oracle).
        """
        return self.run(Query(question, chunks, scores, choices=choices, gold_ids=gold_ids))


__all__ = ["Pipeline", "Scored"]
