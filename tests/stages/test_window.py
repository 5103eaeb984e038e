"""Neighbour windows: the heading case (a one-word heading kept, the sentence after it holding the
answer), the budget, documents given as Chunks, and every surface."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ctxsel
from ctxsel.errors import SpecError
from ctxsel.stages import available_stages, get_stage
from ctxsel.tokens import count_tokens
from ctxsel.types import Chunk
from tests.support.cli import run_cli

QUESTION = "Under which licence is Eigen released?"
TEXTS = [
    "Third-party notices for the libraries this product uses.",
    "Eigen",
    "Eigen is released under the Mozilla Public License 2.0; a few files are BSD-licensed.",
    "Boost",
    "Boost is released under the Boost Software License 1.0.",
]
# the heading scores best, the answer sentence after it poorly: a cut keeps the heading alone
SCORES = [0.1, 0.9, 0.3, 0.2, 0.15]
ANSWER = TEXTS[2]


def test_window_recovers_the_answer_sentence_after_a_heading() -> None:
    alone = ctxsel.select(QUESTION, TEXTS, "top-k@1", scores=SCORES)
    assert alone.ids == ["1"] and ANSWER not in alone.text()
    sel = ctxsel.select(QUESTION, TEXTS, "top-k@1", scores=SCORES, stages=["window"])
    # the kept chunk first, then its neighbours (before, after); read in document order
    assert sel.ids == ["1", "0", "2"] and sel.scores == [0.9, 0.1, 0.3]
    assert sel.reading_order == ["0", "1", "2"] and ANSWER in sel.text()
    assert sel.meta["window"] == {"added": ["0", "2"], "skipped_for_budget": 0}
    assert sel.explanation.endswith("; window[n=1] added 2 neighbour(s)")


def test_overlapping_windows_merge_and_n_reaches_further() -> None:
    sel = ctxsel.select(QUESTION, TEXTS, "top-k@2", scores=SCORES, stages=["window"])  # keeps 1 and 2
    assert sel.ids == ["1", "2", "0", "3"]  # 0 before 1, 3 after 2; 2 is kept already, not added twice
    two = ctxsel.select(QUESTION, TEXTS, "top-k@1", scores=SCORES, stages=["window[n=2]"])
    assert two.ids == ["1", "0", "2", "3"]  # distance 1 first (0, 2), then distance 2 (3)


def test_the_budget_skips_neighbours_that_do_not_fit_and_never_drops_a_kept_chunk() -> None:
    n = [count_tokens(t) for t in TEXTS]
    fits_one = n[1] + n[0]  # the heading and the notices line, not the long answer sentence
    sel = ctxsel.select(QUESTION, TEXTS, "top-k@1", scores=SCORES, stages=[f"window[max_tokens={fits_one}]"])
    assert sel.ids == ["1", "0"] and sel.n_tokens == fits_one
    assert sel.meta["window"] == {"added": ["0"], "skipped_for_budget": 1}
    assert "skipped 1 past max_tokens" in sel.explanation
    tiny = ctxsel.select(QUESTION, TEXTS, "top-k@1", scores=SCORES, stages=["window[max_tokens=0]"])
    assert tiny.ids == ["1"]


def test_neighbours_follow_each_documents_positions() -> None:
    # two documents, chunks given out of order: neighbours are by (doc_id, position), never across documents
    chunks = [
        Chunk(id="b1", text="Boost", doc_id="b", position=0),
        Chunk(id="a2", text=ANSWER, doc_id="a", position=1),
        Chunk(id="b2", text=TEXTS[4], doc_id="b", position=1),
        Chunk(id="a1", text="Eigen", doc_id="a", position=0),
    ]
    sel = ctxsel.select(QUESTION, chunks, "top-k@1", scores=[0.2, 0.3, 0.1, 0.9], stages=["window"])
    assert sel.ids == ["a1", "a2"]


def test_the_registry_and_bad_options() -> None:
    assert "window" in available_stages()
    assert get_stage("window[n=2]").spec() == "window[n=2]"
    with pytest.raises(SpecError, match="n must be"):
        get_stage("window[n=0]")
    with pytest.raises(SpecError, match="max_tokens"):
        get_stage("window[max_tokens=-1]")


def test_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.txt"
    doc.write_text("\n\n".join(TEXTS), encoding="utf-8")
    common = ["select", "--document", str(doc), "--question", QUESTION, "--scorer", "bm25", "--method", "top-k@1"]
    code, out, _ = run_cli(capsys, *common, "--stage", "window", "--json")
    got = json.loads(out)
    assert code == 0 and len(got["ids"]) == 3 and got["meta"]["window"]["added"]


def test_through_http(service_client: Any) -> None:
    from ctxsel.service import ServiceSettings

    client = service_client(ServiceSettings(scorer="bm25"))
    body = {"question": QUESTION, "chunks": TEXTS, "scores": SCORES, "method": "top-k@1", "stages": ["window"]}
    got = client.post("/select", json=body)
    assert got.status_code == 200, got.text
    assert [c["id"] for c in got.json()["chunks"]] == ["1", "0", "2"]
    bad = client.post("/select", json={**body, "stages": ["window[n=0]"]})
    assert bad.status_code == 422 and "n must be" in bad.json()["message"]


def test_through_langchain() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from ctxsel.integrations.langchain import CtxselCompressor

    docs = [Document(page_content=t, metadata={"score": s}) for t, s in zip(TEXTS, SCORES, strict=True)]
    kept = CtxselCompressor(method="top-k@1", score_key="score", stages=["window"]).compress_documents(docs, QUESTION)
    assert [d.page_content for d in kept] == [TEXTS[1], TEXTS[0], ANSWER]


def test_through_llamaindex() -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from ctxsel.integrations.llamaindex import CtxselPostprocessor

    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=s) for i, (t, s) in enumerate(zip(TEXTS, SCORES))]
    out = CtxselPostprocessor(method="top-k@1", use_node_scores=True, stages=["window"]).postprocess_nodes(
        nodes, QueryBundle(QUESTION)
    )
    assert [n.node.get_content() for n in out] == [TEXTS[1], TEXTS[0], ANSWER]


def test_through_haystack() -> None:
    pytest.importorskip("haystack")
    from haystack import Document

    from ctxsel.integrations.haystack import CtxselSelector

    docs = [Document(content=t, score=s) for t, s in zip(TEXTS, SCORES, strict=True)]
    out = CtxselSelector(method="top-k@1", use_document_scores=True, stages=["window"]).run(docs, QUESTION)
    assert [d.content for d in out["documents"]] == [TEXTS[1], TEXTS[0], ANSWER]
