"""Reading: send a Selection to an LLM and get an Answer with its full cost.

    from ctxsel.llm.local import LocalLlamaClient
    reader = Reader(LocalLlamaClient())                   # factoid template (paper 000, A.1.1)
    ans = reader.answer(question, ctxsel.select(question, chunks))
    ans.text, ans.usage.tokens_in, ans.seconds

A selection made by an LLM-routed method (Self-Route) already carries its
answer in ``selection.answer``; the reader then returns it without
another call. ``Answer.usage`` always holds every LLM call behind the
answer: the selector's and the reader's.

The window is a budget, not a crash. When the reader knows its model's
window (:func:`context_window`: a local client's ``n_ctx``, counted with the
model's own ``count_tokens``; an HTTP client's optional ``context_window``,
counted with cl100k; or ``Reader(window=N)``) and the prompt plus
``max_answer_tokens`` would not fit, the selection is cut before the call
(:func:`fit_to_window`): the best-ranked chunks are kept (``Selection.ids``
is rank order), the worst dropped first, and the kept ones are read in
reading order. ``Answer.selection`` is then what was read and
``Answer.meta["cut"]`` says how much was dropped. Margins, since the count
is not exactly what the model sees:

- ``TEMPLATE_MARGIN`` (64) tokens are always kept free: a chat template
  wraps the prompt in role markers and may add a system turn (ChatML's
  markers are about 10 tokens, Qwen2.5's default system prompt about 20);
- with cl100k standing in for an unknown server tokenizer, another
  ``FOREIGN_TOKENIZER_MARGIN`` (10%) of the window: cl100k counts are
  close to Qwen's and Llama 3's, and about 10-20% under smaller
  vocabularies (Gemma, Llama 2). If that is still too little, the server's
  context-length error is the row's error in an eval, never a silent cut.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ctxsel.errors import InputError, InputTypeError, LLMContextLengthError, ReplyFormatError
from ctxsel.llm.aggregation import SHAPES, aggregation_format, guess_kind
from ctxsel.llm.base import Completion, LLMClient, complete_many
from ctxsel.llm.constrain import ReplyFormat
from ctxsel.llm.prompts import FACTOID_QA, HOLOBENCH_JSON, PromptTemplate, get_template
from ctxsel.tokens import count_tokens as cl100k_tokens
from ctxsel.types import LLMUsage, Selection

#: Answer tokens per template: a short factoid, or reasoning plus a list.
DEFAULT_MAX_ANSWER_TOKENS = {
    "factoid-qa": 32,
    "self-route": 32,
    "holobench-qa": 384,
    "holobench-json": 384,
    "multiple-choice": 48,
}
#: A structured answer that is one number needs no more than this (``{"answer": 1449.31}`` is about 10).
SCALAR_ANSWER_TOKENS = 32


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
            "usage": asdict(self.usage),
            "selection": self.selection.to_dict(with_text=with_text),
            "meta": self.meta,
        }


#: Tokens always kept free in the window: what a chat template adds around the prompt.
TEMPLATE_MARGIN = 64
#: Share of the window also kept free when prompts are counted with cl100k, not the model's tokenizer.
FOREIGN_TOKENIZER_MARGIN = 0.10


@dataclass(frozen=True, slots=True)
class ContextWindow:
    """A model's window: ``size`` tokens (prompt + answer), how to count a
    prompt in them, and how many to keep free (``margin``)."""

    size: int
    count: Callable[[str], int]
    margin: int
    tokenizer: str  # "model" (the client's own count_tokens) or "cl100k"

    def prompt_budget(self, answer_tokens: int) -> int:
        """The most prompt tokens that leave room for the answer and the margin."""
        return self.size - self.margin - answer_tokens


def _inner_clients(client: Any, depth: int = 8) -> list[Any]:
    """``client`` and the clients it wraps (a CachedClient's ``.client``, and so on)."""
    out = [client]
    while depth and getattr(out[-1], "client", None) is not None and hasattr(out[-1], "complete"):
        out.append(out[-1].client)
        depth -= 1
    return out


def context_window(client: Any, window: int | None = None) -> ContextWindow | None:
    """The window a reader must fit, looking through cache wrappers; None when unknown.

    ``window`` (if given) overrides the client's own. A client with
    ``count_tokens`` (the local llama.cpp one) counts in its own vocabulary
    with :data:`TEMPLATE_MARGIN` kept free; any other counts with cl100k and
    keeps :data:`FOREIGN_TOKENIZER_MARGIN` of the window free as well.
    """
    size = window
    counter = None
    for c in _inner_clients(client):
        if size is None:
            size = getattr(c, "n_ctx", None) or getattr(c, "context_window", None)
        if counter is None and callable(getattr(c, "count_tokens", None)):
            counter = c.count_tokens
    if size is None:
        return None
    size = int(size)
    if size <= 0:
        raise InputError(f"a context window must be a positive number of tokens, got {size}")
    if counter is not None:
        return ContextWindow(size, counter, TEMPLATE_MARGIN, "model")
    return ContextWindow(size, cl100k_tokens, TEMPLATE_MARGIN + math.ceil(FOREIGN_TOKENIZER_MARGIN * size), "cl100k")


def fit_to_window(
    selection: Selection,
    render: Callable[[Selection], str],
    window: ContextWindow | None,
    answer_tokens: int,
) -> tuple[Selection, dict[str, Any] | None]:
    """``selection`` cut so that ``render(selection)`` plus the answer fits ``window``.

    Keeps the longest prefix of the rank order (``selection.ids``) whose
    prompt fits, so the worst-ranked chunks go first; ``render`` lays the
    kept chunks out as it likes (in reading order, for every caller here).
    Returns the selection unchanged and None when it fits (or the window is
    unknown); else the cut selection and a record of the cut (chunks and
    tokens before/after, in the project's cl100k count and in the window's
    own count of the prompt, plus the dropped ids). If even an empty
    context does not fit, raises :class:`LLMContextLengthError`: the
    question alone is too long, and no cut can help.
    """
    if window is None or not selection.chunks:
        return selection, None
    budget = window.prompt_budget(answer_tokens)
    full = window.count(render(selection))
    if full <= budget:
        return selection, None

    def head(k: int) -> Selection:
        return replace(
            selection,
            ids=selection.ids[:k],
            scores=selection.scores[:k],
            chunks=selection.chunks[:k],
            trace=list(selection.trace),
            meta=dict(selection.meta),
        )

    empty = window.count(render(head(0)))
    if empty > budget:
        raise LLMContextLengthError(
            f"the prompt without any context already has {empty:,} tokens; with {answer_tokens} answer tokens and a "
            f"margin of {window.margin} it cannot fit the {window.size:,}-token window",
            hint="shorten the question or the prompt template, lower the answer tokens, or use a model with a "
            "larger window",
        )
    lo, hi = 0, len(selection.chunks) - 1  # head(lo) fits, head(hi + 1) does not
    fitted = {0: empty}
    while lo < hi:
        mid = (lo + hi + 1) // 2
        fitted[mid] = window.count(render(head(mid)))
        if fitted[mid] <= budget:
            lo = mid
        else:
            hi = mid - 1
    cut = head(lo)
    info = {
        "chunks_before": selection.k,
        "chunks_after": cut.k,
        "tokens_before": selection.n_tokens,
        "tokens_after": cut.n_tokens,
        "prompt_tokens_before": full,
        "prompt_tokens_after": fitted[lo],
        "window": window.size,
        "margin": window.margin,
        "answer_tokens": answer_tokens,
        "tokenizer": window.tokenizer,
        "dropped": selection.ids[lo:],
    }
    cut.explanation = (
        f"{selection.explanation}; cut to the best {cut.k} of {selection.k} chunks "
        f"({cut.n_tokens:,} of {selection.n_tokens:,} tokens) to fit the reader's "
        f"{window.size:,}-token window"
    )
    cut.meta["cut"] = info
    return cut, info


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

    ``window`` is the model's window in tokens; None (default) takes the
    client's own (:func:`context_window`), and without one nothing is cut.

    With the ``holobench-json`` template the answer is structured
    (:mod:`ctxsel.llm.aggregation`): asked for under the reply format of the
    question's answer ``kind`` (given to :meth:`answer`, else guessed from the
    question) and parsed strictly. ``Answer.text`` is then its items, one a
    line, and ``Answer.meta["structured"]`` holds the kind, whether the reply
    was valid, and the items or the parse error; an invalid reply is kept as
    the answer text, never repaired.

    A selection the ``abstain`` stage emptied (``Selection.abstained``) gets no LLM call: its answer
    is empty, and ``Answer.meta`` holds ``abstained`` and ``abstain_reason``.
    """

    def __init__(
        self,
        client: LLMClient,
        template: PromptTemplate | str = FACTOID_QA,
        *,
        max_answer_tokens: int | None = None,
        window: int | None = None,
    ) -> None:
        if not callable(getattr(client, "complete", None)):
            raise InputTypeError(
                "a Reader needs an LLM client (an object with complete(prompt, ...), e.g. "
                f"ctxsel.llm.local.LocalLlamaClient()), got {type(client).__name__}"
            )
        self.template = get_template(template) if isinstance(template, str) else template
        self.client = for_template(client, self.template)
        self.max_answer_tokens = max_answer_tokens or DEFAULT_MAX_ANSWER_TOKENS.get(self.template.name, 64)
        self.window = context_window(client, window)

    @property
    def structured(self) -> bool:
        """True when answers are structured (the ``holobench-json`` template)."""
        return self.template.name == HOLOBENCH_JSON.name

    def prompt(self, question: str, context: str, kind: str | None = None) -> str:
        if self.structured:
            return self.template.render(question=question, context=context, shape=SHAPES[kind or guess_kind(question)])
        return self.template.render(question=question, context=context)

    def answer_tokens(self, kind: str | None = None) -> int:
        """The answer's token budget: a structured single number needs only :data:`SCALAR_ANSWER_TOKENS`."""
        if self.structured and kind == "scalar":
            return min(self.max_answer_tokens, SCALAR_ANSWER_TOKENS)
        return self.max_answer_tokens

    def fit(
        self, question: str, selection: Selection, kind: str | None = None
    ) -> tuple[Selection, dict[str, Any] | None]:
        """The selection cut to this reader's window (see :func:`fit_to_window`)."""
        return fit_to_window(
            selection,
            lambda s: self.prompt(question, format_context(s), kind),
            self.window,
            self.answer_tokens(kind),
        )

    def answer(self, question: str, selection: Selection, *, kind: str | None = None) -> Answer:
        routed = _routed(selection)
        if routed is not None:  # an LLM-routed selector answered already
            return routed
        if selection.abstained:
            return self._abstained(selection)
        t0 = time.perf_counter()
        if self.structured:
            kind = kind or guess_kind(question)
        selection, cut = self.fit(question, selection, kind)
        reply = self.client.complete(self.prompt(question, format_context(selection), kind), **self._call_args(kind))
        return self._answer(reply, selection, cut, time.perf_counter() - t0, kind)

    def answer_many(
        self, items: Sequence[tuple[str, Selection]], kinds: Sequence[str | None] | None = None
    ) -> list[Answer | Exception]:
        """:meth:`answer` for many (question, selection) pairs, the LLM calls in one
        :func:`~ctxsel.llm.base.complete_many` (batched generation where the client has it). An item
        that fails is its own exception in the list, never the others' end; each answer's ``seconds``
        is its share of the batch's time. Structured answers differ in format and budget by kind, so
        they are read one at a time (:meth:`answer`, with ``kinds[i]`` where given)."""
        if self.structured:
            out_one: list[Answer | Exception] = []
            for i, (question, selection) in enumerate(items):
                try:
                    out_one.append(self.answer(question, selection, kind=kinds[i] if kinds else None))
                except Exception as e:
                    out_one.append(e)
            return out_one
        out: list[Answer | Exception | None] = [None] * len(items)
        todo: list[tuple[int, Selection, dict[str, Any] | None, str]] = []
        for i, (question, selection) in enumerate(items):
            try:
                out[i] = _routed(selection) or (self._abstained(selection) if selection.abstained else None)
                if out[i] is None:
                    fitted, cut = self.fit(question, selection)
                    todo.append((i, fitted, cut, self.prompt(question, format_context(fitted))))
            except Exception as e:
                out[i] = e
        t0 = time.perf_counter()
        args = self._call_args()
        try:
            replies: list[Any] = complete_many(self.client, [t[3] for t in todo], **args)
        except Exception:
            replies = []
            for t in todo:
                try:
                    replies.append(self.client.complete(t[3], **args))
                except Exception as e:
                    replies.append(e)
        share = (time.perf_counter() - t0) / max(1, len(todo))
        for (i, fitted, cut, _), reply in zip(todo, replies, strict=True):
            out[i] = reply if isinstance(reply, Exception) else self._answer(reply, fitted, cut, share)
        return [a for a in out if a is not None]

    def _abstained(self, selection: Selection) -> Answer:
        """No answer, and no LLM call, for a selection the ``abstain`` stage emptied on purpose."""
        meta = {"abstained": True, "abstain_reason": selection.abstain_reason}
        return Answer("", "", selection, selection.usage, 0.0, self.template.key, meta)

    def _format(self, kind: str | None) -> ReplyFormat | None:
        """The reply format of a structured answer of this kind (None for free text)."""
        return aggregation_format(kind) if self.structured and kind else None

    def _call_args(self, kind: str | None = None) -> dict[str, Any]:
        fmt = self._format(kind)
        return {
            "max_tokens": self.answer_tokens(kind),
            "temperature": 0.0,
            "stop": list(self.template.stop) or None,
            **cue_args(self.template),
            # only then: the calls (and cache keys) of the other templates stay as they were
            **({"reply_format": fmt} if fmt is not None else {}),
        }

    def _answer(
        self,
        reply: Completion,
        selection: Selection,
        cut: dict[str, Any] | None,
        seconds: float,
        kind: str | None = None,
    ) -> Answer:
        meta: dict[str, Any] = {"cached": reply.cached, **({"cut": cut} if cut else {})}
        text = clean_answer(reply.text, self.template)
        fmt = self._format(kind)
        if fmt is not None:
            try:  # strict whatever produced the reply: a grammar guarantees the shape, the parser the rest
                items: list[str] = fmt.parse(reply.text)
                text = "\n".join(items)
                meta["structured"] = {"kind": kind, "valid": True, "items": items}
            except ReplyFormatError as e:
                meta["structured"] = {"kind": kind, "valid": False, "error": str(e)}
        return Answer(
            text=text,
            raw=reply.text,
            selection=selection,
            usage=selection.usage + reply.usage,
            seconds=seconds,
            template=self.template.key,
            meta=meta,
        )


