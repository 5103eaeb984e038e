"""The LangChain compressor against the real langchain-core / langchain-classic packages."""

from __future__ import annotations

import re
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_classic")

from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda

from ctxsel.errors import InputError
from ctxsel.integrations._core import META_KEYS
from ctxsel.integrations.langchain import CtxselCompressor, select_documents
from tests.support.museum import QUERY, TEXTS


class ListRetriever(BaseRetriever):
    """A tiny retriever: returns its documents in the stored order, whatever the query."""

    docs: list[Document]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return list(self.docs)


def docs() -> list[Document]:
    return [Document(page_content=t, metadata={"source": f"s{i}"}, id=f"d{i}") for i, t in enumerate(TEXTS)]


def test_is_a_document_compressor_and_keeps_metadata() -> None:
    comp = CtxselCompressor(method="top-k@2", scorer="keywords")
    assert isinstance(comp, BaseDocumentCompressor)
    inputs = docs()
    out = comp.compress_documents(inputs, QUERY)
    # keyword overlap with the query: d1 shares meteorite, museum (and more) -> ranked first
    assert [d.id for d in out] == ["d1", "d3"]
    assert [d.metadata["source"] for d in out] == ["s1", "s3"]
    assert all(set(META_KEYS) <= set(d.metadata) for d in out)
    assert [d.metadata["ctxsel_rank"] for d in out] == [1, 2]
    assert out[0].metadata["ctxsel_score"] >= out[1].metadata["ctxsel_score"] > 0
    assert out[0].metadata["ctxsel_explanation"] == "fixed top-2: kept 2 of 5"
    assert out[0].metadata["ctxsel_method"] == "top-k"
    assert out[0].metadata["ctxsel_scores_from"] == "scorer:keywords"
    # the inputs are untouched
    assert all(set(d.metadata) == {"source"} for d in inputs)
    assert comp.last_report is not None and comp.last_report["k"] == 2
    assert [r["index"] for r in comp.last_report["kept"]] == [1, 3]


def test_default_method_is_adaptive_k() -> None:
    out = CtxselCompressor(scorer="keywords").compress_documents(docs(), QUERY)
    assert out[0].metadata["ctxsel_method"] == "adaptive-k"
    assert "largest gap" in out[0].metadata["ctxsel_explanation"]


def test_in_contextual_compression_retriever() -> None:
    retriever = ContextualCompressionRetriever(
        base_compressor=CtxselCompressor(method="top-k@1", scorer="keywords"),
        base_retriever=ListRetriever(docs=docs()),
    )
    out = retriever.invoke(QUERY)
    assert [d.id for d in out] == ["d1"]
    assert out[0].metadata["ctxsel_k"] == 1 and out[0].metadata["ctxsel_n_candidates"] == 5


def test_in_document_compressor_pipeline() -> None:
    # two ctxsel stages: a wide top-3, then top-1 of what is left
    pipeline = DocumentCompressorPipeline(
        transformers=[
            CtxselCompressor(method="top-k@3", scorer="keywords"),
            CtxselCompressor(method="top-k@1", scorer="keywords"),
        ]
    )
    out = pipeline.compress_documents(docs(), QUERY)
    assert [d.id for d in out] == ["d1"]
    # the second stage's metadata wins: it saw 3 candidates
    assert out[0].metadata["ctxsel_n_candidates"] == 3
    retriever = ContextualCompressionRetriever(base_compressor=pipeline, base_retriever=ListRetriever(docs=docs()))
    assert [d.id for d in retriever.invoke(QUERY)] == ["d1"]


def test_runnable_lambda_function() -> None:
    chain = RunnableLambda(select_documents)
    out = chain.invoke({"documents": docs(), "query": QUERY, "method": "top-k@2", "scorer": "keywords"})
    assert [d.id for d in out] == ["d1", "d3"]
    out = select_documents(documents=docs(), query=QUERY, method="top-k@1", scorer="keywords")
    assert [d.id for d in out] == ["d1"]
    with pytest.raises(ValueError, match="needs 'documents' and 'query'"):
        select_documents({"documents": docs()})


