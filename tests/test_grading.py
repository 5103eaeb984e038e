"""One grading call dispatches by the example's kind to exactly one grader."""

from __future__ import annotations

import pytest

from ctxsel.grading import answer_kind, score_answer
from ctxsel.types import Chunk, Example


def _example(**kw: object) -> Example:
    return Example(id="e", question="q?", chunks=[Chunk(id="c", text="t")], **kw)  # type: ignore[arg-type]


class _NoCalls:
    """A judge whose client must not be reached."""

    def judge(self, *a: object) -> None:
        raise AssertionError("the judge was called")


def test_the_kind_is_read_from_the_example() -> None:
    assert answer_kind(_example(choices=["x", "y"], meta={"answer_index": 0})) == "choice"
    assert answer_kind(_example(answers=["3"], meta={"benchmark": "holobench-5k"})) == "list"
    assert answer_kind(_example(answers=["Paris"])) == "factoid"
    # options win over a list benchmark's name: the reply names a letter, not items
    assert answer_kind(_example(choices=["x"], meta={"benchmark": "holobench"})) == "choice"


def test_factoid_answers_get_subem_em_and_f1_and_never_the_judge() -> None:
    s = score_answer(_example(answers=["Paris"]), "It is Paris, France.", _NoCalls())  # type: ignore[arg-type]
    assert s == {"score": 1.0, "kind": "subem", "subem": 1.0, "em": 0.0, "f1": pytest.approx(0.4)}
    assert score_answer(_example(), "Paris") == {"score": None, "kind": "none (no gold answers)"}


def test_choice_answers_are_scored_by_the_letter() -> None:
    ex = _example(choices=["Oslo", "Bergen"], meta={"answer_index": 1})
    assert score_answer(ex, "B. Bergen", _NoCalls()) == {"score": 1.0, "kind": "choice-accuracy"}  # type: ignore[arg-type]
    assert score_answer(ex, "A")["score"] == 0.0


def test_list_answers_get_the_overlap_without_a_judge_and_no_call_for_an_empty_answer() -> None:
    ex = _example(answers=["Chicago", "Denver"], meta={"benchmark": "holobench"})
    s = score_answer(ex, "Answer: Chicago")
    assert (s["kind"], s["overlap_recall"], s["score"]) == ("set-overlap-f1", 0.5, pytest.approx(2 / 3))
    empty = score_answer(ex, "- **Answer:**", _NoCalls())  # type: ignore[arg-type]
    assert (empty["score"], empty["kind"]) == (0.0, "llm-judge (empty answer: No Match without a call)")
    broken = score_answer(ex, "Chicago", None, {"valid": False, "items": ["Chicago"]})
    assert broken["score"] == 0.0  # a reply that broke its format is wrong, not parsed leniently
    assert score_answer(ex, "x", None, {"valid": True, "items": ["Chicago", "Denver"]})["score"] == 1.0


def test_the_judge_module_no_longer_grades() -> None:
    import ctxsel.judge as judge

    assert not hasattr(judge, "score_answer") and not hasattr(judge, "is_aggregation")
