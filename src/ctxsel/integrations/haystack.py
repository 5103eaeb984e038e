"""ctxsel as a Haystack component.

    from haystack import Pipeline
    from ctxsel.integrations.haystack import CtxselSelector

    pipe = Pipeline()
    pipe.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=50))
    pipe.add_component("selector", CtxselSelector())          # adaptive-k over the bundled MiniLM
    pipe.connect("retriever.documents", "selector.documents")
    result = pipe.run({"retriever": {"query": q}, "selector": {"query": q}})
    result["selector"]["documents"], result["selector"]["report"]

``CtxselSelector.run(documents, query, ...)`` returns ``documents`` (the kept
ones, in rank order, copies whose ``meta`` gains the ``ctxsel_*`` keys and
whose ``score`` is the score ctxsel ranked by) and ``report`` (a dict: method,
config, k, candidates, the reason for the cut, each kept position and score).
Every init setting except the scorer can be overridden for one run
(``method``, ``selector_options``, ``use_document_scores``, ``allow_empty``).
``to_dict``/``from_dict`` round-trip every setting; a scorer given as an
object rather than by name cannot be serialised and raises. Haystack only
loads components from modules on its allowlist: load a saved pipeline with
``Pipeline.loads(text, allowed_modules=["ctxsel.integrations.haystack"])``.

Needs ``pip install 'ctxsel[haystack]'``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ctxsel.errors import InputError, InputTypeError

try:
    from haystack import Document, component, default_from_dict, default_to_dict
except ImportError as e:  # pragma: no cover - exercised by test_integrations_missing
    from ctxsel.integrations._core import missing_extra

    raise missing_extra("Haystack", "haystack", e) from e

from ctxsel.integrations._core import check_documents, given_scores, make_selector, scorer_from, select_positions
from ctxsel.scoring.base import Scorer
from ctxsel.selectors.base import Selector
from ctxsel.stages import parse_stages

__all__ = ["CtxselSelector"]


@component
class CtxselSelector:
    """Keep the Documents a ctxsel method selects for the query (adaptive-k by default).

    :param method: any ctxsel method spec (``"adaptive-k"``, ``"top-k@5"``,
        ``"adaptive-k[strategy=moving_avg]"``...).
    :param selector_options: options for the selector (``min_k``, ``max_tokens``, ``buffer``...).
    :param scorer: a scorer name (None, the default: ``cascade``; ``"dense"``, the bundled MiniLM;
        ``"bm25"``, ``"keywords"``), or a ctxsel Scorer object (then the component cannot be serialised).
    :param scorer_options: options for a scorer given by name (e.g. ``{"model": PATH}``).
    :param use_document_scores: rank by the Documents' own ``score`` (a retriever's); every
        Document must have a finite one.
    :param missing_scores: what a missing or non-numeric score then means: ``"error"`` (default, an
        InputError naming the Document) or ``"rescore"`` (a warning, every Document scored with
        ``scorer``, and the reason in the report's ``note`` and each kept Document's ``ctxsel_note``).
    :param allow_empty: False (default) keeps at least the best-ranked Document of a non-empty input.
    :param llm: a ctxsel LLM client, for methods that call one (SAGE, Context-Picker); not serialised.
    :param stages: ctxsel stages after the cut, in order (``["reorder"]``: the kept Documents in
        lost-in-the-middle order; :mod:`ctxsel.stages`).
    """

    def __init__(
        self,
        method: str = "adaptive-k",
        selector_options: dict[str, Any] | None = None,
        scorer: str | Scorer | None = None,
        scorer_options: dict[str, Any] | None = None,
        use_document_scores: bool = False,
        allow_empty: bool = False,
        llm: Any = None,
        missing_scores: str = "error",
        stages: list[str] | None = None,
    ) -> None:
        self.method = method
        self.selector_options = dict(selector_options or {})
        self.scorer = scorer
        self.scorer_options = dict(scorer_options or {})
        self.use_document_scores = use_document_scores
        self.allow_empty = allow_empty
        self.llm = llm
        given_scores([], on_missing=missing_scores)  # a bad value fails here, not at the first run
        self.missing_scores = missing_scores
        self.stages = list(stages or [])
        parse_stages(self.stages)  # a bad stage fails here too
        make_selector(method, self.selector_options, llm)  # a bad spec fails here, not at the first run
        self._scorer: Scorer | None = None

    def warm_up(self) -> None:
        """Load the scorer (the embedding model for ``dense``) before the first run."""
        if self._scorer is None:
            self._scorer = scorer_from(self.scorer, self.scorer_options)

    def to_dict(self) -> dict[str, Any]:
        if self.scorer is not None and not isinstance(self.scorer, str):
            raise InputTypeError(
                "CtxselSelector with a scorer object cannot be serialised; give the scorer by name "
                "('dense', 'bm25', 'keywords') with scorer_options"
            )
        return default_to_dict(
            self,
            method=self.method,
            selector_options=self.selector_options,
            scorer=self.scorer,
            scorer_options=self.scorer_options,
            use_document_scores=self.use_document_scores,
            allow_empty=self.allow_empty,
            missing_scores=self.missing_scores,
            stages=self.stages,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CtxselSelector:
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document], report=dict[str, Any])
    def run(
        self,
        documents: list[Document],
        query: str,
        method: str | None = None,
        selector_options: dict[str, Any] | None = None,
        use_document_scores: bool | None = None,
        allow_empty: bool | None = None,
        choices: list[str] | None = None,
    ) -> dict[str, Any]:
        """Select from ``documents`` for ``query``; the other arguments override the init settings
        for this run only; ``choices`` are a multiple-choice question's answer options (SAGE reads them).
        ``selector_options``, when given, replaces the init ones; when not, the
        init ones go to a per-run ``method`` too (so pass ``{}`` to drop options it does not take)."""
        check_documents(documents, "haystack Document")
        options = self.selector_options if selector_options is None else selector_options
        try:
            selector: Selector = make_selector(method or self.method, options, self.llm)
        except ValueError as e:
            if method is None or selector_options is not None or not options:
                raise
            raise InputError(
                f"{e} (the init selector_options {options} apply to a per-run method too: "
                "pass selector_options for this run, e.g. {})"
            ) from e
        use_scores = self.use_document_scores if use_document_scores is None else use_document_scores
        empty_ok = self.allow_empty if allow_empty is None else allow_empty
        scores, note = None, ""
        if use_scores and documents:
            scores, note = given_scores([d.score for d in documents], "score", self.missing_scores)
        scorer = None
        if scores is None and selector.needs_scores and documents:
            self.warm_up()
            scorer = self._scorer
        out = select_positions(
            query,
            [d.content or "" for d in documents],
            selector,
            scorer,
            scores=scores,
            allow_empty=empty_ok,
            choices=choices,
            note=note,
            stages=self.stages,
        )
        kept = []
        for i, meta in zip(out.kept, out.metadata):
            src = documents[i]
            score = meta["ctxsel_score"] if meta["ctxsel_score"] is not None else src.score
            content = out.text_of(i, src.content or "") if i in out.texts else src.content
            kept.append(dataclasses.replace(src, content=content, meta={**src.meta, **meta}, score=score))
        return {"documents": kept, "report": out.report()}
