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
    # errors (their home is ctxsel.errors; the package face names them too)
    "LLMError": "ctxsel.errors",
    "LLMTimeout": "ctxsel.errors",
    "LLMConnectionError": "ctxsel.errors",
    "LLMRateLimited": "ctxsel.errors",
    "LLMServerError": "ctxsel.errors",
    "LLMBadRequest": "ctxsel.errors",
    "LLMAuthError": "ctxsel.errors",
    "LLMNotFound": "ctxsel.errors",
    "LLMContextLengthError": "ctxsel.errors",
    "LLMInvalidResponse": "ctxsel.errors",
    # HTTP client
    "OpenAICompatClient": "openai_compat",
    "parse_retry_after": "transport",
    "is_context_length_error": "openai_reply",
    "refuses_response_format": "openai_reply",
    # constrained replies
    "ReplyFormat": "constrain",
    "ReplyFormatError": "ctxsel.errors",
    "llama_grammar": "constrain",
    # cache
    "ResponseCache": "cache",
    "CachedClient": "cache",
    "cache_key": "cache",
    "default_cache_path": "cache",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from ctxsel.errors import (
        LLMAuthError,
        LLMBadRequest,
        LLMConnectionError,
        LLMContextLengthError,
        LLMError,
        LLMInvalidResponse,
        LLMNotFound,
        LLMRateLimited,
        LLMServerError,
        LLMTimeout,
        ReplyFormatError,
    )
    from ctxsel.llm.base import Completion, LLMClient, LLMUsage
    from ctxsel.llm.cache import CachedClient, ResponseCache, cache_key, default_cache_path
    from ctxsel.llm.constrain import ReplyFormat, llama_grammar
    from ctxsel.llm.openai_compat import OpenAICompatClient
    from ctxsel.llm.openai_reply import is_context_length_error, refuses_response_format
    from ctxsel.llm.transport import parse_retry_after


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxsel.llm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module if "." in module else f"ctxsel.llm.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
