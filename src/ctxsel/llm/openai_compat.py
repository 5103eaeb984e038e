"""An LLM client for any OpenAI-compatible HTTP server, on the standard library.

Works with vLLM, llama.cpp's ``llama-server``, Ollama, TGI, LM Studio and
hosted APIs: point ``base_url`` at the server and name the model::

    client = OpenAICompatClient("http://localhost:8000/v1", "Qwen/Qwen2.5-7B-Instruct")
    reply = client.complete("Who wrote Hamlet?", max_tokens=32)
    reply.text, reply.usage

``base_url`` may be given with or without the ``/v1`` suffix: a bare host
(``http://localhost:11434``) gets ``/v1`` appended; a URL with a path is used
as given (``https://example.com/openai/v1``). ``mode="chat"`` POSTs chat
messages to ``{base}/chat/completions``; ``mode="completions"`` POSTs a raw
prompt to ``{base}/completions`` (no chat template: the prompt is the
model's input verbatim).

Retries follow the official ``openai-python`` client: HTTP 408, 409, 429 and
5xx, connection errors and timeouts are retried up to ``max_retries`` times
with exponential backoff and jitter, ``min(backoff_initial * 2**n,
backoff_max) * (1 - 0.25 * random())`` seconds before retry ``n`` (0, 1,
...); a ``retry-after-ms`` or ``Retry-After`` header (seconds or an HTTP
date) is obeyed when it asks for more than 0 and at most
``max_retry_after`` seconds; an ``x-should-retry: true|false`` header
overrides the status-based decision. One deliberate difference: 400, 401,
403, 404, 422 and context-length errors are never retried, whatever
``x-should-retry`` says, since repeating the same request cannot succeed.

Every attempt has a deadline of ``timeout`` seconds covering connect, send
and the whole reply (a server that trickles bytes cannot hold a call open
past it); each attempt uses its own connection, closed when the attempt
ends, so nothing leaks. The client is safe to share between threads.

A ``reply_format`` (:class:`~ctxsel.llm.constrain.ReplyFormat`) is sent as
``response_format={"type": "json_schema", "json_schema": {"name", "schema",
"strict": true}}``, which vLLM, llama.cpp's server and hosted APIs enforce;
the reply is then marked ``constrained``. A server that refuses it (HTTP
400/422 whose message names response_format, a JSON schema, or an
unsupported feature) is asked again without it, and the client remembers
the refusal (``response_format_refused``) for every later call: those
replies are marked unconstrained and the caller's strict parser decides.

One attempt and the retry policy are :mod:`ctxsel.llm.transport`; reading the
reply (the error a status means, the completion) is :mod:`ctxsel.llm.openai_reply`.

Not supported: streaming, and HTTP(S) proxies from the environment (the
client connects to ``base_url`` directly, as a local server needs).
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import ssl
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ctxsel.errors import (
    InputError,
    LLMBadRequest,
    LLMConnectionError,
    LLMError,
    LLMTimeout,
    TransportError,
)
from ctxsel.llm.base import Completion, Prompt, normalize_prompt
from ctxsel.llm.openai_reply import parse_completion, read_word_probs, refuses_response_format, status_error
from ctxsel.llm.transport import parse_retry_after, send_once, should_retry
from ctxsel.types import LLMUsage

if TYPE_CHECKING:  # pragma: no cover
    from ctxsel.llm.constrain import ReplyFormat

log = logging.getLogger("ctxsel.llm")


class OpenAICompatClient:
    """An :class:`~ctxsel.llm.base.LLMClient` for OpenAI-compatible HTTP servers.

    Parameters
    ----------
    base_url:
        The API root, e.g. ``http://localhost:8000/v1`` (vLLM),
        ``http://localhost:8080`` (llama.cpp), ``http://localhost:11434``
        (Ollama), ``https://api.openai.com/v1``.
    model:
        The model name the server expects; also the client's ``model_id``.
    api_key:
        Sent as ``Authorization: Bearer``. None: ``$OPENAI_API_KEY`` if set,
        else no key (local servers); ``""``: never send a key.
    mode:
        ``"chat"`` (``/chat/completions``, messages) or ``"completions"``
        (``/completions``, a raw string prompt).
    timeout:
        Seconds allowed per attempt for connect, send and the whole reply.
    max_retries:
        Retries after the first attempt (0 disables retrying).
    backoff_initial, backoff_max:
        Exponential backoff: ``min(backoff_initial * 2**n, backoff_max)``
        seconds, minus up to 25 % jitter.
    max_retry_after:
        Longest ``Retry-After`` obeyed; longer, zero, negative or garbage
        values fall back to the backoff.
    extra_headers:
        Added to every request (e.g. ``{"OpenAI-Organization": ...}``).
    context_window:
        The served model's window in its tokens (prompt + answer), when you
        know it (vLLM ``--max-model-len``, llama.cpp ``-c``). Optional: the
        client itself never checks it (the server does); a
        :class:`~ctxsel.reader.Reader` reads it to cut a selection that would
        not fit, counting with cl100k plus a margin, since this client does
        not know the server's tokenizer.
    sleep, rng:
        Injectable for tests: the sleep function between retries and the
        random source of the jitter.
    """

    #: answers ``word_probs=`` calls from the reply's logprobs, where the server sends them
    gives_word_probs = True

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        mode: str = "chat",
        timeout: float = 60.0,
        max_retries: int = 2,
        backoff_initial: float = 0.5,
        backoff_max: float = 8.0,
        max_retry_after: float = 60.0,
        extra_headers: Mapping[str, str] | None = None,
        *,
        context_window: int | None = None,
        sleep: Callable[[float], Any] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if context_window is not None and (
            isinstance(context_window, bool) or not isinstance(context_window, int) or context_window <= 0
        ):
            raise InputError(f"context_window must be a positive number of tokens or None, got {context_window!r}")
        if mode not in ("chat", "completions"):
            raise InputError(f"mode must be 'chat' or 'completions', got {mode!r}")
        if not isinstance(model, str) or not model:
            raise InputError("model must be a non-empty string: the model name the server serves")
        if not (isinstance(timeout, (int, float)) and timeout > 0 and math.isfinite(timeout)):
            raise InputError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise InputError(f"max_retries must be an integer >= 0 (0 disables retries), got {max_retries!r}")
        if backoff_initial < 0 or backoff_max < 0 or max_retry_after < 0:
            raise InputError("backoff_initial, backoff_max and max_retry_after must be >= 0")
        self.model = model
        self.model_id = model
        self.mode = mode
        self.context_window = context_window
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff_initial = float(backoff_initial)
        self.backoff_max = float(backoff_max)
        self.max_retry_after = float(max_retry_after)
        self.extra_headers = dict(extra_headers or {})
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._ssl_context: ssl.SSLContext | None = None
        #: Set when the server refused ``response_format`` once: later requests go without it.
        self.response_format_refused = False
        if api_key is None:
            api_key = os.environ.get("OPENAI_API_KEY")
        self.api_key = api_key or None

        self.base_url, self._scheme, self._host, self._port, self._base_path, self._query = _parse_base_url(base_url)
        endpoint = "/chat/completions" if mode == "chat" else "/completions"
        self._path = self._base_path + endpoint + (f"?{self._query}" if self._query else "")
        self.url = f"{self.base_url}{endpoint}"

    def __repr__(self) -> str:
        return f"OpenAICompatClient(base_url={self.base_url!r}, model={self.model!r}, mode={self.mode!r})"

    def cache_identity(self) -> dict[str, Any]:
        """What besides the prompt and parameters changes this client's output (for cache keys)."""
        return {"model": self.model, "mode": self.mode}

    # -- the request ------------------------------------------------------

    def build_payload(
        self,
        prompt: Prompt,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        seed: int | None = None,
        reply_format: ReplyFormat | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The JSON body ``complete`` sends (useful to inspect or log). ``reply_start`` is not sent: a
        completions prompt ends with it anyway, and the chat API has no portable way to open the assistant's
        turn, so there it stays at the end of the user's message."""
        extra.pop("reply_start", None)
        prompt = normalize_prompt(prompt)
        if reply_format is not None and "response_format" in extra:
            raise InputError("pass either reply_format= or response_format=, not both")
        if extra.get("stream"):
            raise InputError("streaming is not supported by OpenAICompatClient: drop stream=True")
        payload: dict[str, Any] = {"model": self.model}
        if self.mode == "chat":
            payload["messages"] = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        else:
            if not isinstance(prompt, str):
                raise InputError(
                    "mode='completions' takes a plain string prompt, got chat messages: use mode='chat', "
                    "or render the messages with the model's chat template first"
                )
            payload["prompt"] = prompt
        if "max_completion_tokens" not in extra:  # newer OpenAI models take only max_completion_tokens
            payload["max_tokens"] = int(max_tokens)
        payload["temperature"] = float(temperature)
        if stop:
            payload["stop"] = list(stop)
        if seed is not None:
            payload["seed"] = int(seed)
        for k, v in extra.items():
            if k in ("model", "messages", "prompt"):
                raise InputError(f"{k!r} cannot be passed as an extra parameter; it is set by the client")
            if k == "stream":
                continue
            payload[k] = v
        if reply_format is not None:
            payload["response_format"] = reply_format.response_format()
        return payload

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
    ) -> Completion:
        """One completion; with ``reply_format``, asked for as ``response_format`` (see the class doc).
        With ``word_probs=(WORD, ...)`` the reply's logprobs are asked for too, and
        ``Completion.word_probs`` read from them (None when the server sends none: the reply's text,
        constrained where the server allows, is then the caller's answer)."""
        words = extra.pop("word_probs", None)
        if words is not None:  # the caller's own logprobs settings win
            extra = {**({"logprobs": True, "top_logprobs": 20} if self.mode == "chat" else {"logprobs": 5}), **extra}
        use_format = reply_format is not None and not self.response_format_refused
        payload = self.build_payload(
            prompt,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
            seed=seed,
            reply_format=reply_format if use_format else None,
            **extra,
        )
        try:
            out = self._post(payload)
        except LLMBadRequest as e:
            if not (use_format and refuses_response_format(e)):
                raise
            self.response_format_refused = True
            log.warning(
                "%s refused response_format (%s); sending requests without it from now on: replies are "
                "unconstrained and checked by the caller's parser",
                self.url,
                e.body or f"HTTP {e.status_code}",
            )
            payload.pop("response_format", None)
            out = self._post(payload)
            out.attempts += e.attempts
        else:
            out.constrained = use_format
        if words is not None:
            out.word_probs = read_word_probs(out.raw, tuple(words), self.mode)
        return out

    def complete_n(self, prompt: Prompt, n: int, *, seed: int | None = None, **kw: Any) -> list[Completion]:
        """``n`` samples in one request (the API's ``n``), so the server evaluates the prompt once.

        A server that ignores ``n`` (one choice back) gets the rest as single
        requests with seeds ``seed + 1, ...``. The request's usage is on the
        first reply.
        """
        first = self.complete(prompt, seed=seed, n=n, **kw) if n > 1 else self.complete(prompt, seed=seed, **kw)
        out = [first]
        for choice in (first.raw.get("choices") or [])[1:n]:
            text = (choice.get("message") or {}).get("content") if self.mode == "chat" else choice.get("text")
            out.append(
                Completion(
                    text=text if isinstance(text, str) else "",
                    usage=LLMUsage(0, 0, 0),
                    finish_reason=choice.get("finish_reason"),
                    model=first.model,
                    constrained=first.constrained,
                    attempts=0,
                )
            )
        for i in range(len(out), n):
            out.append(self.complete(prompt, seed=None if seed is None else seed + i, **kw))
        return out

    def _post(self, payload: dict[str, Any]) -> Completion:
        """POST ``payload`` with the retry policy; the parsed reply or the last error."""
        try:
            body = json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise InputError(f"the request parameters are not JSON-serialisable: {e}") from e
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "ctxsel",
            "Connection": "close",
            **self.extra_headers,
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"

        attempt = 0
        while True:
            attempt += 1
            resp_headers: dict[str, str] = {}
            try:
                if self._scheme == "https" and self._ssl_context is None:
                    self._ssl_context = ssl.create_default_context()
                status, resp_headers, data = send_once(
                    self._scheme, self._host, self._port, self._path, body, headers, self.timeout, self._ssl_context
                )
            except TransportError as t:
                cls = LLMTimeout if t.timeout else LLMConnectionError
                err: LLMError = cls(t.detail, attempts=attempt, url=self.url, model=self.model)
                err.__cause__ = t.__cause__
                retry = True
            else:
                if 200 <= status < 300:
                    return parse_completion(status, data, attempt, self.url, self.model, self.mode)
                err = status_error(status, resp_headers, data, attempt, self.url, self.model)
                retry = should_retry(status, resp_headers, err)
            if not retry or attempt > self.max_retries:
                raise err
            delay = self.retry_delay(attempt - 1, resp_headers)
            log.info(
                "LLM request to %s failed (%s); retry %d/%d in %.2f s",
                self.url,
                err.detail if err.status_code is None else f"HTTP {err.status_code}",
                attempt,
                self.max_retries,
                delay,
            )
            self._sleep(delay)

    def retry_delay(self, retries_taken: int, headers: Mapping[str, str] | None = None) -> float:
        """Seconds to wait before retry number ``retries_taken`` (0 for the first retry)."""
        retry_after = parse_retry_after(headers or {})
        if retry_after is not None and 0 < retry_after <= self.max_retry_after:
            return retry_after
        base = min(self.backoff_initial * 2.0**retries_taken, self.backoff_max)
        return max(0.0, base * (1.0 - 0.25 * self._rng.random()))


def _parse_base_url(base_url: str) -> tuple[str, str, str, int, str, str]:
    """(normalised base, scheme, host, port, path without trailing slash, query)."""
    if not isinstance(base_url, str) or not base_url.strip():
        raise InputError("base_url must be a URL such as http://localhost:8000/v1")
    raw = base_url.strip()
    if "://" not in raw:
        raise InputError(f"base_url {raw!r} has no scheme: write http://{raw} or https://{raw}")
    parts = urlsplit(raw)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise InputError(f"base_url {raw!r}: the scheme must be http or https, got {parts.scheme!r}")
    if not parts.hostname:
        raise InputError(f"base_url {raw!r} has no host")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as e:
        raise InputError(f"base_url {raw!r} has an invalid port: {e}") from None
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions"):  # a full endpoint URL was given
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    if not path:
        path = "/v1"
    host = parts.hostname
    host_for_url = f"[{host}]" if ":" in host else host
    default_port = 443 if scheme == "https" else 80
    netloc = host_for_url if port == default_port else f"{host_for_url}:{port}"
    return f"{scheme}://{netloc}{path}", scheme, host, port, path, parts.query


__all__ = ["OpenAICompatClient"]
