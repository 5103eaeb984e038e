"""Maximal marginal relevance: the rule on a hand-worked example (two near-duplicates and a diverse
chunk), the edge cases, and the same picks through the Python API, the CLI, HTTP and the three
framework components."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ctxsel
from ctxsel.errors import InputError, SpecError
from ctxsel.stages import available_stages, get_stage
from ctxsel.stages.mmr import Mmr, mmr_order, scaled
from ctxsel.types import Chunk
from tests.support.cli import run_cli

QUESTION = "Which rivers flow through Paris?"
TEXTS = [
    "The Seine flows through Paris.",  # A, the best
    "The river Seine flows through the city of Paris.",  # A', a near-duplicate of A
    "The Bievre, a lost river, also crossed Paris.",  # B, relevant and different
    "Bananas are yellow.",  # C, irrelevant
]
SCORES = [0.9, 0.88, 0.8, 0.1]
VECTORS = [[1.0, 0.0, 0.0], [0.995, 0.0998, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
# Hand-worked, lambda = 0.5, candidates all four: rel = (s - 0.1) / 0.8 = 1, 0.975, 0.875, 0.
# Pick 1: A (0.5 * 1). Pick 2: A' 0.5*0.975 - 0.5*cos(A', A)=0.995 -> -0.01; B 0.5*0.875 - 0 = 0.4375;
# C 0 - 0 = 0: B. So top-k@2 (A, A') becomes A, B. Pick 3: A' still -0.01, C 0: C before the duplicate.
PICKS_2 = ["0", "2"]


class TableScorer:
    """Fixed scores and vectors per text, the way the dense scorer serves its cache."""

    name = "table"
    document_prefix = ""

    def __init__(self) -> None:
        self.cache: dict[str, Any] = {}
        self.embedded: list[str] = []

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        # any other text (the service's warm-up) scores 0
        return np.array([SCORES[TEXTS.index(c.text)] if c.text in TEXTS else 0.0 for c in chunks])

    def embed(self, texts: Sequence[str], prefix: str = "") -> np.ndarray:
        self.embedded.extend(texts)
        return np.array([VECTORS[TEXTS.index(t)] for t in texts])


def test_the_hand_worked_example() -> None:
    plain = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer=TableScorer())
    assert plain.ids == ["0", "1"]
    scorer = TableScorer()
    sel = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer=scorer, stages=["mmr[lambda=0.5]"])
    assert sel.ids == PICKS_2 and sel.scores == [0.9, 0.8]
    assert [c.id for c in sel.chunks] == sel.ids and sel.reading_order == ["0", "2"]
    assert sel.meta["mmr"] == {"candidates": 4, "swapped_in": ["2"], "swapped_out": ["1"], "values": [0.5, 0.4375]}
    assert sel.explanation.endswith("; mmr[lambda=0.50] chose 2 of the top 4: 2 in place of 1")
    assert sel.meta["stages"] == ["mmr[lambda=0.5]"]
    assert sorted(scorer.embedded) == sorted(TEXTS)  # each candidate embedded once
    three = ctxsel.select(QUESTION, TEXTS, "top-k@3", scorer=TableScorer(), stages=["mmr[lambda=0.5]"])
    assert three.ids == ["0", "2", "3"]  # the irrelevant chunk before the near-duplicate at lambda 0.5


def test_lambda_trades_relevance_for_diversity() -> None:
    def picks(lam: float) -> list[str]:
        return ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer=TableScorer(), stages=[f"mmr[lambda={lam}]"]).ids

    # A' against B at pick 2: lam*0.975 - (1-lam)*0.995 against lam*0.875; B wins below lam = 0.995/1.095
    assert picks(1) == ["0", "1"]  # relevance alone: the ranking's top 2
    assert picks(0.95) == ["0", "1"] and picks(0.9) == ["0", "2"] and picks(0.7) == ["0", "2"]
    assert picks(0) == ["0", "2"]  # redundancy alone: B and C are both orthogonal to A; B is ranked higher
    same = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer=TableScorer(), stages=["mmr[lambda=1]"])
    assert same.explanation.endswith("mmr[lambda=1.00] kept the same 2 of the top 4, in its order")


def test_fetch_limits_the_candidates() -> None:
    # fetch=2: only A and A' (the kept ones) are candidates, so nothing changes
    sel = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer=TableScorer(), stages=["mmr[lambda=0.5,fetch=2]"])
    assert sel.ids == ["0", "1"] and sel.meta["mmr"]["candidates"] == 2
    # fetch=1 still holds every kept chunk: 0 (the top 1) and 1 (kept)
    one = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer=TableScorer(), stages=["mmr[lambda=0.5,fetch=1]"])
    assert one.ids == ["0", "1"] and one.meta["mmr"]["candidates"] == 2


def test_the_rule_directly() -> None:
    assert scaled(np.array([])).size == 0
    assert scaled(np.array([3.0, 3.0])).tolist() == [1.0, 1.0]  # equal scores: all 1
    assert scaled(np.array([2.0, 1.0, 0.0])).tolist() == [1.0, 0.5, 0.0]
    vecs = np.array(VECTORS)
    picked, values = mmr_order(np.array([1.0, 0.975, 0.875, 0.0]), vecs, 0.5, 4)
    assert picked == [0, 2, 3, 1] and values[:3] == [0.5, 0.4375, 0.0] and values[3] == pytest.approx(-0.01)
    assert mmr_order(np.array([1.0, 0.5]), vecs[:2], 0.5, 0) == ([], [])
    assert mmr_order(np.array([1.0, 0.5]), vecs[:2], 0.5, 5)[0] == [0, 1]  # k past the candidates: all of them
    # equal scores and equal vectors: the ranking's order
    assert mmr_order(np.ones(3), np.tile([1.0, 0.0, 0.0], (3, 1)), 0.7, 3)[0] == [0, 1, 2]


def test_edge_cases() -> None:
    # an empty selection stays empty (nothing embedded)
    scorer = TableScorer()
    empty = ctxsel.select(QUESTION, TEXTS, "top-k[k=0,min_k=0]", scorer=scorer, stages=["mmr"])
    assert empty.ids == [] and empty.meta["mmr"]["candidates"] == 0 and scorer.embedded == []
    # k as large as the pool: the same set, in MMR's order
    every = ctxsel.select(QUESTION, TEXTS, "top-k@4", scorer=TableScorer(), stages=["mmr[lambda=0.5]"])
    assert every.ids == ["0", "2", "3", "1"] and every.meta["mmr"]["swapped_in"] == []
    # equal scores: relevance ties, so the first pick is the first chunk and then the most different
    tied = Mmr(lam=0.5)
    assert tied == get_stage("mmr[lambda=0.5]")
    flat = ctxsel.select(QUESTION, TEXTS, "top-k@2", scores=[0.5] * 4, scorer=TableScorer(), stages=[tied])
    assert flat.ids == ["0", "2"]


def test_after_a_method_that_reads_no_scores() -> None:
    # full context keeps all four in input order and scores nothing: the stage ranks them once itself
    scorer = TableScorer()
    sel = ctxsel.select(QUESTION, TEXTS, "full", scorer=scorer, stages=["mmr[lambda=0.5]"])
    assert sel.ids == ["0", "2", "3", "1"] and sel.scores == [0.9, 0.8, 0.1, 0.88]
    assert sorted(scorer.embedded) == sorted(TEXTS)


def test_a_scorer_without_vectors_is_a_clear_error() -> None:
    said = r"the ranking has none: let a scorer with vectors \(dense, fast, accurate, hybrid, cascade\) score"
    with pytest.raises(InputError, match=said):
        ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer="bm25", stages=["mmr"])
    with pytest.raises(InputError, match=said):  # scores given, no scorer built: the same verdict
        ctxsel.select(QUESTION, TEXTS, "top-k@2", scores=SCORES, stages=["mmr"])


def test_the_registry_and_bad_options() -> None:
    assert "mmr" in available_stages()
    assert get_stage("mmr") == Mmr() and Mmr().spec() == "mmr" and Mmr().config() == {"lambda": 0.7, "fetch": None}
    assert get_stage("mmr[lambda=0.5,fetch=30]").spec() == "mmr[lambda=0.5,fetch=30]"
    with pytest.raises(SpecError, match=r"lambda must be >= 0 and <= 1, got 1.5"):
        get_stage("mmr[lambda=1.5]")
    with pytest.raises(SpecError, match=r"no option 'lam' \(did you mean 'lambda'\?\)"):
        get_stage("mmr[lam=0.5]")
    with pytest.raises(SpecError, match="fetch must be"):
        get_stage("mmr[fetch=0]")


def test_through_the_cli_a_scorer_without_vectors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.txt"
    doc.write_text("\n\n".join(TEXTS), encoding="utf-8")
    common = ["select", "--document", str(doc), "--question", QUESTION, "--method", "top-k@2"]
    code, _, err = run_cli(capsys, *common, "--scorer", "bm25", "--stage", "mmr[lambda=0.5]")
    assert code != 0 and "the mmr stage compares chunks by their vectors" in err and "Traceback" not in err


@pytest.mark.model
def test_through_the_cli_with_the_bundled_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.txt"
    doc.write_text("\n\n".join(TEXTS), encoding="utf-8")
    common = ["select", "--document", str(doc), "--question", QUESTION, "--method", "top-k@2", "--scorer", "dense"]
    code, out, _ = run_cli(capsys, *common, "--json")
    assert code == 0 and json.loads(out)["ids"] == ["1", "0"]  # MiniLM ranks the two Seine sentences first
    code, out, _ = run_cli(capsys, *common, "--stage", "mmr[lambda=0.5]", "--json")
    got = json.loads(out)  # their cosine is 0.92: the Bievre sentence (0.58 to both) takes the second place
    assert code == 0 and got["ids"] == ["1", "2"] and got["meta"]["stages"] == ["mmr[lambda=0.5]"]


def test_through_http(service_client: Any) -> None:
    from ctxsel.service import ServiceSettings

    body = {"question": QUESTION, "chunks": TEXTS, "method": "top-k@2", "stages": ["mmr[lambda=0.5]"]}
    client = service_client(ServiceSettings(scorer="dense"), scorer=TableScorer())
    got = client.post("/select", json=body)
    assert got.status_code == 200, got.text
    assert got.json()["ids"] == PICKS_2 and got.json()["meta"]["mmr"]["swapped_in"] == ["2"]
    bad = client.post("/select", json={**body, "stages": ["mmr[lambda=2]"]})
    assert bad.status_code == 422 and "lambda must be" in bad.json()["message"]


def test_through_langchain() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from ctxsel.integrations.langchain import CtxselCompressor

    comp = CtxselCompressor(method="top-k@2", scorer=TableScorer(), stages=["mmr[lambda=0.5]"])
    kept = comp.compress_documents([Document(page_content=t) for t in TEXTS], QUESTION)
    assert sorted(d.page_content for d in kept) == sorted(TEXTS[int(i)] for i in PICKS_2)


def test_through_llamaindex() -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from ctxsel.integrations.llamaindex import CtxselPostprocessor

    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=None) for i, t in enumerate(TEXTS)]
    out = CtxselPostprocessor(method="top-k@2", scorer=TableScorer(), stages=["mmr[lambda=0.5]"]).postprocess_nodes(
        nodes, QueryBundle(QUESTION)
    )
    assert sorted(n.node.node_id for n in out) == [f"n{i}" for i in PICKS_2]


def test_through_haystack() -> None:
    pytest.importorskip("haystack")
    from haystack import Document

    from ctxsel.integrations.haystack import CtxselSelector

    out = CtxselSelector(method="top-k@2", scorer=TableScorer(), stages=["mmr[lambda=0.5]"]).run(
        [Document(content=t) for t in TEXTS], QUESTION
    )
    assert sorted(d.content for d in out["documents"]) == sorted(TEXTS[int(i)] for i in PICKS_2)


def test_an_option_may_carry_a_key_other_than_its_field() -> None:
    import dataclasses

    from ctxsel.options import Options, build_options, declared, option

    info = declared(Mmr)["lambda"]
    assert info.attr == "lam" and "lam" not in declared(Mmr)
    built = build_options(Mmr, {"lambda": 0.25}, kind="stage", owner="mmr")
    assert built.lam == 0.25 and built.as_config() == {"lambda": 0.25, "fetch": None}
    assert built.spec() == "mmr[lambda=0.25]" and get_stage(built.spec()) == built

    @dataclasses.dataclass(frozen=True)
    class Twice(Options):
        a: int = option(1, key="b")
        b: int = option(2)

    with pytest.raises(TypeError, match="declares option 'b' twice"):
        declared(Twice)


def test_a_kept_chunk_stays_as_an_earlier_stage_left_it() -> None:
    from ctxsel.query import Query
    from ctxsel.ranking.chain import Ranking

    base = ctxsel.select(QUESTION, TEXTS, "top-k@2", scorer=TableScorer())
    pruned = Chunk(id="0", text="The Seine.", n_tokens=3)
    base.chunks[0] = pruned
    scorer = TableScorer()
    scores = scorer.score(QUESTION, [Chunk(id=str(i), text=t) for i, t in enumerate(TEXTS)])
    out = Mmr(lam=0.5).apply(base, Query(QUESTION, TEXTS, scores), scores, ranking=Ranking(scorer))
    assert out.ids == PICKS_2 and out.chunks[0] is pruned and out.chunks[1].text == TEXTS[2]
