"""Self-Route (Li et al., EMNLP 2024): let the LLM say whether retrieval suffices.

As the LDAR and Adaptive-k papers run it as a baseline: the LLM gets the
best chunks up to ``n_tokens`` (5k) with the "write unanswerable if you
cannot answer" prompt (LDAR Table 5). If it answers, that is the answer and
the selection is those chunks. If it writes "unanswerable", the selection
falls back to the full context and the reader's template (factoid by
default) asks again. Both calls are counted in ``Selection.usage``; the
answer goes into ``Selection.answer``, so a
:class:`~ctxsel.reader.Reader` does not ask a third time.

Where the papers are silent:

- "unanswerable" is matched case-insensitively anywhere in the first
  reply (a base model sometimes adds words around it);
- ``fallback_max_tokens`` caps the fallback: None (default) is the full
  context as in the paper; when the full context cannot fit the reader's
  window, set it to what fits (``self-route[fallback_max_tokens=30000]``, or
  ``ctxsel eval --self-route-fallback-tokens 30000`` for every self-route row)
  and the fallback reads the best-ranked chunks up to that many tokens, which
  the explanation says;
- when the LLM client's window is known (:func:`ctxsel.reader.context_window`),
  both calls read within it: a selection that does not fit is cut to its
  best-ranked chunks, read in reading order, and ``meta["cut"]`` records
  the cut of the call that wrote the answer (the Selection itself stays
  what the method chose). The fallback's cut is the reader's.

Constrained replies (``constrained=True``, the default): the first reply is
asked for as ``{"answer": "..."}`` (:data:`ROUTE_FORMAT`, at most
``MAX_ROUTE_ANSWER_CHARS`` characters, or 4 a token of ``max_answer_tokens``
where that is more: :func:`route_format`), enforced by a llama.cpp grammar or a
server's ``response_format``; its answer is "unanswerable" or the answer.
A constrained reply that cannot be read is routed to the long context, as
"unanswerable" is (``details.route_reply_unreadable``). Any other reply is
read as above.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxsel.errors import MissingLLMError, ReplyFormatError
from ctxsel.llm.base import LLMClient
from ctxsel.llm.constrain import ReplyFormat, answer_format
from ctxsel.llm.prompts import FACTOID_QA, SELF_ROUTE, get_template
from ctxsel.options import CommonOptions, option
from ctxsel.query import Query
from ctxsel.reader import Reader, clean_answer, fit_to_window, for_template
from ctxsel.selectors.base import Selector
from ctxsel.selectors.fixed import FullContext, TopNTokens
from ctxsel.selectors.llm_calls import Calls
from ctxsel.types import MethodDetails, RoutedAnswer, Selection, meta_key

MAX_ROUTE_ANSWER_CHARS = 128
#: Self-Route's first reply, constrained: the answer, or "unanswerable".
ROUTE_FORMAT = answer_format("self_route", max_chars=MAX_ROUTE_ANSWER_CHARS)


@dataclass(frozen=True, slots=True)
class SelfRouteDetails(MethodDetails):
    """Self-Route's routing step, beyond the route in ``Selection.answer``: why a route reply
    could not be read (it then fell back to the long context)."""

    route_reply_unreadable: str | None = field(default=None, metadata=meta_key())


def route_format(max_answer_tokens: int) -> ReplyFormat:
    """ROUTE_FORMAT, or one that holds a longer answer (about 4 characters a token: a HoloBench list)."""
    chars = max(MAX_ROUTE_ANSWER_CHARS, 4 * max_answer_tokens)
    return ROUTE_FORMAT if chars == MAX_ROUTE_ANSWER_CHARS else answer_format("self_route", max_chars=chars)


class SelfRoute(Selector):
    needs_llm = True

    @dataclass(frozen=True)
    class Options(CommonOptions):
        n_tokens: int = option(5000, minimum=0, doc="the top chunks' token budget (the paper's k chunks)")
        datatype: str = option("documents", doc="what the route prompt calls the context")
        fallback_max_tokens: int | None = option(None, minimum=1, doc="the long route's budget (default: all)")
        answer_template: str = option(FACTOID_QA.name, doc="the reader's prompt template")
        max_answer_tokens: int = option(32, minimum=1, doc="the answer's token limit")
        constrained: bool = option(True, doc="the route reply's format by construction")

    resources = ("llm",)

    def __init__(self, llm: LLMClient | None = None, *args: Any, **given: Any) -> None:
        super().__init__(*args, **given)
        n_tokens, fallback_max_tokens = self.n_tokens, self.fallback_max_tokens
        max_answer_tokens, answer_template = self.max_answer_tokens, self.answer_template
        kw = {"min_k": self.min_k, "max_tokens": self.max_tokens, "nan_policy": self.nan_policy}
        if llm is None:
            raise MissingLLMError("self-route")
        self.llm = llm
        self.retrieve = TopNTokens(n_tokens, **kw)
        self.fallback = TopNTokens(fallback_max_tokens, **kw) if fallback_max_tokens else FullContext(**kw)
        self.route_format = route_format(max_answer_tokens)
        self.route_client = for_template(llm, SELF_ROUTE)
        self.reader = Reader(llm, get_template(answer_template), max_answer_tokens=max_answer_tokens)

    def config(self) -> dict[str, Any]:
        return {
            "n_tokens": self.retrieve.n_tokens,
            "fallback_max_tokens": self.fallback_max_tokens,
            "datatype": self.datatype,
            "answer_template": self.reader.template.key,
            "max_answer_tokens": self.max_answer_tokens,
            "route_template": SELF_ROUTE.key,
            "constrained": self.constrained,
            "llm": getattr(self.llm, "model_id", ""),
            **self.common_config(),
        }

    def _select(self, query: Query, scores: np.ndarray | None) -> Selection:
        """Route, then read. ``choices`` are not read: the paper's route prompt is for open questions."""
        t0 = time.perf_counter()
        question = query.question
        rag = self.retrieve._select(query, scores)
        if not rag.chunks:
            return self._finish(rag, "empty context: nothing to route", route="none", answer="", raw="", t0=t0)
        rag_read, route_cut = fit_to_window(
            rag,
            lambda s: SELF_ROUTE.render(datatype=self.datatype, context=s.text("\n\n"), question=question),
            self.reader.window,
            self.max_answer_tokens + (24 if self.constrained else 0),
        )
        fmt = self.route_format if self.constrained else None
        calls = Calls()
        (first,) = calls.ask(
            self.route_client,
            SELF_ROUTE.render(datatype=self.datatype, context=rag_read.text("\n\n"), question=question),
            # a constrained reply carries its JSON around the answer
            max_tokens=self.max_answer_tokens + (24 if fmt is not None else 0),
            stop=list(SELF_ROUTE.stop),
            fmt=fmt,
        )
        unreadable = None
        try:
            answer = first.parse(fmt, str)
        except ReplyFormatError as e:
            answer, unreadable = "unanswerable", str(e)
        if "unanswerable" not in answer.lower():
            rag.usage = rag.usage + calls.usage
            if route_cut:
                rag.meta = {**rag.meta, "cut": route_cut}
            return self._finish(
                rag,
                f"answerable from top chunks ({rag.explanation})",
                "rag",
                clean_answer(answer, SELF_ROUTE),
                first.text,
                t0,
                first.usage.tokens_in,
            )
        long = self.fallback._select(query, scores)
        if unreadable is not None:
            long.details = SelfRouteDetails(route_reply_unreadable=unreadable)
        long.usage = long.usage + calls.usage
        reply = self.reader.answer(question, long)
        read = reply.usage.tokens_in - long.usage.tokens_in
        long.usage = reply.usage
        if reply.meta.get("cut"):
            long.meta = {**long.meta, "cut": reply.meta["cut"]}
        what = (
            "full context"
            if self.fallback_max_tokens is None
            else f"best chunks up to {self.fallback_max_tokens:,} tokens (full context does not fit the reader)"
        )
        how = "unreadable route reply" if unreadable is not None else "unanswerable"
        return self._finish(
            long,
            f"{how} from top {self.retrieve.n_tokens:,} tokens; fell back to {what}",
            "long-context",
            reply.text,
            reply.raw,
            t0,
            read,
        )

    def _finish(
        self, sel: Selection, why: str, route: str, answer: str, raw: str, t0: float, answer_tokens_in: int = 0
    ) -> Selection:
        sel.method = self.name
        sel.config = self.config()
        sel.explanation = why
        sel.answer = RoutedAnswer(
            answer,
            raw,
            route,
            tokens_in=answer_tokens_in,
            seconds=time.perf_counter() - t0,
            template=self.reader.template.key,
        )
        sel.trace.append({"step": "route", "route": route})
        return sel
