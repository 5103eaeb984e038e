"""The LLM client contract: ``complete(prompt) -> Completion``.

Every LLM-using part of ctxsel (LLM selectors, the reader, Self-Route) talks
to a model through :class:`LLMClient`, so a hosted API, a local vLLM /
llama.cpp / Ollama server, an in-process model and a test fake are
interchangeable. A client takes a plain string prompt or a list of chat
messages (``[{"role": "user", "content": "..."}]``) and returns a
:class:`Completion`: the text, the token usage, and enough metadata to audit
the call.

Its errors form one family under :class:`ctxsel.errors.LLMError` (they live
in :mod:`ctxsel.errors` with every other exception). Each carries the HTTP
status (when there was one), a short excerpt of the server's reply and the
number of attempts made, and its message says what happened and how to fix
it. Catch ``LLMError`` to handle any failure; catch a subclass to handle one
kind (``LLMContextLengthError`` -> retry with fewer chunks, say).

This module uses the standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ctxsel.errors import InputError, InputTypeError, LLMContextLengthError
from ctxsel.types import LLMUsage

if TYPE_CHECKING:  # pragma: no cover
    from ctxsel.llm.constrain import ReplyFormat

#: A chat message: ``{"role": "system" | "user" | "assistant", "content": str}``.
Message = dict[str, Any]
#: What ``complete`` accepts: a plain prompt or a list of chat messages.
Prompt = str | list[Message]

#: How many characters of a server reply an error message quotes.
BODY_EXCERPT_CHARS = 500


@dataclass(slots=True)
class Completion:
    """One model reply.

    ``usage`` counts one call per successful request (retries are not calls;
    they are in ``attempts``), with the server's prompt / completion token
    counts. ``raw`` is the server's JSON reply (``{}`` where there is none).
    ``cached`` is True when the reply came from a :class:`ResponseCache`
    instead of the model; the usage is then the original call's, so a rerun
    from cache reports the same cost as the run that filled it.
    ``constrained`` is True when the reply was produced under the
    ``reply_format`` the caller asked for (a llama.cpp grammar, a server
    that honoured ``response_format``); False when none was asked for or the
    backend could not enforce it, and the caller's strict parser decides.
    ``word_probs`` answers a ``word_probs=(WORD, ...)`` call (see
    :func:`word_probabilities`): the model's probability of each word as its
    reply, renormalised over the words; None when the backend could not say.
    """

    text: str
    usage: LLMUsage = field(default_factory=LLMUsage)
    finish_reason: str | None = None
    model: str = ""
    raw: dict[str, Any] = field(default_factory=dict)
    cached: bool = False
    attempts: int = 1
    constrained: bool = False
    word_probs: dict[str, float] | None = None

    def to_dict(self, with_raw: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "text": self.text,
            "usage": {
                "calls": self.usage.calls,
                "tokens_in": self.usage.tokens_in,
                "tokens_out": self.usage.tokens_out,
                "tokens_reused": self.usage.tokens_reused,
            },
            "finish_reason": self.finish_reason,
            "model": self.model,
            "cached": self.cached,
            "attempts": self.attempts,
            "constrained": self.constrained,
        }
        if self.word_probs is not None:
            d["word_probs"] = dict(self.word_probs)
        if with_raw:
            d["raw"] = self.raw
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Completion:
        u = d.get("usage") or {}
        return cls(
            text=str(d.get("text", "")),
            usage=LLMUsage(
                int(u.get("calls", 0)),
                int(u.get("tokens_in", 0)),
                int(u.get("tokens_out", 0)),
                int(u.get("tokens_reused", 0)),
            ),
            finish_reason=d.get("finish_reason"),
            model=str(d.get("model", "")),
            raw=dict(d.get("raw") or {}),
            cached=bool(d.get("cached", False)),
            attempts=int(d.get("attempts", 1)),
            constrained=bool(d.get("constrained", False)),
            word_probs={str(k): float(v) for k, v in d["word_probs"].items()} if d.get("word_probs") else None,
        )


@runtime_checkable
class LLMClient(Protocol):
    """Anything that can complete a prompt.

    ``model_id`` names the model (and anything else that changes its output)
    for caches and result files. ``complete`` must be deterministic for
    ``temperature=0`` as far as the backend allows; ``seed`` is passed to
    backends that support it. ``reply_format`` (a
    :class:`~ctxsel.llm.constrain.ReplyFormat`) asks for a reply in that
    format: a client that can enforce it does and sets
    ``Completion.constrained``; one that cannot ignores it (reporting
    ``constrained=False``). ``reply_start`` (an optional keyword) names
    the first characters of the reply, which the prompt ends with: a client
    that renders a chat template opens the model's turn with them (the
    local clients); others read them where they are. ``extra`` holds
    backend-specific generation parameters (``top_p``...), which are sent
    as-is.
    """

    model_id: str

    def complete(
        self,
        prompt: Prompt,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        seed: int | None = None,
        reply_format: ReplyFormat | None = None,
        **extra: Any,
    ) -> Completion: ...


def normalize_prompt(prompt: Prompt) -> Prompt:
    """Check a prompt's shape and return it; raise a clear error if it is wrong."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):
        if not prompt:
            raise InputError("the prompt is an empty list of messages: pass at least one {'role', 'content'} message")
        out: list[Message] = []
        for i, m in enumerate(prompt):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise InputError(
                    f"message {i} of the prompt is {m!r}: each chat message must be a dict with 'role' and "
                    "'content', e.g. {'role': 'user', 'content': 'Question...'}"
                )
            out.append(dict(m))
        return out
    raise InputTypeError(f"prompt must be a str or a list of chat messages, got {type(prompt).__name__}")


