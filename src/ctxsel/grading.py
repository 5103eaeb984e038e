"""Grading an answer: one call that dispatches by the example's kind.

:func:`score_answer` is the one entry point the eval runner, ``ctxsel eval
rescore`` and LDAR's LLM reward use. It looks at the example once
(:func:`answer_kind`) and hands the answer to exactly one grader:

- ``"choice"`` (the example has options): 1 when the answer names the gold
  option at its head, else 0 (:func:`ctxsel.datasets.multiple_choice.score_choice`);
- ``"factoid"``: SubEM against any gold answer, with HotpotQA's EM and F1
  beside it (:mod:`ctxsel.metrics`);
- ``"list"`` (HoloBench-style aggregation answers): the set-overlap F1 of
  the listed items (:mod:`ctxsel.datasets.holobench.scoring`), replaced by
  the LLM judge's mean label score (:class:`ctxsel.judge.LLMJudge`) when a
  judge is given and its reply is valid.

The graders know nothing of each other: the judge only judges, SubEM only
matches strings, the overlap scorer only counts items.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from ctxsel import metrics
from ctxsel.datasets.holobench.scoring import AnswerScore, score_items
from ctxsel.datasets.holobench.scoring import score_answer as score_text_items
from ctxsel.datasets.multiple_choice import score_choice
from ctxsel.judge import LLMJudge, is_empty_answer
from ctxsel.types import Example

AnswerKind = Literal["choice", "factoid", "list"]

#: Every field :func:`score_answer` may write into a result row.
SCORE_FIELDS = ("score", "kind", "subem", "em", "f1", "overlap_f1", "overlap_recall", "judge_valid", "judge_usage")


def answer_kind(example: Example) -> AnswerKind:
    """Which grader an example's answers go to: options, list-valued (HoloBench-style data) or factoid."""
    if example.choices:
        return "choice"
    if str(example.meta.get("benchmark", "")).startswith("holobench"):
        return "list"
    return "factoid"


def score_answer(
    example: Example,
    prediction: str,
    judge: LLMJudge | None = None,
    structured: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"score", "kind", ...}`` for one answer; score None without gold answers.

    ``judge`` is used for list answers only. ``structured`` (a reader's
    ``Answer.meta["structured"]``) makes the overlap score read a list
    answer's items as they are (:func:`~ctxsel.datasets.holobench.scoring.score_items`);
    a reply that broke its format scores 0 there, counted as wrong, not
    parsed leniently.
    """
    kind = answer_kind(example)
    if kind == "choice":
        return {"score": score_choice(example, prediction), "kind": "choice-accuracy"}
    if kind == "factoid":
        return _score_factoid(example, prediction)
    return _score_list(example, prediction, judge, structured)


def _score_factoid(example: Example, prediction: str) -> dict[str, Any]:
    if not example.answers:
        return {"score": None, "kind": "none (no gold answers)"}
    scores = metrics.answer_scores(prediction, example.answers)
    return {"score": scores["subem"], "kind": "subem", **scores}


def _score_list(
    example: Example, prediction: str, judge: LLMJudge | None, structured: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The set-overlap F1, kept beside the judge's score when a judge gives one.

    An empty answer (:func:`~ctxsel.judge.is_empty_answer`) is the rubric's
    No Match for every item: it scores 0 without a judge call. An empty
    ground truth ("no rows") is not sent to the judge: the overlap rule
    scores it.
    """
    if structured is None:
        overlap = score_text_items(prediction, example.answers)
    elif structured.get("valid"):
        overlap = score_items(list(structured.get("items") or []), example.answers)
    else:
        overlap = AnswerScore(0.0, 0.0, 0.0, len(example.answers), 0, 0, 0)
    out: dict[str, Any] = {
        "score": overlap.f1,
        "kind": "set-overlap-f1",
        "overlap_f1": overlap.f1,
        "overlap_recall": overlap.recall,
    }
    if judge is None or not example.answers:
        return out
    if is_empty_answer(prediction):
        out.update(score=0.0, kind="llm-judge (empty answer: No Match without a call)")
        return out
    j = judge.judge(example.question, prediction, example.answers)
    out["judge_usage"] = {"calls": j.usage.calls, "tokens_in": j.usage.tokens_in, "tokens_out": j.usage.tokens_out}
    out["judge_valid"] = 0.0 if j.score is None else 1.0  # its mean is the judge's valid-reply rate
    if j.score is None:
        out["kind"] = f"set-overlap-f1 (judge reply invalid: {j.error})"
    else:
        out.update(score=j.score, kind="llm-judge")
    return out


__all__ = ["SCORE_FIELDS", "AnswerKind", "answer_kind", "score_answer"]
