"""LLM clients: one protocol, an OpenAI-compatible HTTP client, a response cache.

    from ctxsel.llm import OpenAICompatClient, CachedClient, ResponseCache
    client = CachedClient(OpenAICompatClient("http://localhost:8000/v1", "my-model"), ResponseCache())
    reply = client.complete([{"role": "user", "content": "Hi"}], max_tokens=16)
    reply.text, reply.usage, reply.cached

Names load on first use, and every module here needs the standard library
only, so ``import ctxsel.llm`` costs next to nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    # base
    "Completion": "base",
    "LLMClient": "base",
    "LLMUsage": "base",
    "LLMError": "base",
    "LLMTimeout": "base",
    "LLMConnectionError": "base",
    "LLMRateLimited": "base",
    "LLMServerError": "base",
    "LLMBadRequest": "base",
    "LLMAuthError": "base",
    "LLMNotFound": "base",
    "LLMContextLengthError": "base",
    "LLMInvalidResponse": "base",
    # HTTP client
    "OpenAICompatClient": "openai_compat",
    "parse_retry_after": "openai_compat",
    "is_context_length_error": "openai_compat",
    "refuses_response_format": "openai_compat",
    # constrained replies
    "ReplyFormat": "constrain",
    "ReplyFormatError": "constrain",
    "llama_grammar": "constrain",
    # cache
    "ResponseCache": "cache",
    "CachedClient": "cache",
    "cache_key": "cache",
    "default_cache_path": "cache",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from ctxsel.llm.base import (
        Completion,
        LLMAuthError,
        LLMBadRequest,
        LLMClient,
        LLMConnectionError,
        LLMContextLengthError,
        LLMError,
        LLMInvalidResponse,
        LLMNotFound,
        LLMRateLimited,
        LLMServerError,
        LLMTimeout,
        LLMUsage,
    )
    from ctxsel.llm.cache import CachedClient, ResponseCache, cache_key, default_cache_path
    from ctxsel.llm.constrain import ReplyFormat, ReplyFormatError, llama_grammar
    from ctxsel.llm.openai_compat import (
        OpenAICompatClient,
        is_context_length_error,
        parse_retry_after,
        refuses_response_format,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxsel.llm' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ctxsel.llm.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
