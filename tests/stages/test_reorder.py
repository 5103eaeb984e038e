"""Lost-in-the-middle order, the stage that proves the post-cut slot: the rule on hand-worked
examples, then the same order through the Python API, the CLI, HTTP and the three framework
components, and one verdict for a bad stage on every surface."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ctxsel
from ctxsel.errors import SpecError
from ctxsel.pipeline import Pipeline
from ctxsel.selectors import get_selector
from ctxsel.stages import available_stages, get_stage, parse_stages
from ctxsel.stages.reorder import Reorder, lost_in_the_middle
from tests.support.cli import run_cli

QUESTION = "How heavy is the meteorite?"
TEXTS = ["zero", "one", "two", "three", "four", "five"]
# ranks 1..5 are chunks 4, 2, 0, 5, 1 (chunk 3 is cut by top-k@5)
SCORES = [0.7, 0.3, 0.8, 0.1, 0.9, 0.5]
RANKED = ["4", "2", "0", "5", "1"]
LOST_IN_THE_MIDDLE = ["4", "0", "1", "5", "2"]  # ranks 1, 3, 5, 4, 2


@pytest.mark.parametrize(
    ("n", "order"),
    [(0, []), (1, [1]), (2, [1, 2]), (3, [1, 3, 2]), (4, [1, 3, 4, 2]), (5, [1, 3, 5, 4, 2]), (6, [1, 3, 5, 6, 4, 2])],
)
def test_best_first_second_best_last_and_so_on_inwards(n: int, order: list[int]) -> None:
    assert lost_in_the_middle(list(range(1, n + 1))) == order


def test_haystacks_documented_example() -> None:
    # Haystack's LostInTheMiddleRanker docstring: documents 1..5 (best first) come out 1, 3, 5, 4, 2
    assert lost_in_the_middle(["1", "2", "3", "4", "5"]) == ["1", "3", "5", "4", "2"]


def test_the_registry_and_the_spec() -> None:
    assert "reorder" in available_stages()
    assert get_stage("reorder") == Reorder() and Reorder().spec() == "reorder"
    assert parse_stages("reorder, reorder") == [Reorder(), Reorder()]
    with pytest.raises(SpecError, match=r"no option 'n'.*it takes none"):
        get_stage("reorder[n=2]")
    with pytest.raises(SpecError, match="unknown stage 'reorde' \\(did you mean 'reorder'\\?\\)"):
        get_stage("reorde")


def test_through_the_api_only_the_reading_order_changes() -> None:
    plain = ctxsel.select(QUESTION, TEXTS, "top-k@5", scores=SCORES)
    sel = ctxsel.select(QUESTION, TEXTS, "top-k@5", scores=SCORES, stages=["reorder"])
    assert plain.ids == sel.ids == RANKED  # rank order stays
    assert plain.reading_order == ["0", "1", "2", "4", "5"]  # document order without the stage
    assert sel.reading_order == LOST_IN_THE_MIDDLE
    assert sel.text(" ") == "four zero one five two"
    assert sel.meta["stages"] == ["reorder"] and "stages" not in plain.meta
    assert sel.to_dict()["reading_order"] == LOST_IN_THE_MIDDLE
    piped = Pipeline(get_selector("top-k@5"), stages=[Reorder()]).select(QUESTION, TEXTS, SCORES)
    assert piped.reading_order == LOST_IN_THE_MIDDLE


def test_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, scores = tmp_path / "doc.txt", tmp_path / "scores.json"
    doc.write_text("\n\n".join(TEXTS), encoding="utf-8")
    scores.write_text(json.dumps(SCORES), encoding="utf-8")
    common = ["select", "--document", str(doc), "--question", QUESTION, "--scores", str(scores)]
    code, out, _ = run_cli(capsys, *common, "--method", "top-k@5", "--stage", "reorder", "--json")
    assert code == 0 and json.loads(out)["reading_order"] == LOST_IN_THE_MIDDLE
    with pytest.raises(SystemExit) as bad:  # a bad flag value ends the parse: one line, exit 2
        run_cli(capsys, *common, "--stage", "reorde")
    err = capsys.readouterr().err
    assert bad.value.code == 2 and err.strip() == (
        "ctxsel select: error: --stage: unknown stage 'reorde' (did you mean 'reorder'?); available: abstain, dedup, mmr, prune, reorder, window"
    )


def test_through_http(service_client: Any) -> None:
    from ctxsel.service import ServiceSettings

    client = service_client(ServiceSettings(scorer="keywords"))
    body = {"question": QUESTION, "chunks": TEXTS, "scores": SCORES, "method": "top-k@5", "stages": ["reorder"]}
    got = client.post("/select", json=body)
    assert got.status_code == 200, got.text
    assert got.json()["ids"] == RANKED and got.json()["reading_order"] == LOST_IN_THE_MIDDLE
    bad = client.post("/select", json={**body, "stages": ["reorde"]})
    assert bad.status_code == 422 and "unknown stage 'reorde'" in bad.json()["message"]


def test_through_langchain() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from ctxsel.integrations.langchain import CtxselCompressor

    docs = [Document(page_content=t, metadata={"score": s}) for t, s in zip(TEXTS, SCORES)]
    comp = CtxselCompressor(method="top-k@5", score_key="score", stages=["reorder"])
    kept = comp.compress_documents(docs, QUESTION)
    assert [d.page_content for d in kept] == [TEXTS[int(i)] for i in LOST_IN_THE_MIDDLE]
    assert [d.metadata["ctxsel_rank"] for d in kept] == [1, 3, 5, 4, 2]


def test_through_llamaindex() -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from ctxsel.integrations.llamaindex import CtxselPostprocessor

    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=s) for i, (t, s) in enumerate(zip(TEXTS, SCORES))]
    pp = CtxselPostprocessor(method="top-k@5", use_node_scores=True, stages=["reorder"])
    out = pp.postprocess_nodes(nodes, QueryBundle(QUESTION))
    assert [n.node.node_id for n in out] == [f"n{i}" for i in LOST_IN_THE_MIDDLE]


def test_through_haystack() -> None:
    pytest.importorskip("haystack")
    from haystack import Document

    from ctxsel.integrations.haystack import CtxselSelector

    docs = [Document(content=t, score=s) for t, s in zip(TEXTS, SCORES)]
    out = CtxselSelector(method="top-k@5", use_document_scores=True, stages=["reorder"]).run(docs, QUESTION)
    assert [d.content for d in out["documents"]] == [TEXTS[int(i)] for i in LOST_IN_THE_MIDDLE]
    with pytest.raises(SpecError, match="unknown stage"):
        CtxselSelector(stages=["reorde"])


def test_through_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ctxsel.cli.main import main

    out = tmp_path / "run"
    argv = ["eval", "--dataset", "example", "--methods", "top-k@3", "--scorer", "keywords", "--no-progress"]
    assert main([*argv, "--output", str(out), "--stage", "reorder"]) == 0
    capsys.readouterr()
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert config["stages"] == ["reorder"] and rows and all("error" not in r and r["k"] == 3 for r in rows)