def _routed(selection: Selection) -> Answer | None:
    """The answer an LLM-routed selector (Self-Route) already gave, or None."""
    routed = selection.answer
    if routed is None:
        return None
    return Answer(
        text=routed.text,
        raw=routed.raw,
        selection=selection,
        usage=selection.usage,
        seconds=routed.seconds,
        template=routed.template,
        meta={
            "route": routed.route,
            **({"cut": selection.meta["cut"]} if selection.meta.get("cut") else {}),
        },
    )


def cue_args(template: PromptTemplate) -> dict[str, Any]:
    """``reply_start`` for a template with a cue (see :class:`~ctxsel.llm.prompts.PromptTemplate`), else
    nothing, so the calls (and cache keys) of templates without one stay as they were."""
    return {"reply_start": template.cue} if template.cue else {}


def for_template(client: LLMClient, template: PromptTemplate) -> LLMClient:
    """The client with ``template.key`` in its cache keys when it caches."""
    from ctxsel.llm.cache import CachedClient

    if isinstance(client, CachedClient):
        return CachedClient(client.client, client.cache, template.key, cache_sampling=client.cache_sampling)
    return client


__all__ = [
    "FOREIGN_TOKENIZER_MARGIN",
    "SCALAR_ANSWER_TOKENS",
    "TEMPLATE_MARGIN",
    "Answer",
    "ContextWindow",
    "Reader",
    "clean_answer",
    "context_window",
    "cue_args",
    "fit_to_window",
    "for_template",
    "format_context",
]
