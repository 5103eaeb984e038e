"""The Haystack component against the real haystack-ai package (in-memory store, BM25 retriever)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("haystack")

from haystack import Document, Pipeline
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.document_stores.in_memory import InMemoryDocumentStore

from ctxsel.integrations._core import META_KEYS
from ctxsel.integrations.haystack import CtxselSelector
from tests.support.museum import QUERY, TEXTS

ALLOWED = ["ctxsel.integrations.haystack"]


def docs() -> list[Document]:
    return [Document(content=t, meta={"n": i}, id=f"d{i}") for i, t in enumerate(TEXTS)]


def pipeline(**settings: Any) -> Pipeline:
    store = InMemoryDocumentStore()
    store.write_documents(docs())
    pipe = Pipeline()
    pipe.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=5))
    pipe.add_component("selector", CtxselSelector(**settings))
    pipe.connect("retriever.documents", "selector.documents")
    return pipe


def test_run_returns_documents_and_report() -> None:
    comp = CtxselSelector(method="top-k@2", scorer="keywords")
    inputs = docs()
    out = comp.run(documents=inputs, query=QUERY)
    assert [d.id for d in out["documents"]] == ["d1", "d3"]
    d = out["documents"][0]
    assert d.meta["n"] == 1 and set(META_KEYS) <= set(d.meta)
    assert d.score == d.meta["ctxsel_score"] > 0
    rep = out["report"]
    assert rep["method"] == "top-k" and rep["k"] == 2 and rep["n_candidates"] == 5
    assert rep["explanation"] == "fixed top-2: kept 2 of 5"
    assert [r["index"] for r in rep["kept"]] == [1, 3]
    assert all(set(x.meta) == {"n"} and x.score is None for x in inputs)  # inputs untouched


def test_in_pipeline_with_per_run_overrides() -> None:
    pipe = pipeline(method="top-k@2", scorer="keywords")
    res = pipe.run({"retriever": {"query": QUERY}, "selector": {"query": QUERY}})
    assert [d.id for d in res["selector"]["documents"]] == ["d1", "d3"]
    assert res["selector"]["report"]["scores_from"] == "scorer:keywords"
    # one run with another method and the retriever's BM25 scores; the next run is back to the init settings
    res = pipe.run(
        {"retriever": {"query": QUERY}, "selector": {"query": QUERY, "method": "top-k@1", "use_document_scores": True}}
    )
    sel = res["selector"]
    assert len(sel["documents"]) == 1 and sel["report"]["scores_from"] == "input"
    assert sel["report"]["method"] == "top-k" and sel["report"]["config"]["k"] == 1
    res = pipe.run({"retriever": {"query": QUERY}, "selector": {"query": QUERY}})
    assert len(res["selector"]["documents"]) == 2
    # selector_options and allow_empty per run
    res = pipe.run({"retriever": {"query": QUERY}, "selector": {"query": QUERY, "selector_options": {"max_tokens": 1}}})
    assert len(res["selector"]["documents"]) == 1 and res["selector"]["report"]["allow_empty_fallback"]
    res = pipe.run(
        {
            "retriever": {"query": QUERY},
            "selector": {"query": QUERY, "selector_options": {"max_tokens": 1}, "allow_empty": True},
        }
    )
    assert res["selector"]["documents"] == []


def test_to_dict_from_dict_round_trip() -> None:
    comp = CtxselSelector(
        method="adaptive-k[strategy=moving_avg]",
        selector_options={"min_k": 2},
        scorer="bm25",
        use_document_scores=True,
        allow_empty=True,
        stages=["reorder"],
    )
    data = comp.to_dict()
    assert data == {
        "type": "ctxsel.integrations.haystack.CtxselSelector",
        "init_parameters": {
            "method": "adaptive-k[strategy=moving_avg]",
            "selector_options": {"min_k": 2},
            "scorer": "bm25",
            "scorer_options": {},
            "use_document_scores": True,
            "allow_empty": True,
            "missing_scores": "error",
            "stages": ["reorder"],
        },
    }
    back = CtxselSelector.from_dict(data)
    assert back.to_dict() == data
    # a whole pipeline through YAML and back gives the same selection
    pipe = pipeline(method="top-k@2", scorer="keywords")
    loaded = Pipeline.loads(pipe.dumps(), allowed_modules=ALLOWED)
    a = pipe.run({"retriever": {"query": QUERY}, "selector": {"query": QUERY}})["selector"]
    b = loaded.run({"retriever": {"query": QUERY}, "selector": {"query": QUERY}})["selector"]
    assert [d.id for d in a["documents"]] == [d.id for d in b["documents"]] == ["d1", "d3"]
    assert a["report"] == b["report"]
    with pytest.raises(TypeError, match="cannot be serialised"):
        from ctxsel.scoring.keywords import KeywordScorer

        CtxselSelector(scorer=KeywordScorer()).to_dict()


def test_default_and_edge_cases() -> None:
    out = CtxselSelector(scorer="keywords").run(documents=docs(), query=QUERY)
    assert out["documents"] and out["report"]["method"] == "adaptive-k"
    assert CtxselSelector(scorer="keywords").run(documents=[], query=QUERY)["documents"] == []
    with pytest.raises(ValueError, match="unknown method"):
        CtxselSelector(method="nope")


def test_a_document_without_a_score_is_an_error_or_a_noted_rescore() -> None:
    d = [Document(content=t, id=f"d{i}", score=None if i == 1 else 0.5) for i, t in enumerate(TEXTS)]
    with pytest.raises(ValueError, match=r"documents\[1\]\.score is missing: give every document a finite numeric"):
        CtxselSelector(method="top-k@1", scorer="keywords", use_document_scores=True).run(documents=d, query=QUERY)
    comp = CtxselSelector(method="top-k@1", scorer="keywords", use_document_scores=True, missing_scores="rescore")
    with pytest.warns(UserWarning, match=r"documents\[1\]\.score is missing"):
        res = comp.run(documents=d, query=QUERY)
    assert res["report"]["scores_from"] == "scorer:keywords" and "documents[1].score" in res["report"]["note"]
    assert "documents[1].score is missing" in res["documents"][0].meta["ctxsel_note"]
    with pytest.raises(ValueError, match="missing_scores must be one of 'error', 'rescore', got 'skip'"):
        CtxselSelector(missing_scores="skip")
