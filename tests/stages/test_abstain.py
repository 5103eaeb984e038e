"""Abstention: a hand-made pool that must abstain and one that must not, the features on a worked
example, the scorer it was not calibrated for, the bundled file's sha256 check, bad options, and
every surface (an abstention is an empty selection flagged with a reason, never an error)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ctxsel
from ctxsel import bundled
from ctxsel.errors import InputError, ModelError, SpecError
from ctxsel.stages import abstain as abstain_mod
from ctxsel.stages import available_stages, get_stage
from ctxsel.stages.abstain import AbstainWarning, features, known_calibrations, question_names
from tests.support.cli import run_cli

QUESTION = "What is the capital of Mongolia?"
FILLER = [
    f"Section {i}: the licensee may copy and distribute verbatim copies of the program's source code, "
    f"provided notice {i} is kept."
    for i in range(40)
]
ANSWER = "Ulaanbaatar is the capital and largest city of Mongolia."
# a flat pool of low scores (nothing stands out, no question word in it) and the same pool with the answer
FLAT = [round(float(x), 3) for x in np.random.default_rng(0).uniform(0.02, 0.12, len(FILLER))]
WITH_ANSWER = [*FILLER[:20], ANSWER, *FILLER[20:]]
WITH_SCORES = [*FLAT[:20], 0.85, *FLAT[20:]]
MINILM = "dense:all-MiniLM-L6-v2"
CASCADE = (
    "cascade:cascade(all-MiniLM-L6-v2|dense=1,bm25=0.25,fusion=minmax>nomic-v1.5|onnx-int8-v1-smooth-a0.75-f0836fbf)"
    "|head_tokens=5000|join=calibrated"
)
STAGE = f"abstain[calibration={MINILM}]"


def test_a_pool_with_nothing_relevant_abstains_with_a_reason() -> None:
    kept = ctxsel.select(QUESTION, FILLER, "adaptive-k", scores=FLAT)
    assert kept.k > 0 and not kept.abstained  # without the stage a cut always keeps something
    sel = ctxsel.select(QUESTION, FILLER, "adaptive-k", scores=FLAT, stages=[STAGE])
    assert sel.abstained and sel.ids == [] and sel.chunks == [] and sel.text() == ""
    assert sel.abstain_reason is not None and sel.abstain_reason.startswith("nothing relevant: abstention probability")
    info = sel.meta["abstain"]
    assert info["abstained"] is True and info["calibration"] == MINILM and info["dropped"] == kept.ids
    assert info["probability"] >= info["threshold"] > 0.5
    assert info["features"]["cov_top"] == 0.0 and info["features"]["names_top"] == 0.0
    assert "; abstained (nothing relevant" in sel.explanation
    out = sel.to_dict()
    assert out["abstained"] is True and out["abstain_reason"] == sel.abstain_reason and out["k"] == 0


def test_a_pool_holding_the_answer_does_not_abstain() -> None:
    plain = ctxsel.select(QUESTION, WITH_ANSWER, "adaptive-k", scores=WITH_SCORES)
    sel = ctxsel.select(QUESTION, WITH_ANSWER, "adaptive-k", scores=WITH_SCORES, stages=[STAGE])
    assert not sel.abstained and sel.abstain_reason is None and sel.ids == plain.ids and "20" in sel.ids
    info = sel.meta["abstain"]
    assert info["abstained"] is False and info["probability"] < info["threshold"]
    assert info["features"]["names_top"] == 1.0 and info["features"]["cov_top"] == 1.0
    # a threshold of 0 abstains whatever the pool holds
    assert ctxsel.select(
        QUESTION, WITH_ANSWER, "top-k@2", scores=WITH_SCORES, stages=[STAGE[:-1] + ",threshold=0]"]
    ).abstained


def test_the_features_on_a_worked_example() -> None:
    f = features(
        "Where was Ed Wood born?", ["Ed Wood was born in Poughkeepsie.", "a", "b", "c"], np.array([1.0, 0, 0, 0])
    )
    # mean 0.25, std sqrt(0.1875) = 0.433: (1 - 0.25) / 0.433 = 1.732; the 10th best is the 4th (0)
    assert f["top"] == 1.0 and f["z_top"] == pytest.approx(1.7320508) and f["gap_10"] == pytest.approx(2.3094011)
    assert f["n_out"] == 0.0  # no score is 3 std above the mean
    assert f["cov_top"] == 1.0 and f["cov_pool"] == 1.0 and f["names_top"] == 1.0
    assert question_names("Which magazine was started first Arthur's Magazine or First for Women?") == [
        "arthur's magazine",
        "first for women",
    ]
    assert question_names("Where is it?") == []  # a question's first word alone is not a name
    nan = features("q", ["x", "y"], np.array([np.nan, np.nan]))
    assert set(nan.values()) == {0.0}


def test_bm25_is_calibrated_and_used_through_the_chain() -> None:
    assert known_calibrations() == ["bm25", CASCADE, MINILM]
    none = ctxsel.select(QUESTION, FILLER, "adaptive-k", scorer="bm25", stages=["abstain"])
    assert none.abstained and none.meta["abstain"]["calibration"] == "bm25"
    found = ctxsel.select(QUESTION, WITH_ANSWER, "adaptive-k", scorer="bm25", stages=["abstain"])
    assert not found.abstained and found.ids[0] == "20"


def test_the_default_scorer_is_calibrated_and_used_when_no_scorer_is_named() -> None:
    none = ctxsel.select(QUESTION, FILLER, "adaptive-k", stages=["abstain"])
    assert none.abstained and none.meta["abstain"]["calibration"] == CASCADE
    found = ctxsel.select(QUESTION, WITH_ANSWER, "adaptive-k", stages=["abstain"])
    assert not found.abstained and found.ids[0] == "20"
    assert found.meta["abstain"]["probability"] < found.meta["abstain"]["threshold"]


def test_a_scorer_it_was_not_calibrated_for_warns_once_and_keeps_the_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(abstain_mod, "_warned", set())
    with pytest.warns(
        AbstainWarning, match=r"not calibrated for scores given with the query.*bm25, cascade:.*, dense:all-MiniLM"
    ):
        sel = ctxsel.select(QUESTION, FILLER, "top-k@3", scores=FLAT, stages=["abstain"])
    assert not sel.abstained and sel.k == 3 and "not calibrated" in sel.meta["abstain"]["note"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the second call is silent
        ctxsel.select(QUESTION, FILLER, "top-k@3", scores=FLAT, stages=["abstain"])


def test_the_registry_and_bad_options() -> None:
    assert "abstain" in available_stages()
    assert get_stage(STAGE).spec() == STAGE and get_stage(get_stage(STAGE).spec()) == get_stage(STAGE)
    with pytest.raises(
        SpecError, match=r"calibration must be one of bm25, cascade:.*, dense:all-MiniLM-L6-v2, got 'nope'"
    ):
        get_stage("abstain[calibration=nope]")
    with pytest.raises(SpecError, match="threshold"):
        get_stage("abstain[threshold=1.5]")
    with pytest.raises(SpecError, match="no option .k.; its options are: calibration, threshold"):
        get_stage("abstain[k=1]")
    with pytest.raises(InputError, match="reads the pool's scores"):
        ctxsel.select(QUESTION, FILLER, "full", stages=[STAGE])


def test_a_damaged_model_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    art = bundled.get("abstain")
    assert art.bundled and art.path is not None and bundled.verify("abstain") == art.path
    card = (art.path / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert art.digest is not None and art.digest in card and "experiments.abstention" in card
    root = tmp_path / "pkg"
    shutil.copytree(art.path, root / "data" / "abstain")
    target = root / "data" / "abstain" / "abstain.json"
    target.write_text(
        target.read_text(encoding="utf-8").replace('"threshold": 0.', '"threshold": 0.0'), encoding="utf-8"
    )
    monkeypatch.setitem(bundled.ARTEFACTS, "abstain", dataclasses.replace(art, root=root))
    abstain_mod.bundled_model.cache_clear()
    try:
        with pytest.raises(ModelError, match="sha256 mismatch|manifest says"):
            abstain_mod.bundled_model()
    finally:
        abstain_mod.bundled_model.cache_clear()


def test_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.txt"
    doc.write_text("\n\n".join(FILLER), encoding="utf-8")
    common = ["select", "--document", str(doc), "--question", QUESTION, "--scorer", "bm25", "--stage", "abstain"]
    code, out, _ = run_cli(capsys, *common, "--json")
    got = json.loads(out)
    assert code == 0 and got["abstained"] is True and got["ids"] == [] and got["abstain_reason"].startswith("nothing")
    code, out, _ = run_cli(capsys, *common)
    assert code == 0 and "kept 0 of 40 chunks" in out and "abstained: nothing relevant" in out


def test_through_http(service_client: Any) -> None:
    from ctxsel.service import ServiceSettings

    client = service_client(ServiceSettings(scorer="bm25"))
    body = {"question": QUESTION, "chunks": FILLER, "scores": FLAT, "method": "adaptive-k", "stages": [STAGE]}
    got = client.post("/select", json=body)
    assert got.status_code == 200, got.text  # an abstention is an answer, not an error
    assert got.json()["abstained"] is True and got.json()["chunks"] == [] and got.json()["abstain_reason"]
    kept = client.post("/select", json={**body, "chunks": WITH_ANSWER, "scores": WITH_SCORES})
    assert kept.status_code == 200 and kept.json()["abstained"] is False and kept.json()["ids"][0] == "20"
    bad = client.post("/select", json={**body, "stages": ["abstain[calibration=nope]"]})
    assert bad.status_code == 422 and "calibration must be one of" in bad.json()["message"]


def test_through_langchain() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from ctxsel.integrations.langchain import CtxselCompressor

    docs = [Document(page_content=t, metadata={"score": s}) for t, s in zip(FILLER, FLAT, strict=True)]
    comp = CtxselCompressor(method="adaptive-k", score_key="score", stages=[STAGE])
    assert comp.compress_documents(docs, QUESTION) == []  # not the best document as a fallback
    report = comp.last_report
    assert report is not None and report["abstained"] is True and report["abstain_reason"].startswith("nothing")
    assert report["allow_empty_fallback"] is False


def test_through_llamaindex() -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from ctxsel.integrations.llamaindex import CtxselPostprocessor

    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=s) for i, (t, s) in enumerate(zip(FILLER, FLAT))]
    post = CtxselPostprocessor(method="adaptive-k", use_node_scores=True, stages=[STAGE])
    assert post.postprocess_nodes(nodes, QueryBundle(QUESTION)) == []
    assert post.last_report is not None and post.last_report["abstained"] is True


def test_through_haystack() -> None:
    pytest.importorskip("haystack")
    from haystack import Document

    from ctxsel.integrations.haystack import CtxselSelector

    docs = [Document(content=t, score=s) for t, s in zip(FILLER, FLAT, strict=True)]
    out = CtxselSelector(method="adaptive-k", use_document_scores=True, stages=[STAGE]).run(docs, QUESTION)
    assert out["documents"] == [] and out["report"]["abstained"] is True
    found = CtxselSelector(method="adaptive-k", use_document_scores=True, stages=[STAGE]).run(
        [Document(content=t, score=s) for t, s in zip(WITH_ANSWER, WITH_SCORES, strict=True)], QUESTION
    )
    assert found["documents"][0].content == ANSWER and found["report"]["abstained"] is False


class _NoCalls:
    """An LLM client that must not be asked."""

    def complete(self, prompt: str, **kwargs: Any) -> Any:
        raise AssertionError("an abstained selection reached the LLM")


def test_the_reader_answers_nothing_without_asking_the_llm() -> None:
    from ctxsel.reader import Reader

    sel = ctxsel.select(QUESTION, FILLER, "adaptive-k", scores=FLAT, stages=[STAGE])
    reader = Reader(_NoCalls())  # type: ignore[arg-type]
    ans = reader.answer(QUESTION, sel)
    assert ans.text == "" and ans.meta == {"abstained": True, "abstain_reason": sel.abstain_reason}
    assert ans.usage.calls == 0 and ans.to_dict()["selection"]["abstained"] is True
    many = reader.answer_many([(QUESTION, sel)])
    assert len(many) == 1 and not isinstance(many[0], Exception) and many[0].text == ""
