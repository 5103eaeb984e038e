"""The LLM judge for list answers: one label per ground-truth item, read strictly.

:class:`LLMJudge` is the Adaptive-k paper's judge (App. A.1.3, as in
HoloBench): for each ground-truth item the judge model says "Exact Match",
"Partial Match" or "No Match", scored 1, 0.5 and 0; the answer's score is
their mean over the items. Where the paper is silent:

- an empty ground truth ("no rows") is not sent to the judge: the answer
  scores 1 if it says there is no answer, else 0 (the template's own rule);
- a judge reply that is not a JSON list with one known label per item is
  not guessed at: :func:`ctxsel.grading.score_answer` then falls back to the
  deterministic set-overlap F1 and records why in ``kind``;
- an empty answer (nothing but the template's ``Reasoning:`` / ``Answer:``
  labels and markdown) is "missing entirely", the rubric's No Match for
  every item: it scores 0 without a judge call. The bundled 1.5B judge gave
  such answers full marks (:func:`is_empty_answer`).

Constrained replies (``LLMJudge(constrained=True)``, the default): the
reply is asked for as ``{"labels": [{"id": 0, "label": ...}, ...]}``
(:func:`judge_format`): exactly one entry per ground-truth item, in order,
each id fixed and each label one of the three -- enforced by a llama.cpp
grammar or a server's ``response_format`` and read by that schema's strict
parser; a reply not produced under it is read by :func:`parse_labels`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxsel.errors import InputError, ReplyFormatError
from ctxsel.llm.base import LLMClient
from ctxsel.llm.constrain import ReplyFormat
from ctxsel.llm.prompts import JUDGE, render_judge
from ctxsel.reader import for_template
from ctxsel.types import LLMUsage

LABEL_SCORES = {"exact match": 1.0, "partial match": 0.5, "no match": 0.0}
#: The labels as the prompt writes them (the constrained reply's enum).
LABELS = ("Exact Match", "Partial Match", "No Match")
_ARRAY = re.compile(r"\[.*\]", re.DOTALL)
#: What is left of an answer once the HoloBench template's field labels, markdown and punctuation go.
_SCAFFOLD = re.compile(r"\b(?:reasoning|answer)\s*:|[\W_]+", re.IGNORECASE)


def is_empty_answer(prediction: str) -> bool:
    """True when an answer says nothing: only the template's labels (``- **Reasoning:**``), markdown and
    punctuation, or whitespace."""
    return not _SCAFFOLD.sub("", prediction)


def parse_labels(reply: str, n_items: int) -> list[float]:
    """The per-item scores in a judge reply; ValueError if it is not one label per item."""
    m = _ARRAY.search(reply)
    if not m:
        raise InputError("no JSON list in the judge's reply")
    try:
        items = json.loads(m.group(0))
    except json.JSONDecodeError as e:
        raise InputError(f"the judge's list is not valid JSON ({e.msg})") from None
    by_id: dict[int, float] = {}
    for it in items if isinstance(items, list) else []:
        if not isinstance(it, dict) or "id" not in it or "label" not in it:
            raise InputError(f"judge item {it!r} lacks an id or a label")
        label = str(it["label"]).strip().lower()
        if label not in LABEL_SCORES:
            raise InputError(f"unknown judge label {it['label']!r}")
        try:
            by_id[int(it["id"])] = LABEL_SCORES[label]
        except (TypeError, ValueError):
            raise InputError(f"judge item id {it['id']!r} is not an integer") from None
    missing = [i for i in range(n_items) if i not in by_id]
    if missing:
        raise InputError(f"the judge labelled {len(by_id)} of {n_items} ground-truth items (missing ids {missing[:5]})")
    return [by_id[i] for i in range(n_items)]


@functools.lru_cache(maxsize=64)
def judge_format(n_items: int) -> ReplyFormat:
    """``{"labels": [{"id": i, "label": <one of LABELS>} for i in 0..n-1]}``; parses to the per-item scores."""
    if n_items < 1:
        raise InputError(f"the judge labels at least one ground-truth item, got {n_items}")

    def item(i: int) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "const": i},
                "label": {"type": "string", "enum": list(LABELS)},
            },
            "required": ["id", "label"],
            "additionalProperties": False,
        }

    schema = {
        "type": "object",
        "properties": {
            "labels": {
                "type": "array",
                "prefixItems": [item(i) for i in range(n_items)],
                "items": False,
                "minItems": n_items,
                "maxItems": n_items,
            }
        },
        "required": ["labels"],
        "additionalProperties": False,
    }
    return ReplyFormat(
        "judge_labels",
        schema,
        lambda obj: [LABEL_SCORES[it["label"].lower()] for it in obj["labels"]],
        max_chars=200 + 64 * n_items,
    )


@dataclass(slots=True)
class Judgement:
    score: float | None
    raw: str
    usage: LLMUsage
    error: str | None = None


class LLMJudge:
    """The paper's LLM-as-a-judge over any client (greedy, cached if the client caches)."""

    def __init__(self, client: LLMClient, *, max_tokens: int = 512, constrained: bool = True) -> None:
        self.client = for_template(client, JUDGE)
        self.max_tokens = max_tokens
        self.constrained = bool(constrained)
        self.model_id = getattr(client, "model_id", "")
        self.replies = self.constrained_replies = 0

    def judge(self, question: str, prediction: str, gold: Sequence[str]) -> Judgement:
        fmt = judge_format(len(gold)) if self.constrained and gold else None
        extra: dict[str, Any] = {}
        max_tokens = self.max_tokens
        if fmt is not None:  # about 16 tokens per labelled item
            extra["reply_format"] = fmt
            max_tokens = max(max_tokens, 16 * len(gold) + 16)
        reply = self.client.complete(
            render_judge(question, prediction, gold), max_tokens=max_tokens, temperature=0.0, **extra
        )
        self.replies += 1
        self.constrained_replies += bool(fmt is not None and reply.constrained)
        try:
            if fmt is not None and reply.constrained:
                scores = fmt.parse(reply.text)
            else:
                scores = parse_labels(reply.text, len(gold))
        except (ReplyFormatError, ValueError) as e:
            return Judgement(None, reply.text, reply.usage, str(e))
        return Judgement(sum(scores) / len(scores), reply.text, reply.usage)


__all__ = [
    "LABELS",
    "LABEL_SCORES",
    "Judgement",
    "LLMJudge",
    "is_empty_answer",
    "judge_format",
    "parse_labels",
]
