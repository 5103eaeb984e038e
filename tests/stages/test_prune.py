"""Sentence pruning: the rule on a hand-worked BM25 example, then the same pruned text through
the Python API, the CLI, HTTP and the three framework components, and bad options refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ctxsel
from ctxsel.errors import SpecError
from ctxsel.stages import available_stages, get_stage
from ctxsel.stages.prune import Prune
from tests.support.cli import run_cli

QUESTION = "What is the capital of France?"
TEXTS = [
    "Paris is the capital of France. It has many museums. The Seine flows through it.",
    "Berlin is big. Berlin has a zoo.",
]
# BM25 over the five sentences: only "Paris is the capital of France." matches (about 1.07), the rest score 0.
# range rule, fraction 0.65: lo = 0, hi = 1.07, so only that sentence passes; chunk 1 keeps its best
# sentence (all tie at 0: the first), the min_sentences floor.
SPEC = "prune[context=false]"
PRUNED = {"0": "Paris is the capital of France.", "1": "Berlin is big."}


def test_the_hand_worked_example() -> None:
    sel = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer="bm25", stages=[SPEC])
    assert sel.ids == ["0", "1"]
    assert {c.id: c.text for c in sel.chunks} == PRUNED
    assert sel.text(" | ") == "Paris is the capital of France. | Berlin is big."
    prune = sel.meta["prune"]
    assert prune["dropped"] == {"0": [1, 2], "1": [1]} and prune["sentences"] == 5
    assert prune["tokens_before"] == 28 and prune["tokens_after"] == sel.n_tokens == 11
    assert "prune: kept 2 of 5 sentences, 28 -> 11 tokens" in sel.explanation
    assert sel.meta["stages"] == [SPEC]


def test_margin_rule_and_the_floor() -> None:
    wide = ctxsel.select(
        QUESTION, TEXTS, "top-k@2", scorer="bm25", stages=["prune[rule=margin,margin=2,context=false]"]
    )
    assert [c.text for c in wide.chunks] == TEXTS and wide.meta["prune"]["dropped"] == {}
    two = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer="bm25", stages=["prune[context=false,min_sentences=2]"])
    assert [c.text for c in two.chunks] == ["Paris is the capital of France. It has many museums.", TEXTS[1]]


def test_the_registry_and_bad_options() -> None:
    assert "prune" in available_stages()
    assert get_stage("prune") == Prune() and Prune().spec() == "prune"
    assert get_stage(SPEC).spec() == SPEC
    with pytest.raises(SpecError, match="fraction"):
        get_stage("prune[fraction=2]")
    with pytest.raises(SpecError, match="min_sentences"):
        get_stage("prune[min_sentences=0]")
    with pytest.raises(SpecError, match="rule"):
        get_stage("prune[rule=best]")


def test_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.txt"
    doc.write_text("\n\n".join(TEXTS), encoding="utf-8")
    common = ["select", "--document", str(doc), "--question", QUESTION, "--scorer", "bm25", "--method", "top-k@2"]
    code, out, _ = run_cli(capsys, *common, "--stage", SPEC, "--json")
    got = json.loads(out)
    assert code == 0 and [c["text"] for c in got["chunks"]] == list(PRUNED.values())
    assert got["meta"]["prune"]["tokens_after"] == 11


def test_through_http(service_client: Any) -> None:
    from ctxsel.service import ServiceSettings

    client = service_client(ServiceSettings(scorer="bm25"))
    body = {"question": QUESTION, "chunks": TEXTS, "method": "top-k@2", "stages": [SPEC]}
    got = client.post("/select", json=body)
    assert got.status_code == 200, got.text
    assert [c["text"] for c in got.json()["chunks"]] == list(PRUNED.values())
    bad = client.post("/select", json={**body, "stages": ["prune[fraction=2]"]})
    assert bad.status_code == 422 and "fraction" in bad.json()["message"]


def test_through_langchain() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from ctxsel.integrations.langchain import CtxselCompressor

    comp = CtxselCompressor(method="top-k@2", scorer="bm25", stages=[SPEC])
    kept = comp.compress_documents([Document(page_content=t) for t in TEXTS], QUESTION)
    assert [d.page_content for d in kept] == list(PRUNED.values())


def test_through_llamaindex() -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from ctxsel.integrations.llamaindex import CtxselPostprocessor

    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=None) for i, t in enumerate(TEXTS)]
    out = CtxselPostprocessor(method="top-k@2", scorer="bm25", stages=[SPEC]).postprocess_nodes(
        nodes, QueryBundle(QUESTION)
    )
    assert [n.node.get_content() for n in out] == list(PRUNED.values())


def test_through_haystack() -> None:
    pytest.importorskip("haystack")
    from haystack import Document

    from ctxsel.integrations.haystack import CtxselSelector

    out = CtxselSelector(method="top-k@2", scorer="bm25", stages=[SPEC]).run(
        [Document(content=t) for t in TEXTS], QUESTION
    )
    assert [d.content for d in out["documents"]] == list(PRUNED.values())
