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
# BM25 over the five sentences alone: only "Paris is the capital of France." matches (about 1.07), the
# rest score 0. stddev rule, z 0.6: mean 0.215 + 0.6 * std 0.430 = 0.473, so only that sentence passes;
# chunk 1 keeps its best sentence (all tie at 0: the first), the min_sentences floor.
SPEC = "prune[context=0.0]"
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


def test_range_and_stddev_thresholds() -> None:
    # range, fraction 0.65: lo 0, hi 1.07, so the same one sentence passes
    ranged = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer="bm25", stages=["prune[rule=range,context=0]"])
    assert {c.id: c.text for c in ranged.chunks} == PRUNED
    # z = -1: mean - std = -0.215 is below every score, so nothing goes
    everything = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer="bm25", stages=["prune[z=-1,context=0]"])
    assert [c.text for c in everything.chunks] == TEXTS and everything.meta["prune"]["dropped"] == {}


def test_context_blends_the_score_behind_the_first_sentence() -> None:
    from ctxsel.chunking import split_sentences
    from ctxsel.ranking.chain import Ranking
    from ctxsel.scoring import get_scorer
    from ctxsel.types import Chunk

    chunks = [Chunk(id=str(i), text=t, doc_id="d", position=i, n_tokens=0) for i, t in enumerate(TEXTS)]
    split = [split_sentences(t) for t in TEXTS]
    ranking = Ranking(get_scorer("keywords"))  # matched question words per text: "capital", "France"
    scores = {w: Prune(context=w).sentence_scores(QUESTION, chunks, split, ranking).tolist() for w in (0, 0.5, 1)}
    # "It has many museums." matches nothing alone and both words behind "Paris is the capital of France."
    assert scores == {0: [2, 0, 0, 0, 0], 0.5: [2, 1, 1, 0, 0], 1: [2, 2, 2, 0, 0]}


def test_margin_rule_and_the_floor() -> None:
    wide = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer="bm25", stages=["prune[rule=margin,margin=2,context=0]"])
    assert [c.text for c in wide.chunks] == TEXTS and wide.meta["prune"]["dropped"] == {}
    two = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer="bm25", stages=["prune[context=0,min_sentences=2]"])
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
    with pytest.raises(SpecError, match="context"):
        get_stage("prune[context=2]")
    with pytest.raises(SpecError, match="context must be a number"):
        get_stage("prune[context=true]")


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
