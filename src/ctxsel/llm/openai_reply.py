"""Reading an OpenAI-compatible server's reply: the error a status means, the completion in a
2xx body, and whether a 400 refuses ``response_format``. Standard library only.
"""

from __future__ import annotations

import http.client
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ctxsel.errors import (
    LLMAuthError,
    LLMBadRequest,
    LLMContextLengthError,
    LLMError,
    LLMInvalidResponse,
    LLMNotFound,
    LLMRateLimited,
    LLMServerError,
    LLMTimeout,
)
from ctxsel.llm.base import Completion, body_excerpt, renormalised, word_of
from ctxsel.types import LLMUsage

_CONTEXT_PATTERN = re.compile(
    "|".join(
        [
            r"context_length_exceeded",  # OpenAI's error code
            r"context (?:length|window|size)",  # OpenAI, vLLM "maximum context length"; llama.cpp "context size"
            r"exceed_context_size",  # llama.cpp's error type
            r"maximum (?:input |sequence |model )?length\b.{0,60}\btokens",  # "maximum length is 4096 tokens"
            r"(?:prompt|input) is too long",
            r"too many (?:input |prompt )?tokens",
            r"tokens.{0,60}must be <=",  # TGI: "`inputs` tokens + `max_new_tokens` must be <= 4096"
        ]
    ),
    re.IGNORECASE | re.DOTALL,
)


def is_context_length_error(status: int, body: bytes | str) -> bool:
    """True for a 400/413/422 reply that says the prompt exceeded the context."""
    if status not in (400, 413, 422):
        return False
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else str(body)
    return _CONTEXT_PATTERN.search(text) is not None


_REFUSED_FORMAT = re.compile(
    r"response_format|json_schema|json schema|schema|structured output|guided|grammar|unsupported|not supported",
    re.IGNORECASE,
)


def refuses_response_format(err: LLMError) -> bool:
    """True for a 400/422 whose message points at response_format, JSON schemas or an unsupported feature."""
    if err.status_code not in (400, 422) or isinstance(err, LLMContextLengthError):
        return False
    return _REFUSED_FORMAT.search(err.body or "") is not None


def status_error(status: int, headers: Mapping[str, str], data: bytes, attempts: int, url: str, model: str) -> LLMError:
    """The error a non-2xx reply means: its class says what kind, its message quotes the body."""
    excerpt = body_excerpt(data)
    kw: dict[str, Any] = dict(status_code=status, body=excerpt, attempts=attempts, url=url, model=model)
    reason = http.client.responses.get(status, "")
    if is_context_length_error(status, data):
        return LLMContextLengthError(**kw)
    if status in (401, 403):
        return LLMAuthError(**kw)
    if status in (404, 405):
        return LLMNotFound(**kw)
    if status == 408:
        return LLMTimeout("the LLM server timed out the request (HTTP 408 Request Timeout)", **kw)
    if status == 429:
        return LLMRateLimited(**kw)
    if status == 409:
        return LLMServerError("the LLM server reported a conflict (HTTP 409), usually a transient lock", **kw)
    if status >= 500:
        return LLMServerError(f"the LLM server failed ({status} {reason})".rstrip(), **kw)
    if 300 <= status < 400:
        where = headers.get("location", "")
        return LLMError(
            f"the LLM server redirected the request to {where or 'another URL'}",
            hint="Use the final URL as base_url (http:// vs https://, a missing or extra /v1).",
            **kw,
        )
    if 400 <= status < 500:
        return LLMBadRequest(f"the LLM server rejected the request ({status} {reason})".rstrip(), **kw)
    return LLMError(f"the LLM server answered with unexpected status {status}", **kw)