def test_never_empty_unless_allowed() -> None:
    # a 1-token budget fits no document: the selector keeps none
    strict = CtxselCompressor(method="top-k@2", scorer="keywords", selector_options={"max_tokens": 1})
    out = strict.compress_documents(docs(), QUERY)
    assert [d.id for d in out] == ["d1"]
    assert "allow_empty=False" in out[0].metadata["ctxsel_explanation"]
    assert strict.last_report is not None and strict.last_report["allow_empty_fallback"] is True
    loose = CtxselCompressor(method="top-k@2", scorer="keywords", selector_options={"max_tokens": 1}, allow_empty=True)
    assert loose.compress_documents(docs(), QUERY) == []
    assert CtxselCompressor(scorer="keywords").compress_documents([], QUERY) == []


def test_uses_retriever_scores_from_metadata_when_all_present() -> None:
    d = docs()
    for doc, s in zip(d, [0.1, 0.2, 0.9, 0.3, 0.05]):
        doc.metadata["relevance_score"] = s
    out = CtxselCompressor(method="top-k@1", score_key="relevance_score", scorer="keywords").compress_documents(
        d, QUERY
    )
    assert [x.id for x in out] == ["d2"]
    assert out[0].metadata["ctxsel_scores_from"] == "input"
    assert "ctxsel_note" not in out[0].metadata


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (None, "is missing"),
        ("0.9", "is '0.9' (a str), not a number"),
        (True, "is True (a bool), not a number"),
        (float("nan"), "is nan, not a finite number"),
    ],
)
def test_a_missing_or_non_numeric_retriever_score_is_an_error_or_a_noted_rescore(value: Any, problem: str) -> None:
    """Issue 45: one missing score silently rescored every document with the scorer."""
    d = docs()
    for doc, s in zip(d, [0.1, 0.2, 0.9, 0.3, 0.05]):
        doc.metadata["relevance_score"] = s
    if value is None:
        del d[2].metadata["relevance_score"]
    else:
        d[2].metadata["relevance_score"] = value
    where = f"documents[2].metadata['relevance_score'] {problem}"
    comp = CtxselCompressor(method="top-k@1", score_key="relevance_score", scorer="keywords")
    with pytest.raises(InputError) as e:
        comp.compress_documents(d, QUERY)
    assert str(e.value) == (
        f"{where}: give every document a finite numeric score, or pass missing_scores='rescore' to score them "
        "all with the scorer"
    )
    comp = CtxselCompressor(method="top-k@1", score_key="relevance_score", scorer="keywords", missing_scores="rescore")
    with pytest.warns(UserWarning, match=re.escape(where)):
        out = comp.compress_documents(d, QUERY)
    assert [x.id for x in out] == ["d1"]
    assert out[0].metadata["ctxsel_scores_from"] == "scorer:keywords"
    assert out[0].metadata["ctxsel_note"] == f"the input scores were not used ({where}); every document was rescored"
    assert comp.last_report is not None and comp.last_report["note"] == out[0].metadata["ctxsel_note"]


def test_any_selector_and_bad_spec() -> None:
    from ctxsel.selectors.fixed import TopK

    out = CtxselCompressor(method=TopK(k=3), scorer="bm25").compress_documents(docs(), QUERY)
    assert len(out) == 3 and out[0].metadata["ctxsel_scores_from"] == "scorer:bm25"
    out = CtxselCompressor(method="full", scorer="keywords").compress_documents(docs(), QUERY)
    assert len(out) == 5
    with pytest.raises(ValueError, match="unknown method"):
        CtxselCompressor(method="nope", scorer="keywords").compress_documents(docs(), QUERY)


def test_dense_scorer_is_shared_bm25_is_not() -> None:
    from ctxsel.integrations._core import scorer_from

    a = CtxselCompressor(scorer="dense")  # the model loads lazily, so nothing heavy happens here
    b = CtxselCompressor(scorer="dense")
    assert a._get_scorer() is b._get_scorer() is scorer_from("dense")
    assert scorer_from("dense", {"batch_size": 8}) is not scorer_from("dense")
    c, d = CtxselCompressor(scorer="bm25"), CtxselCompressor(scorer="bm25")
    assert c._get_scorer() is not d._get_scorer()  # BM25 keeps per-pool state
