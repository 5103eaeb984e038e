"""Structured answers to aggregation questions: one reply format per answer kind.

A free-text aggregation answer (reasoning, then an ``Answer:`` line) has to be
read back by a lexical scorer that guesses where items start and end. A
structured answer is asked for under a JSON schema (a llama.cpp grammar, a
server's ``response_format``), parsed strictly, and its items go to the
set-overlap scorer as they are:

- ``scalar`` (a count, a maximum, an average): ``{"answer": 93}``;
- ``list`` (one column): ``{"answer": ["AUS", "BOS"]}``, ``[]`` for no rows;
- ``pairs`` (a GROUP BY): ``{"answer": [{"key": "EWR", "value": 9.97}]}``,
  rendered ``"EWR: 9.97"``, the shape of the ground truth.

The kind comes from the data where it says (HoloBench-style examples record
it in ``meta["answer"]["kind"]``) and is otherwise guessed from the question
(:func:`guess_kind`). No reasoning field: a 1.5B reader's reasoning did not
lead it to correct aggregates in free text, and it costs hundreds of tokens.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from ctxsel.errors import InputError, ReplyFormatError
from ctxsel.llm.constrain import ReplyFormat

AnswerKind = Literal["scalar", "list", "pairs"]
KINDS: tuple[AnswerKind, ...] = ("scalar", "list", "pairs")

#: Longest item a list or pairs answer may hold (characters): names of airports, airlines, countries.
MAX_ITEM_CHARS = 64

#: What the prompt tells the model to write, per kind (the grammar then holds it to the shape). No example
#: values: a small reader (the bundled 1.5B) copies ``{"key": "name", "value": 123.45}`` as its answer.
SHAPES: dict[str, str] = {
    "scalar": 'one JSON object whose "answer" is the single number that answers the question, computed from the '
    "sentences",
    "list": 'one JSON object whose "answer" is the list of every item that answers the question, each written as '
    "in the sentences (an empty list when no item does)",
    "pairs": 'one JSON object whose "answer" is a list with one object per group the question asks about: its '
    '"key" the group\'s name as written in the sentences, its "value" the number the question asks for that group '
    "(an empty list when no group does)",
}

_STRING = {"type": "string", "minLength": 1, "maxLength": MAX_ITEM_CHARS}
_SCHEMAS: dict[str, dict[str, Any]] = {
    "scalar": {"type": "number"},
    "list": {"type": "array", "items": _STRING},
    "pairs": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"key": _STRING, "value": {"type": "number"}},
            "required": ["key", "value"],
            "additionalProperties": False,
        },
    },
}


def format_number(value: float) -> str:
    """A number as the ground truth writes it: integers without a point, others without trailing zeros."""
    if not math.isfinite(value):
        raise ReplyFormatError(f"the number {value} is not finite")
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _items(kind: str, obj: dict[str, Any]) -> list[str]:
    value = obj["answer"]
    if kind == "scalar":
        return [format_number(value)]
    if kind == "list":
        items = [str(v).strip() for v in value]
    else:
        items = [f"{str(p['key']).strip()}: {format_number(p['value'])}" for p in value]
    if any(not it or it.startswith(":") for it in items):
        raise ReplyFormatError("an item of the answer is blank")
    return items


def aggregation_format(kind: str) -> ReplyFormat:
    """The reply format of ``kind``; parses to the answer's items as strings (the ground truth's shape)."""
    if kind not in _SCHEMAS:
        raise InputError(f"unknown answer kind {kind!r}; choose {', '.join(KINDS)}")
    schema = {
        "type": "object",
        "properties": {"answer": _SCHEMAS[kind]},
        "required": ["answer"],
        "additionalProperties": False,
    }
    return ReplyFormat(f"aggregation-{kind}", schema, lambda obj: _items(kind, obj))


_PAIRS = re.compile(r"\b(each|per|by (?:each|every))\b", re.IGNORECASE)
_SCALAR = re.compile(
    r"^\s*(how many|in how many|what (?:is|was) the (?:average|mean|highest|lowest|longest|shortest|largest|"
    r"smallest|maximum|minimum|total|number))\b",
    re.IGNORECASE,
)


def guess_kind(question: str) -> AnswerKind:
    """The answer kind a question asks for, when the data does not say: a number or name per group
    ("... each ...", "... per ..."), a single number ("How many ...", "What was the average ..."), else a list."""
    if _PAIRS.search(question):
        return "pairs"
    if _SCALAR.match(question):
        return "scalar"
    return "list"


def answer_kind(question: str, meta: dict[str, Any] | None = None) -> AnswerKind:
    """``meta["answer"]["kind"]`` when the example records one of :data:`KINDS`, else :func:`guess_kind`."""
    recorded = ((meta or {}).get("answer") or {}).get("kind") if isinstance((meta or {}).get("answer"), dict) else None
    if recorded in KINDS:
        return recorded  # type: ignore[no-any-return]
    return guess_kind(question)


__all__ = [
    "KINDS",
    "MAX_ITEM_CHARS",
    "SHAPES",
    "AnswerKind",
    "aggregation_format",
    "answer_kind",
    "format_number",
    "guess_kind",
]