def parse_completion(status: int, data: bytes, attempts: int, url: str, model: str, mode: str) -> Completion:
    """The completion in a 2xx reply (chat or completions shape), or :class:`~ctxsel.errors.LLMInvalidResponse`."""
    kw: dict[str, Any] = dict(status_code=status, attempts=attempts, url=url, model=model)
    try:
        payload = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        raise LLMInvalidResponse("the LLM server's reply is not JSON", body=body_excerpt(data, 200), **kw) from None
    if not isinstance(payload, dict):
        raise LLMInvalidResponse("the LLM server's reply is not a JSON object", body=body_excerpt(data, 200), **kw)
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        if payload.get("error") is not None:  # some servers report errors with status 200
            excerpt = body_excerpt(data)
            if is_context_length_error(400, data):
                raise LLMContextLengthError(body=excerpt, **kw)
            raise LLMInvalidResponse("the LLM server returned an error with status 200", body=excerpt, **kw)
        raise LLMInvalidResponse("the LLM server's reply has no choices", body=body_excerpt(data, 200), **kw)
    choice = choices[0]
    text: Any
    if "message" in choice and (mode == "chat" or choice.get("text") is None):
        text = (choice.get("message") or {}).get("content")
        if isinstance(text, list):  # content parts: [{"type": "text", "text": ...}, ...]
            text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    else:
        text = choice.get("text")
    if text is None:  # a tool call, a refusal, or a reasoning model that spent max_tokens thinking
        finish = choice.get("finish_reason")
        raise LLMInvalidResponse(
            f"the LLM server's reply has no text (content: null, finish_reason {finish!r})",
            hint="The model answered with no text, which is not an empty answer: a reasoning model that ran out "
            "of tokens (raise the answer's max_tokens, or turn its thinking off), a tool call or a refusal "
            "(use a plain chat model without tools).",
            body=body_excerpt(data, 200),
            **kw,
        )
    if not isinstance(text, str):
        raise LLMInvalidResponse(
            f"the LLM server's reply text is a {type(text).__name__}, not a string",
            body=body_excerpt(data, 200),
            **kw,
        )
    usage: dict[str, Any] = payload["usage"] if isinstance(payload.get("usage"), dict) else {}
    return Completion(
        text=text,
        usage=LLMUsage(
            1, _as_int(usage.get("prompt_tokens")), _as_int(usage.get("completion_tokens")), _cached_tokens(usage)
        ),
        finish_reason=choice.get("finish_reason"),
        model=str(payload.get("model") or model),
        raw=payload,
        cached=False,
        attempts=attempts,
    )


def _cached_tokens(usage: dict[str, Any]) -> int:
    """Prompt tokens the server served from its prefix cache (OpenAI's and vLLM's ``prompt_tokens_details``)."""
    details = usage.get("prompt_tokens_details")
    return _as_int(details.get("cached_tokens")) if isinstance(details, dict) else 0


def _as_int(v: Any) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0


def read_word_probs(raw: Mapping[str, Any], words: tuple[str, ...], mode: str) -> dict[str, float] | None:
    """Each word's probability from a reply's logprobs (``logprobs``/``top_logprobs`` asked for), at the
    first reply token whose alternatives start one of ``words`` (a JSON reply's ``{"verdict": "`` comes
    first); None when the server sent no logprobs or no token there starts a word."""
    choices = raw.get("choices") or []
    lp = choices[0].get("logprobs") if choices and isinstance(choices[0], Mapping) else None
    if not isinstance(lp, Mapping):
        return None
    positions: list[dict[str, float]] = []
    if mode == "chat":
        for entry in lp.get("content") or []:
            alts = entry.get("top_logprobs") or [entry]
            positions.append({str(a.get("token", "")): float(a.get("logprob", -math.inf)) for a in alts})
    else:
        positions = [{str(k): float(v) for k, v in d.items()} for d in lp.get("top_logprobs") or [] if d]
    for alts in positions:
        mass = dict.fromkeys(words, 0.0)
        for token, logprob in alts.items():
            w = word_of(token, words)
            if w is not None:
                mass[w] += math.exp(logprob)
        if any(mass.values()):
            return renormalised(mass)
    return None


__all__ = ["is_context_length_error", "parse_completion", "read_word_probs", "refuses_response_format", "status_error"]
