"""dedup: five copies of one sentence keep one, the best-ranked; near-copies by the scorer's cached
vectors; and the same result through the CLI, HTTP and the three framework components."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ctxsel
from ctxsel.errors import SpecError
from ctxsel.stages import get_stage
from ctxsel.types import Chunk
from tests.support.cli import run_cli

TEXTS = ["same sentence"] * 5 + ["other"]
SCORES = [0.5, 0.9, 0.4, 0.8, 0.3, 0.1]

QUESTION = "Which licence covers the code?"
NEAR = [
    "Licensed under the Apache License, Version 2.0.",  # 0
    "Licensed under the Apache License, Version 2.0 (the License).",  # 1: a near copy of 0
    "The code is covered by the MIT licence.",  # 2
]
NEAR_SCORES = [0.8, 0.9, 0.7]
NEAR_VECTORS = [[1.0, 0.0], [0.99, 0.141], [0.0, 1.0]]  # cos(0, 1) = 0.99


class TableScorer:
    """Fixed scores and vectors per text, served the way the dense scorer serves its cache."""

    name = "table"
    document_prefix = ""

    def __init__(self) -> None:
        self.cache: dict[str, Any] = {}
        self.embedded: list[list[str]] = []

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        return np.array([NEAR_SCORES[NEAR.index(c.text)] if c.text in NEAR else 0.0 for c in chunks])

    def embed(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        self.embedded.append(list(texts))
        return np.array([NEAR_VECTORS[NEAR.index(t)] if t in NEAR else [0.0, 0.0] for t in texts])


def test_five_copies_keep_the_best_ranked_one() -> None:
    sel = ctxsel.select("q?", TEXTS, "top-k@6", scores=SCORES, stages=["dedup"])
    assert sel.ids == ["1", "5"] and sel.scores == [0.9, 0.1]
    assert [c.id for c in sel.chunks] == sel.ids and sel.reading_order == ["1", "5"]
    assert set(sel.meta["dedup"]["dropped"]) == {"0", "2", "3", "4"} and sel.meta["dedup"]["vectors"] is False
    assert "dedup dropped" in sel.explanation


def test_empty_and_one() -> None:
    assert ctxsel.select("q?", ["a"], "top-k@1", scores=[1.0], stages=["dedup"]).ids == ["0"]
    assert ctxsel.select("q?", [], "top-k@1", scores=[], stages=["dedup"]).ids == []


def test_a_near_copy_goes_by_its_cached_vector_and_the_higher_ranked_stays() -> None:
    scorer = TableScorer()
    sel = ctxsel.select(QUESTION, NEAR, "top-k@3", scorer=scorer, stages=["dedup"])
    assert sel.ids == ["1", "2"] and sel.meta["dedup"] == {"dropped": {"0": "1"}, "vectors": True}
    assert scorer.embedded == [[NEAR[1], NEAR[0], NEAR[2]]]  # the kept chunks' vectors, asked for once
    looser = ctxsel.select(QUESTION, NEAR, "top-k@3", scorer=TableScorer(), stages=["dedup[threshold=0.995]"])
    assert looser.ids == ["1", "0", "2"]  # 0.99 is below this threshold: both stay


def test_the_registry_and_bad_options() -> None:
    assert get_stage("dedup[threshold=0.9]").spec() == "dedup[threshold=0.9]"
    with pytest.raises(SpecError, match="threshold"):
        get_stage("dedup[threshold=2]")


def test_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "notices.txt"
    doc.write_text("\n\n".join(["Apache License 2.0 applies."] * 5 + ["The MIT licence applies."]), encoding="utf-8")
    common = ["select", "--document", str(doc), "--question", QUESTION, "--scorer", "bm25", "--method", "top-k@6"]
    code, out, _ = run_cli(capsys, *common, "--stage", "dedup", "--json")
    got = json.loads(out)
    assert code == 0 and len(got["ids"]) == 2 and len(got["meta"]["dedup"]["dropped"]) == 4
    with pytest.raises(SystemExit) as exit_info:
        run_cli(capsys, *common, "--stage", "dedup[threshold=x]")
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "threshold must be a number, got 'x'" in err and "Traceback" not in err


def test_through_http(service_client: Any) -> None:
    from ctxsel.service import ServiceSettings

    body = {"question": QUESTION, "chunks": NEAR, "method": "top-k@3", "stages": ["dedup"]}
    client = service_client(ServiceSettings(scorer="dense"), scorer=TableScorer())
    got = client.post("/select", json=body)
    assert got.status_code == 200, got.text
    assert got.json()["ids"] == ["1", "2"] and got.json()["meta"]["dedup"]["vectors"] is True
    bad = client.post("/select", json={**body, "stages": ["dedup[threshold=2]"]})
    assert bad.status_code == 422 and "threshold must be" in bad.json()["message"]


def test_through_langchain() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from ctxsel.integrations.langchain import CtxselCompressor

    comp = CtxselCompressor(method="top-k@3", scorer=TableScorer(), stages=["dedup"])
    kept = comp.compress_documents([Document(page_content=t) for t in NEAR], QUESTION)
    assert sorted(d.page_content for d in kept) == sorted([NEAR[1], NEAR[2]])


def test_through_llamaindex() -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from ctxsel.integrations.llamaindex import CtxselPostprocessor

    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=None) for i, t in enumerate(NEAR)]
    out = CtxselPostprocessor(method="top-k@3", scorer=TableScorer(), stages=["dedup"]).postprocess_nodes(
        nodes, QueryBundle(QUESTION)
    )
    assert sorted(n.node.node_id for n in out) == ["n1", "n2"]


def test_through_haystack() -> None:
    pytest.importorskip("haystack")
    from haystack import Document

    from ctxsel.integrations.haystack import CtxselSelector

    out = CtxselSelector(method="top-k@3", scorer=TableScorer(), stages=["dedup"]).run(
        [Document(content=t) for t in NEAR], QUESTION
    )
    assert sorted(d.content for d in out["documents"]) == sorted([NEAR[1], NEAR[2]])
