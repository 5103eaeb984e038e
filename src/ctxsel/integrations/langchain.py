"""ctxsel as a LangChain document compressor, and as a plain function for ``RunnableLambda``.

    from langchain_classic.retrievers import ContextualCompressionRetriever
    from ctxsel.integrations.langchain import CtxselCompressor

    retriever = ContextualCompressionRetriever(
        base_compressor=CtxselCompressor(),          # adaptive-k over the bundled MiniLM
        base_retriever=vectorstore.as_retriever(search_kwargs={"k": 50}),
    )

``CtxselCompressor`` is a ``BaseDocumentCompressor``: ``compress_documents(
documents, query, callbacks=None)`` returns the kept Documents in rank order,
each a copy whose ``metadata`` gains the ``ctxsel_*`` keys (score, rank,
method, the reason for the cut, k, candidates, where the scores came from);
the input Documents are not modified. It works in ``ContextualCompressionRetriever``
and ``DocumentCompressorPipeline`` (``langchain-classic``), and
``select_documents`` does the same as a function, e.g. in ``RunnableLambda``.

Needs ``pip install 'ctxsel[langchain]'``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from ctxsel.errors import InputError

try:
    from langchain_core.callbacks import Callbacks
    from langchain_core.documents import BaseDocumentCompressor, Document
    from pydantic import ConfigDict, Field, PrivateAttr
except ImportError as e:  # pragma: no cover - exercised by test_integrations_missing
    from ctxsel.integrations._core import missing_extra

    raise missing_extra("LangChain", "langchain", e) from e

from ctxsel.integrations._core import LazyParts, Outcome, check_documents, given_scores, select_positions
from ctxsel.scoring.base import Scorer
from ctxsel.selectors.base import Selector

__all__ = ["CtxselCompressor", "select_documents"]


class CtxselCompressor(LazyParts, BaseDocumentCompressor):
    """Keep the Documents a ctxsel method selects for the query (adaptive-k by default).

    - ``method``: any ctxsel method spec (``"adaptive-k"``, ``"top-k@5"``,
      ``"autocut@1"``, ``"adaptive-k[strategy=moving_avg]"``...) or a Selector;
      ``selector_options`` go to it (``min_k``, ``max_tokens``, ``buffer``...);
      ``llm`` is handed to methods that call an LLM (``self-route``).
    - ``scorer``: a scorer name (None, the default: ``cascade``, MiniLM and BM25 over the pool and
      nomic over its head; ``"dense"``, the bundled MiniLM; ``"bm25"``, ``"keywords"``) or a
      Scorer object; ``scorer_options`` go to it. Loaded once, on first use.
    - ``score_key``: a metadata key holding scores the retriever already
      computed (e.g. ``"relevance_score"``); every Document must have a finite
      number there. ``missing_scores`` says what a missing or non-numeric one
      means: ``"error"`` (default, an InputError naming the Document) or
      ``"rescore"`` (a warning, every Document scored with ``scorer``, and the
      reason in each kept Document's ``ctxsel_note``).
    - ``allow_empty``: False (default) keeps at least the best-ranked Document of a
      non-empty input, even if the method or a ``max_tokens`` budget keeps none.
    - ``stages``: ctxsel stages after the cut, in order (``["reorder"]``: the kept Documents in
      lost-in-the-middle order; :mod:`ctxsel.stages`).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    method: str | Selector = "adaptive-k"
    selector_options: dict[str, Any] = Field(default_factory=dict)
    scorer: str | Scorer | None = None
    scorer_options: dict[str, Any] = Field(default_factory=dict)
    score_key: str | None = None
    missing_scores: Literal["error", "rescore"] = "error"
    allow_empty: bool = False
    stages: list[str] = Field(default_factory=list)
    llm: Any = None
    #: a multiple-choice question's answer options (SAGE reads them; its answer is in the report)
    choices: list[str] | None = None

    _selector: Selector | None = PrivateAttr(default=None)
    _scorer: Scorer | None = PrivateAttr(default=None)
    _last_report: dict[str, Any] | None = PrivateAttr(default=None)

    @property
    def last_report(self) -> dict[str, Any] | None:
        """The selection report of the latest ``compress_documents`` call (method, k, why, kept)."""
        return self._last_report

    def select(self, documents: Sequence[Document], query: str) -> tuple[list[Document], Outcome]:
        """The kept Documents (copies with ``ctxsel_*`` metadata) and the full outcome."""
        check_documents(documents, "langchain Document")
        docs = list(documents)
        selector = self._get_selector()
        scores, note = None, ""
        if self.score_key is not None and docs:
            scores, note = given_scores(
                [d.metadata.get(self.score_key) for d in docs], f"metadata[{self.score_key!r}]", self.missing_scores
            )
        scorer = self._get_scorer() if scores is None and selector.needs_scores and docs else None
        out = select_positions(
            query,
            [d.page_content for d in docs],
            selector,
            scorer,
            scores=scores,
            allow_empty=self.allow_empty,
            choices=self.choices,
            note=note,
            stages=self.stages,
        )
        kept = [
            Document(
                page_content=out.text_of(i, docs[i].page_content), metadata={**docs[i].metadata, **meta}, id=docs[i].id
            )
            for i, meta in zip(out.kept, out.metadata)
        ]
        return kept, out

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        kept, out = self.select(documents, query)
        self._last_report = out.report()
        return kept


def select_documents(
    inputs: dict[str, Any] | None = None,
    /,
    *,
    documents: Sequence[Document] | None = None,
    query: str | None = None,
    **settings: Any,
) -> list[Document]:
    """ctxsel as a plain function: ``select_documents({"documents": docs, "query": q})``.

    Takes one dict (what ``RunnableLambda`` passes) or keywords; other keys
    or keywords are ``CtxselCompressor`` settings (``method``, ``scorer``,
    ``allow_empty``...). A fresh compressor per call: for repeated calls with
    the dense scorer, keep one ``CtxselCompressor`` and use
    ``RunnableLambda(lambda x: comp.compress_documents(x["documents"], x["query"]))``.
    """
    merged: dict[str, Any] = dict(inputs or {})
    if documents is not None:
        merged["documents"] = documents
    if query is not None:
        merged["query"] = query
    merged.update(settings)
    if "documents" not in merged or "query" not in merged:
        raise InputError("select_documents needs 'documents' and 'query' (as dict keys or keywords)")
    docs = merged.pop("documents")
    q = merged.pop("query")
    return list(CtxselCompressor(**merged).compress_documents(docs, q))
