"""Multiple-choice data (NovelQA / Marathon layouts), option parsing, accuracy,
and SAGE end to end through the eval runner on those fixtures."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxsel.datasets import load_dataset
from ctxsel.datasets.multiple_choice import load_marathon, load_novelqa, parse_choice, question_with_options
from ctxsel.eval.runner import evaluate
from ctxsel.grading import score_answer
from ctxsel.reader import Reader
from ctxsel.types import Chunk
from tests.support.paths import FIXTURES
from tests.support.sage import DOC, ScriptedLLM, kind_of

NOVELQA = FIXTURES / "novelqa"


def test_novelqa_layout_loads_options_in_letter_order_and_gold_letters() -> None:
    exs = load_novelqa(NOVELQA)
    assert [e.id for e in exs] == ["B01/Q0001", "B01/Q0002", "B01/Q0003"]
    first = exs[0]
    assert first.choices == ["Jory", "Orla Brandt", "The fishermen", "The mayor"]
    assert first.answers == ["B"] and first.meta["answer_index"] == 1 and first.meta["benchmark"] == "novelqa"
    assert first.meta["aspect"] == "character"
    assert (
        len(first.chunks) == 7 and first.chunks[0].text == "THE KEEPER OF VELMORA" and first.chunks[0].doc_id == "B01"
    )
    assert exs[2].answers == [] and exs[2].meta["answer_index"] is None  # withheld answer
    assert load_dataset(str(NOVELQA), limit=1)[0].id == "B01/Q0001"
    assert len(load_dataset(f"novelqa:{NOVELQA}")) == 3


def test_marathon_layout_takes_answers_as_text_or_letter() -> None:
    exs = load_dataset(f"marathon:{FIXTURES / 'marathon.jsonl'}")
    assert [e.answers for e in exs] == [["B"], ["C"]]
    assert exs[1].choices == ["six", "seven", "nine", "ten"] and exs[0].meta["type"] == "comprehension_and_reasoning"
    assert [c.text for c in exs[0].chunks][1] == "In Oslo she opened a workshop that sold blue bowls."


@pytest.mark.parametrize(
    "record, message",
    [
        ({"id": "x", "context": "t", "question": "q?", "options": ["a", "b"], "answer": "E"}, "not a letter|outside"),
        ({"id": "x", "context": "t", "question": "q?", "options": ["a", "b"], "answer": 5}, "outside the 2 options"),
        ({"id": "x", "context": "t", "question": "q?", "options": ["only"], "answer": "A"}, "at least 2 options"),
        ({"id": "x", "context": "t", "question": "q?", "options": "a|b", "answer": "A"}, "options must be a list"),
        ({"id": "x", "context": "t", "options": ["a", "b"], "answer": "A"}, "missing question"),
    ],
)
def test_bad_records_are_refused_with_their_line(tmp_path: Path, record: dict[str, Any], message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match=message) as e:
        load_marathon(path)
    assert "bad.jsonl:1" in str(e.value)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("plain.txt", "hostname\n", r"plain.txt:1: not valid JSON \(Expecting value\); a Marathon file is"),
        ("two.jsonl", '{"question": "q?"}\nnot json\n', r"two.jsonl:2: not valid JSON"),
        ("numbers.json", "[1, 2]", r"numbers.json: a Marathon file is a JSON list of question objects"),
    ],
)
def test_a_file_that_is_not_marathon_shaped_is_refused(tmp_path: Path, name: str, text: str, message: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=message):  # was json.JSONDecodeError or a TypeError: "this is a bug"
        load_marathon(tmp_path / name)


@pytest.mark.parametrize(
    ("text", "message"),
    [("not json", r"B01.json:1: not valid JSON"), ("[1, 2]", "expected NovelQA questions"), ("5", "expected NovelQA")],
)
def test_a_novelqa_question_file_of_another_shape_is_refused(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "Books").mkdir()
    (tmp_path / "Data").mkdir()
    (tmp_path / "Books" / "B01.txt").write_text("The book.")
    (tmp_path / "Data" / "B01.json").write_text(text)
    with pytest.raises(ValueError, match=message):  # was a JSONDecodeError or TypeError: "this is a bug"
        load_novelqa(tmp_path)


def test_novelqa_questions_without_their_book_are_refused(tmp_path: Path) -> None:
    (tmp_path / "Books").mkdir()
    (tmp_path / "Data").mkdir()
    (tmp_path / "Data" / "B09.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="B09.txt"):
        load_novelqa(tmp_path)


@pytest.mark.parametrize(
    "reply, index",
    [
        ("B", 1),
        (" B. Orla Brandt, because", 1),
        ("(c) the fishermen", 2),
        ("Answer: D", 3),
        ("option (b)", 1),
        ("\n\nA", 0),
        ("orla brandt founded it", 1),
        ("a dog barked", None),
        ("E.", None),
        ("I think so", None),
        ("", None),
    ],
)
def test_parse_choice(reply: str, index: int | None) -> None:
    assert parse_choice(reply, ["Jory", "Orla Brandt", "The fishermen", "The mayor"]) == index


def test_choice_accuracy_scores_the_option_named_at_the_head() -> None:
    ex = load_novelqa(NOVELQA)[0]
    assert score_answer(ex, "B. Orla Brandt")["score"] == 1.0
    assert score_answer(ex, "A") == {"score": 0.0, "kind": "choice-accuracy"}
    assert score_answer(load_novelqa(NOVELQA)[2], "C")["score"] is None
    assert question_with_options("Who?", ["x", "y"]) == "Who?\nOptions:\nA. x\nB. y"


class _NoScorer:
    name = "none"

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        return np.array([float(len(c.text)) for c in chunks])


def test_sage_end_to_end_on_novelqa_fixture_through_the_runner(tmp_path: Path) -> None:
    def respond(prompt: str, **kw: Any) -> str:
        kind = kind_of(prompt)
        if kind == "is-counting":
            return " YES" if "How many times" in prompt else " NO"
        if kind == "targets":
            return " keeper"
        if kind == "keys":
            return " lighthouse, founded, guild, rebuilt"
        if kind == "sufficient":
            return " YES"
        return " B" if "QUERY_WITH_OPTIONS: Who founded" in prompt else " C"

    llm = ScriptedLLM(respond)
    exs = load_novelqa(NOVELQA)
    summary = evaluate(
        exs,
        ["sage[voter_num=3,n_perturb=1]", "top-k@2"],
        output_dir=tmp_path,
        scorer=_NoScorer(),
        progress=False,
        reader=Reader(llm, "multiple-choice"),
    )
    rows = {
        (r["example_id"], r["method"]): r
        for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())
    }
    sage_rows = [rows[(e.id, "sage[voter_num=3,n_perturb=1]")] for e in exs]
    assert [r["answer"] for r in sage_rows] == ["B. Orla Brandt", "B. 4", "C. 1911"]
    assert [r["score"] for r in sage_rows] == [1.0, 1.0, None]
    assert sage_rows[1]["llm_calls"] == 2  # the counting question: classify, then targets; the count is exact
    assert sage_rows[0]["answer_tokens_in"] > 0 and sage_rows[0]["llm_calls"] > 5
    # the reader saw the options for the non-SAGE method too
    top = rows[(exs[0].id, "top-k@2")]
    assert top["llm_calls"] == 1 and top["answer"].startswith("B")
    assert any(
        p.startswith("QUERY_WITH_OPTIONS: Who founded the lighthouse guild?\nOptions:\nA. Jory\nB. Orla Brandt")
        for p, _ in llm.calls
    )
    assert summary["sage[voter_num=3,n_perturb=1]"]["score"] == 1.0


def test_recall_counts_a_paragraph_found_when_any_of_its_sentences_is_gathered(tmp_path: Path) -> None:
    from ctxsel.types import Example

    ex = Example("e", "Who founded the lighthouse guild?", DOC, gold_ids=["p1", "p3"], answers=["Orla Brandt"])
    llm = ScriptedLLM(
        lambda p, **kw: {"is-counting": "NO", "keys": "guild", "sufficient": "YES"}.get(kind_of(p), "Orla Brandt")
    )
    summary = evaluate(
        [ex],
        ["sage[recall_index=1,neighbor_num=0,n_perturb=0]"],
        output_dir=tmp_path,
        scorer=_NoScorer(),
        progress=False,
        reader=Reader(llm),
    )
    row = json.loads((tmp_path / "results.jsonl").read_text())
    assert row["ids"] == ["p1#s0"] and row["recall"] == 0.5 and row["precision"] == 1.0 and row["score"] == 1.0
    assert summary