def split_reply_start(prompt: Prompt, reply_start: str) -> tuple[Prompt, str]:
    """(the user's part, the reply's start) of a prompt that ends with ``reply_start``: what a chat model
    reads in the user's message and what opens its own turn (see :class:`LLMClient`); else (prompt, "")."""
    if reply_start and isinstance(prompt, str) and prompt.endswith(reply_start):
        return prompt[: -len(reply_start)].rstrip(), reply_start
    return prompt, ""


def complete_n(client: LLMClient, prompt: Prompt, n: int, *, seed: int | None = None, **kw: Any) -> list[Completion]:
    """``n`` sampled replies to one prompt, the prompt paid for once where the backend allows it.

    A client with its own ``complete_n`` answers in one request (an
    OpenAI-compatible server: the API's ``n``, the prompt evaluated once);
    any other gets ``n`` calls with seeds ``seed, seed + 1, ...``, which
    llama.cpp serves from its KV cache after the first (each later call
    evaluates one prompt token). ``usage`` counts the request once, on the
    first reply.
    """
    if n < 1:
        raise InputError(f"n must be >= 1, got {n}")
    own = getattr(client, "complete_n", None)
    if callable(own):
        return list(own(prompt, n, seed=seed, **kw))
    return [client.complete(prompt, seed=None if seed is None else seed + i, **kw) for i in range(n)]


def complete_many(client: LLMClient, prompts: Sequence[Prompt], **kw: Any) -> list[Completion]:
    """One reply per prompt, in order: in batches where the client has its own ``complete_many`` (the
    transformers reader on a GPU generates many prompts at once), else one ``complete`` call each."""
    own = getattr(client, "complete_many", None)
    if callable(own):
        return list(own(list(prompts), **kw))
    return [client.complete(p, **kw) for p in prompts]


def gives_word_probs(client: Any) -> bool:
    """Whether ``client`` (through cache wrappers) answers ``word_probs=`` calls: it sets
    ``gives_word_probs`` (the local llama.cpp client; an OpenAI-compatible one, from logprobs)."""
    while client is not None:
        if getattr(client, "gives_word_probs", False) is True:
            return True
        client = getattr(client, "client", None)
    return False


def word_probabilities(client: LLMClient, prompt: Prompt, words: Sequence[str], **kw: Any) -> Completion | None:
    """The model's probability of each of ``words`` as the reply to ``prompt``, renormalised over them
    (``Completion.word_probs``; its text is the likeliest word), or None when the client cannot give
    them (the caller asks for a constrained reply instead). One ``complete`` call with
    ``word_probs=tuple(words)``, so a cache wrapper caches it like any reply. The words' first tokens
    decide: the backends read the distribution of the reply's first token that tells them apart."""
    if not words or len(set(words)) != len(words):
        raise InputError(f"words must be distinct and at least one, got {list(words)!r}")
    if not gives_word_probs(client):
        return None
    return client.complete(prompt, word_probs=tuple(words), **kw)


def renormalised(mass: dict[str, float]) -> dict[str, float] | None:
    """``mass`` per word scaled to sum to 1; None when there is none."""
    total = sum(mass.values())
    if not total > 0:
        return None
    return {w: m / total for w, m in mass.items()}


def word_of(token: str, words: Sequence[str]) -> str | None:
    """The one word that ``token`` starts (case-insensitive, after spaces and quotes); None for none or two."""
    t = token.strip().strip('"').strip().upper()
    if not t:
        return None
    hits = [w for w in words if w.upper().startswith(t)]
    return hits[0] if len(hits) == 1 else None


def has_complete_many(client: Any) -> bool:
    """Whether ``client`` (through cache wrappers) generates many prompts at once."""
    while client is not None:
        if callable(getattr(type(client), "complete_many", None)) and not hasattr(client, "client"):
            return True
        client = getattr(client, "client", None)
    return False


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------


def body_excerpt(body: bytes | str | None, limit: int = BODY_EXCERPT_CHARS) -> str:
    """A short, single-line excerpt of a server reply, preferring its error message."""
    if body is None:
        return ""
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else str(body)
    text = text.strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    msg = _error_message(data)
    if msg:
        text = msg
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_message(data: Any) -> str | None:
    """The message of an error body in the OpenAI, vLLM, llama.cpp or Ollama shape."""
    if not isinstance(data, dict):
        return None
    err = data.get("error")
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return str(err["message"])
    if isinstance(err, str):  # Ollama: {"error": "..."}
        return err
    if isinstance(data.get("message"), str):  # vLLM: {"object": "error", "message": ...}
        return str(data["message"])
    if isinstance(data.get("detail"), (str, list)):  # FastAPI validation errors
        return json.dumps(data["detail"]) if isinstance(data["detail"], list) else data["detail"]
    return None


__all__ = [
    "BODY_EXCERPT_CHARS",
    "Completion",
    "LLMClient",
    "LLMUsage",
    "Message",
    "Prompt",
    "body_excerpt",
    "complete_many",
    "complete_n",
    "gives_word_probs",
    "has_complete_many",
    "normalize_prompt",
    "split_reply_start",
    "word_probabilities",
]


def check_window(n_prompt: int, max_tokens: int, n_ctx: int, model: str) -> None:
    """A local model's prompt plus its answer budget must fit its window: say so before any compute."""
    if n_prompt + max_tokens > n_ctx:
        raise LLMContextLengthError(
            f"the prompt has {n_prompt:,} tokens and {max_tokens} more are asked for, past the {n_ctx:,}-token window",
            model=model,
            hint="select fewer chunks (the reader cuts a selection to its window), or raise n_ctx",
        )
