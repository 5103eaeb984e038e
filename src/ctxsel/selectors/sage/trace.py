"""The steps of SAGE's trace, typed: what each round and the counting check record.

``Selection.trace`` stays a list of JSON objects (results rows and the HTTP response carry it
as is); SAGE builds its steps as these TypedDicts and ``ctxsel answer`` reads them back with
:func:`as_round` and :func:`as_counting`, so a renamed key is a type error at both ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

if TYPE_CHECKING:
    from typing import NotRequired


class RoundStep(TypedDict):
    """One exploration round: the keys, what they retrieved, the neighbours added, the
    verdict on whether the evidence suffices (absent in a last round, where it would change
    nothing), and the prompt tokens the round's calls had evaluated."""

    step: Literal["round"]
    round: int
    keys: list[str]
    keys_from: str  # "llm", or "question (fallback)" when no key could be read
    retrieved: list[str]
    relevance: list[int]
    neighbours: list[str]
    new_sentences: int
    importance: NotRequired[float | None]
    lambdas: NotRequired[list[float]]
    sufficient: NotRequired[bool | None]
    p_sufficient: NotRequired[float | None]  # the LLM's probability of YES, with sufficient_at
    verdict_raw: NotRequired[str | None]
    prompt_tokens: NotRequired[int]  # tokens_in - tokens_reused of the round's calls


class CountingStep(TypedDict):
    """A counting question answered by counting mentions of its target's variants."""

    step: Literal["counting"]
    variants: list[str]
    count: int
    sentences: list[str]
    used: bool


def as_round(step: Mapping[str, Any]) -> RoundStep | None:
    """``step`` as a round, or None when it is another kind of step."""
    return cast(RoundStep, step) if step.get("step") == "round" else None


def as_counting(step: Mapping[str, Any]) -> CountingStep | None:
    """``step`` as the counting check, or None when it is another kind of step."""
    return cast(CountingStep, step) if step.get("step") == "counting" else None
