"""The LLM-call bookkeeping the LLM methods share (SAGE, Context-Picker, Self-Route).

Each reply comes back as a named :class:`Reply` (its text, its usage, and whether it was
produced under the reply format asked for), and one select() call's calls are summed in a
:class:`Calls`, so the three methods count usage and constrained replies the same way and read a
reply with the same rule: a format's strict parser for a reply produced under it, the method's
free-text parser for any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ctxsel.llm.base import LLMClient, Prompt, complete_n, word_probabilities
from ctxsel.llm.constrain import ReplyFormat
from ctxsel.types import LLMUsage

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Reply:
    """One reply: its text, what the call cost, and whether it was produced under the reply format
    the method asked for (a llama.cpp grammar, a server that honoured ``response_format``)."""

    text: str
    usage: LLMUsage
    constrained: bool

    def parse(self, fmt: ReplyFormat | None, free: Callable[[str], T]) -> T | Any:
        """The reply's value: ``fmt``'s strict parser when the reply was produced under it, else
        ``free`` (the method's parser for a reply written freely). Raises what the parser raises
        (:class:`~ctxsel.llm.constrain.ReplyFormatError` for a strict reply that does not parse)."""
        if self.constrained and fmt is not None:
            return fmt.parse(self.text)
        return free(self.text)


@dataclass
class Calls:
    """What one select() call's LLM calls cost: the usage summed, and how many replies came under
    their reply format (the method's ``constrained_replies``)."""

    usage: LLMUsage = field(default_factory=LLMUsage)
    constrained_replies: int = 0

    def ask(
        self,
        client: LLMClient,
        prompt: Prompt,
        n: int = 1,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        seed: int | None = None,
        stop: list[str] | None = None,
        fmt: ReplyFormat | None = None,
        reply_start: str = "",
    ) -> list[Reply]:
        """``n`` replies to one prompt, the prompt read once (:func:`~ctxsel.llm.base.complete_n`),
        each counted here. ``fmt`` goes as the ``reply_format``; without one, ``reply_start`` (the
        reply's first characters, which the prompt ends with) opens the model's turn. Errors
        (a prompt past the model's window among them) are the caller's to handle."""
        extra: dict[str, Any] = {}
        if fmt is not None:
            extra["reply_format"] = fmt
        elif reply_start:
            extra["reply_start"] = reply_start
        completions = complete_n(
            client, prompt, n, max_tokens=max_tokens, temperature=temperature, stop=stop, seed=seed, **extra
        )
        out = []
        for c in completions:
            reply = Reply(c.text, c.usage, fmt is not None and c.constrained)
            self.usage = self.usage + reply.usage
            self.constrained_replies += reply.constrained
            out.append(reply)
        return out

    def ask_words(
        self,
        client: LLMClient,
        prompt: Prompt,
        words: tuple[str, ...],
        *,
        max_tokens: int,
        stop: list[str] | None = None,
        fmt: ReplyFormat | None = None,
        reply_start: str = "",
    ) -> tuple[Reply, dict[str, float] | None] | None:
        """The model's probability of each of ``words`` as its reply
        (:func:`~ctxsel.llm.base.word_probabilities`), counted here: the reply (the likeliest word, or
        the server's constrained reply) and the probabilities (None when the server sent none). None
        when the client cannot give them at all; the caller then asks for a reply."""
        extra: dict[str, Any] = {"reply_format": fmt} if fmt is not None else {"reply_start": reply_start}
        got = word_probabilities(client, prompt, words, max_tokens=max_tokens, stop=stop, **extra)
        if got is None:
            return None
        reply = Reply(got.text, got.usage, fmt is not None and got.constrained)
        self.usage = self.usage + reply.usage
        self.constrained_replies += reply.constrained
        return reply, got.word_probs


__all__ = ["Calls", "Reply"]
