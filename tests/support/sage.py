"""The scripted LLM and the hand-made document that the SAGE, contract and multiple-choice tests share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxsel.llm.base import Completion
from ctxsel.types import Chunk, LLMUsage


class ScriptedLLM:
    """Answers each prompt with ``respond(prompt, **kw)``; records every call."""

    model_id = "scripted"

    def __init__(self, respond: Callable[..., str]) -> None:
        self.respond = respond
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def complete(self, prompt: Any, **kw: Any) -> Completion:
        self.calls.append((prompt, kw))
        return Completion(self.respond(prompt, **kw), usage=LLMUsage(1, len(prompt) // 4, 3), model=self.model_id)

    def kinds(self) -> list[str]:
        return [kind_of(p) for p, _ in self.calls]


def kind_of(prompt: str) -> str:
    if "asks for a count" in prompt:
        return "targets"
    if "how many times something occurs" in prompt:
        return "is-counting"
    if "Extract proper keywords" in prompt:
        return "keys"
    if "IMPORTANCE SCORE" in prompt:
        return "sufficient"
    return "answer"


# A hand-made document: one chunk per paragraph, several sentences each.
DOC = [
    Chunk(
        "p0",
        "The harbour town of Velmora sits on a cliff. Fishermen sell eels at dawn. The market closes at noon.",
        position=0,
    ),
    Chunk(
        "p1",
        "Captain Orla Brandt founded the lighthouse guild. She trained twelve keepers. "
        "The guild meets in the old chapel.",
        position=1,
    ),
    Chunk(
        "p2",
        "The lighthouse was rebuilt in 1911 after a storm. Its lamp burns whale oil. "
        "Keepers climb 214 steps each night.",
        position=2,
    ),
    Chunk("p3", "Velmora exports salt and rope. Rope makers use hemp from the valley.", position=3),
]
