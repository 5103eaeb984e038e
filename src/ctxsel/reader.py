"""Reading: send a Selection to an LLM and get an Answer with its full cost.

    from ctxsel.llm.local import LocalLlamaClient
    reader = Reader(LocalLlamaClient())                   # factoid template (paper 000, A.1.1)
    ans = reader.answer(question, ctxsel.select(question, chunks))
    ans.text, ans.usage.tokens_in, ans.seconds

A selection made by an LLM-routed method (Self-Route) already carries its
answer in ``selection.meta["answer"]``; the reader then returns it without
another call. ``Answer.usage`` always holds every LLM call behind the
answer: the selector's and the reader's.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from ctxsel.llm.base import LLMClient
from ctxsel.llm.prompts import FACTOID_QA, PromptTemplate, get_template
from ctxsel.types import LLMUsage, Selection

#: Answer tokens per template: a short factoid, or reasoning plus a list.
DEFAULT_MAX_ANSWER_TOKENS = {"factoid-qa": 32, "self-route": 32, "holobench-qa": 384, "multiple-choice": 48}


@dataclass(slots=True)
class Answer:
    text: str
    raw: str
    selection: Selection
    usage: LLMUsage
    seconds: float
    template: str
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, with_text: bool = False) -> dict[str, Any]:
        return {
            "answer": self.text,
            "raw": self.raw,
            "template": self.template,
            "seconds": round(self.seconds, 3),
            "usage": {"calls": self.usage.calls, "tokens_in": self.usage.tokens_in, "tokens_out": self.usage.tokens_out},
            "selection": self.selection.to_dict(with_text=with_text),
            "meta": self.meta,
        }


_LEAD = re.compile(r"^[\s*\-:>]+")


def clean_answer(raw: str, template: PromptTemplate) -> str:
    """The answer proper: for one-line templates the first non-empty line
    without markdown bullets or bold marks; otherwise the whole reply."""
    if template.stop != ("\n",):
        return raw.strip()
    for line in raw.splitlines():
        line = _LEAD.sub("", line).replace("**", "").strip()
        if line:
            return line
    return ""


def format_context(selection: Selection) -> str:
    """The chosen chunks in reading order, one paragraph each."""
    return selection.text("\n\n")


class Reader:
    """Answer a question from a Selection with an LLM client.

    ``template`` is a prompt template or its name (``factoid-qa``,
    ``holobench-qa``); the answer is cut at the template's stop strings.
    Calls are greedy (temperature 0) and go through the client as given:
    wrap it in a :class:`~ctxsel.llm.cache.CachedClient` to cache them (the
    template's ``name-vN`` then joins the key).
    """

    def __init__(
        self,
        client: LLMClient,
        template: PromptTemplate | str = FACTOID_QA,
        *,
        max_answer_tokens: int | None = None,
    ) -> None:
        self.template = get_template(template) if isinstance(template, str) else template
        self.client = for_template(client, self.template)
        self.max_answer_tokens = max_answer_tokens or DEFAULT_MAX_ANSWER_TOKENS.get(self.template.name, 64)

    def prompt(self, question: str, context: str) -> str:
        return self.template.render(question=question, context=context)

    def answer(self, question: str, selection: Selection) -> Answer:
        if selection.meta.get("answer") is not None:  # an LLM-routed selector answered already
            return Answer(
                text=selection.meta["answer"], raw=selection.meta.get("raw_answer", selection.meta["answer"]),
                selection=selection, usage=selection.usage, seconds=float(selection.meta.get("seconds", 0.0)),
                template=selection.meta.get("template", ""), meta={"route": selection.meta.get("route")},
            )
        t0 = time.perf_counter()
        reply = self.client.complete(
            self.prompt(question, format_context(selection)),
            max_tokens=self.max_answer_tokens,
            temperature=0.0,
            stop=list(self.template.stop) or None,
        )
        return Answer(
            text=clean_answer(reply.text, self.template),
            raw=reply.text,
            selection=selection,
            usage=selection.usage + reply.usage,
            seconds=time.perf_counter() - t0,
            template=self.template.key,
            meta={"cached": reply.cached},
        )


def for_template(client: LLMClient, template: PromptTemplate) -> LLMClient:
    """The client with ``template.key`` in its cache keys when it caches."""
    from ctxsel.llm.cache import CachedClient

    if isinstance(client, CachedClient):
        return CachedClient(client.client, client.cache, template.key, cache_sampling=client.cache_sampling)
    return client


__all__ = ["Answer", "Reader", "clean_answer", "format_context", "for_template"]
