"""The selector contract from outside the package: a toy method of each kind, registered by a
user, runs through the Python API, the CLI, the service and ``ctxsel eval``; and a
multiple-choice question's ``choices`` reach SAGE through the API, the service and each
framework integration, and come back answered."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import ctxsel
from ctxsel.cli.main import main
from ctxsel.query import Query
from ctxsel.selectors import available_methods
from ctxsel.selectors.base import Cut, ScoreCutSelector, Selector
from ctxsel.stages.base import Stage
from ctxsel.types import Selection
from tests.support.answers import answer_of
from tests.support.sage import DOC, ScriptedLLM, kind_of

# -- the two toy methods, as a user would write them ------------------------------------------


class KeepTwo(ScoreCutSelector):
    """A score-based method: one class with ``_cut``, one registration line (which names it)."""

    def _cut(self, sorted_scores: np.ndarray, sorted_tokens: np.ndarray) -> Cut:
        return Cut(min(2, len(sorted_scores)), "toy: the best two")


class Mentions(Selector):
    """An LLM-style method (no ranking): implements ``_select`` on the checked Query itself; keeps
    the chunks that mention a word of the question, or of a choice when choices are given."""

    needs_scores: ClassVar[bool] = False

    def _select(self, query: Query, scores: np.ndarray | None) -> Selection:
        chunk_list, choices = query.chunks, query.choices
        words = {w.lower().strip("?.,") for w in (list(choices) if choices else query.question.split())}
        keep = [c for c in chunk_list if words & {w.lower().strip("?.,") for w in c.text.split()}]
        return Selection(
            ids=[c.id for c in keep],
            scores=[None] * len(keep),
            chunks=keep,
            method=self.name,
            config={},
            explanation=f"toy: {len(keep)} chunks mention {sorted(words)}",
            n_candidates=len(chunk_list),
        )


@dataclasses.dataclass(frozen=True)
class DropLast(Stage):
    """A stage as a user would write it: drop the ``n`` worst-ranked kept chunks (a frozen
    dataclass of its options, one registration line)."""

    n: int = 1

    def apply(self, selection: Selection, query: Query, scores: np.ndarray | None, *, ranking: Any = None) -> Selection:
        keep = max(0, selection.k - self.n)
        selection.ids, selection.scores, selection.chunks = (
            selection.ids[:keep],
            selection.scores[:keep],
            selection.chunks[:keep],
        )
        selection.explanation += f"; toy: dropped the last {self.n}"
        return selection


@pytest.fixture(autouse=True, scope="module")
def toys() -> Any:
    ctxsel.register_method("toy-keep-two", KeepTwo, summary="the best two")
    ctxsel.register_method("toy-mentions", Mentions)
    ctxsel.register_stage("toy-drop-last", DropLast)
    yield
    from ctxsel.selectors import _REGISTRY
    from ctxsel.stages import _STAGES

    _REGISTRY.pop("toy-keep-two", None)
    _REGISTRY.pop("toy-mentions", None)
    _STAGES.pop("toy-drop-last", None)


def test_a_toy_stage_through_every_surface(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], service_client: Any
) -> None:
    scores = [0.1, 0.9, 0.5, 0.2]
    sel = ctxsel.select(QUESTION, TEXTS, "toy-keep-two", scores=scores, stages=["toy-drop-last"])
    assert sel.ids == ["1"] and sel.explanation.endswith("; toy: dropped the last 1")
    assert sel.meta["stages"] == ["toy-drop-last"]
    assert ctxsel.select(QUESTION, TEXTS, "top-k@3", scores=scores, stages=["toy-drop-last[n=2]"]).ids == ["1"]
    doc = tmp_path / "doc.txt"
    doc.write_text("\n\n".join(TEXTS), encoding="utf-8")
    argv = ["select", "--document", str(doc), "--question", QUESTION, "--scorer", "keywords", "--json"]
    assert main([*argv, "--method", "toy-keep-two", "--stage", "toy-drop-last"]) == 0
    assert json.loads(capsys.readouterr().out)["ids"] == ["1"]
    from ctxsel.service import ServiceSettings

    client = service_client(ServiceSettings(scorer="keywords"))
    body = {"question": QUESTION, "chunks": TEXTS, "method": "toy-keep-two", "scores": scores}
    got = client.post("/select", json={**body, "stages": ["toy-drop-last"]})
    assert got.status_code == 200 and got.json()["ids"] == ["1"]
    got = client.post("/select", json={**body, "stages": ["toy-drop-last[m=1]"]})
    assert got.status_code == 422 and "no option 'm'" in got.json()["message"]
    from ctxsel.integrations._core import select_positions
    from ctxsel.selectors import get_selector

    out = select_positions(QUESTION, TEXTS, get_selector("toy-keep-two"), None, scores=scores, stages=["toy-drop-last"])
    assert out.kept == [1]  # the three components share this path (tests/stages/test_reorder.py runs each)


TEXTS = ["Cats sleep all day.", "The meteorite weighs 3.2 kg.", "Dogs bark at the meteorite.", "Soup tastes hot."]
QUESTION = "How heavy is the meteorite?"


def test_registration_refuses_what_is_not_a_method() -> None:
    with pytest.raises(TypeError, match="Selector subclass"):
        ctxsel.register_method("toy-bad", dict)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="letters, digits"):
        ctxsel.register_method("toy bad", KeepTwo)
    assert "toy-keep-two" in available_methods() and "toy-bad" not in available_methods()


def test_through_the_api() -> None:
    sel = ctxsel.select(QUESTION, TEXTS, "toy-keep-two", scores=[0.1, 0.9, 0.5, 0.2])
    assert sel.ids == ["1", "2"] and sel.explanation == "toy: the best two"
    assert sel.config == {"min_k": 1, "max_tokens": None, "nan_policy": "raise"}  # the shared options, for free
    assert ctxsel.select(QUESTION, TEXTS, "toy-keep-two", scores=[0.1, 0.9, 0.5, 0.2], max_tokens=10).ids == ["1"]
    assert ctxsel.select(QUESTION, TEXTS, "toy-mentions").ids == ["1", "2"]
    assert ctxsel.select(QUESTION, TEXTS, "toy-mentions", choices=["soup", "cats"]).ids == ["0", "3"]


def test_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tmp_path / "doc.txt"
    doc.write_text("\n\n".join(TEXTS), encoding="utf-8")
    for method, expected in (("toy-keep-two", 2), ("toy-mentions", 2)):
        rc = main(
            [
                "select",
                "--document",
                str(doc),
                "--question",
                QUESTION,
                "--scorer",
                "keywords",
                "--method",
                method,
                "--json",
            ]
        )
        out = json.loads(capsys.readouterr().out)
        assert rc == 0 and out["method"] == method and out["k"] == expected
    rc = main(
        [
            "select",
            "--document",
            str(doc),
            "--question",
            QUESTION,
            "--method",
            "toy-mentions",
            "--choice",
            "soup",
            "--choice",
            "dogs",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and [c["text"] for c in out["chunks"]] == [TEXTS[2], TEXTS[3]]


def test_through_the_service(service_client: Any) -> None:
    from ctxsel.service import ServiceSettings

    client = service_client(ServiceSettings(scorer="keywords"))
    got = client.post(
        "/select",
        json={"question": QUESTION, "chunks": TEXTS, "method": "toy-keep-two", "scores": [0.1, 0.9, 0.5, 0.2]},
    )
    assert got.status_code == 200 and got.json()["ids"] == ["1", "2"]
    got = client.post(
        "/select", json={"question": QUESTION, "chunks": TEXTS, "method": "toy-mentions", "choices": ["cats"]}
    )
    assert got.status_code == 200 and got.json()["ids"] == ["0"]


def test_through_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "eval",
            "--dataset",
            "example",
            "--methods",
            "toy-keep-two,toy-mentions,top-k@2",
            "--scorer",
            "keywords",
            "--output",
            str(tmp_path / "run"),
            "--no-progress",
        ]
    )
    capsys.readouterr()
    assert rc == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    by_method: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_method.setdefault(r["method"], []).append(r)
    assert set(by_method) == {"toy-keep-two", "toy-mentions", "top-k@2"}
    assert all("error" not in r for r in rows)
    # the toy cut keeps the same two chunks top-k@2 keeps, on every question
    assert [r["k"] for r in by_method["toy-keep-two"]] == [r["k"] for r in by_method["top-k@2"]]
    assert [r["recall"] for r in by_method["toy-keep-two"]] == [r["recall"] for r in by_method["top-k@2"]]


# -- multiple choice: choices reach SAGE on every path -----------------------------------------

CHOICES = ["Orla", "Jory", "Velm"]
MC_QUESTION = "Who founded the lighthouse guild?"
MC_TEXTS = [c.text for c in DOC]


def mc_llm() -> ScriptedLLM:
    """Votes B ("Jory") when the prompt lists the options, and says so otherwise."""

    def respond(prompt: str, **kw: Any) -> str:
        kind = kind_of(prompt)
        if kind == "is-counting":
            return "NO"
        if kind == "sufficient":
            return "YES"
        if kind == "keys":
            return "lighthouse"
        return "B" if "B. Jory" in prompt else "no options seen"

    return ScriptedLLM(respond)


SAGE_SPEC = "sage[voter_num=1,n_perturb=0]"


def test_choices_through_the_api() -> None:
    sel = ctxsel.select(MC_QUESTION, DOC, SAGE_SPEC, llm=mc_llm(), choices=CHOICES)
    assert answer_of(sel).text == "B. Jory"
    assert answer_of(ctxsel.select(MC_QUESTION, DOC, SAGE_SPEC, llm=mc_llm())).text == "no options seen"


def test_choices_through_the_service(service_client: Any) -> None:
    from ctxsel.service import ServiceSettings

    client = service_client(ServiceSettings(scorer="keywords", reader=mc_llm()))
    got = client.post(
        "/select", json={"question": MC_QUESTION, "chunks": MC_TEXTS, "method": SAGE_SPEC, "choices": CHOICES}
    )
    assert got.status_code == 200, got.text
    assert got.json()["meta"]["answer"] == "B. Jory"


def test_choices_through_langchain() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from ctxsel.integrations.langchain import CtxselCompressor

    comp = CtxselCompressor(method=SAGE_SPEC, llm=mc_llm(), choices=CHOICES, scorer="keywords")
    kept = comp.compress_documents([Document(page_content=t) for t in MC_TEXTS], MC_QUESTION)
    assert kept and comp.last_report is not None and comp.last_report["answer"] == "B. Jory"


def test_choices_through_llamaindex() -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from ctxsel.integrations.llamaindex import CtxselPostprocessor

    post = CtxselPostprocessor(method=SAGE_SPEC, llm=mc_llm(), choices=CHOICES, scorer="keywords")
    kept = post.postprocess_nodes([NodeWithScore(node=TextNode(text=t)) for t in MC_TEXTS], QueryBundle(MC_QUESTION))
    assert kept and post.last_report is not None and post.last_report["answer"] == "B. Jory"


def test_choices_through_haystack() -> None:
    pytest.importorskip("haystack")
    from haystack import Document

    from ctxsel.integrations.haystack import CtxselSelector

    comp = CtxselSelector(method=SAGE_SPEC, llm=mc_llm(), scorer="keywords")
    out = comp.run(documents=[Document(content=t) for t in MC_TEXTS], query=MC_QUESTION, choices=CHOICES)
    assert out["report"]["answer"] == "B. Jory" and out["documents"]
