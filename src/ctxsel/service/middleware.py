"""Pure ASGI middleware for the service: request log and id, header limits, bearer token,
the body read (size limit, read timeout), readiness (the concurrency limit is in
:mod:`ctxsel.service.limiter`).

Each is a plain ASGI callable (no ``BaseHTTPMiddleware``). They run outermost
first, in this order::

    RequestLog -> HeaderLimit -> BearerAuth -> BodyRead -> Readiness -> ConcurrencyLimit -> the app

so every request is logged (401s, 408s, 413s, 431s and 503s included), an
unauthenticated client can neither make the server keep its body nor take a
slot, and the whole body is read, size-checked and timed before the request
asks for a concurrency slot: a client that sends its body slowly holds a
connection, never a slot. Every refusal sent before the body is read
(401, 413, 431) then reads and drops what the client still sends, within
bounds, so that a client that sends its whole body before it reads (Python's
urllib) reads the status instead of "connection reset by peer"
(:func:`refuse_and_drain`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Collection
from contextvars import ContextVar
from typing import Any

import anyio
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxsel.errors import BodyTooLarge

log = logging.getLogger("ctxsel.service")

#: a client's X-Request-ID is kept when it is 1 to 128 of these characters (see RequestLogMiddleware)
_REQUEST_ID = re.compile(r"[A-Za-z0-9._\-]{1,128}")
MAX_REQUEST_ID = 128
#: the request being served, for every log line written while it is (worker threads inherit it)
current_request_id: ContextVar[str | None] = ContextVar("ctxsel_request_id", default=None)


def check_request_id(given: str | None) -> tuple[str, str | None]:
    """(the id to use, why the client's was replaced or None).

    Kept: 1 to 128 characters, each a letter, digit, ``.``, ``_`` or ``-``
    (what tracing systems use: uuids, hex trace ids). Anything else (empty,
    longer, quoted, spaces, non-ASCII) is replaced by a fresh uuid4 hex and
    the reason goes back in ``X-Request-ID-Replaced`` and in the log line,
    so a client-chosen id can neither bloat nor forge log lines."""
    if given is None:
        return uuid.uuid4().hex, None
    if _REQUEST_ID.fullmatch(given):
        return given, None
    if not given:
        why = "empty"
    elif len(given) > MAX_REQUEST_ID:
        why = f"longer than {MAX_REQUEST_ID} characters"
    else:
        why = "has characters other than letters, digits and ._-"
    return uuid.uuid4().hex, why


def error_dict(status: int, error: str, message: str, request_id: str | None, **extra: Any) -> dict[str, Any]:
    """The JSON body of every error the service sends."""
    return {"error": error, "message": message, "status": status, "request_id": request_id, **extra}


async def send_error(
    scope: Scope,
    send: Send,
    status: int,
    error: str,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    more_body: bool = False,
) -> None:
    """Answer with the service's JSON error shape, straight from middleware
    (``more_body``: the caller ends the response later, with an empty body message)."""
    body = json.dumps(error_dict(status, error, message, request_id(scope)), ensure_ascii=False).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": more_body})


def request_id(scope: Scope) -> str | None:
    rid = scope.get("state", {}).get("request_id")
    return None if rid is None else str(rid)


class RequestLogMiddleware:
    """One JSON log line per request, a request id, and the request metrics.

    The id is the client's ``X-Request-ID`` when :func:`check_request_id`
    keeps it, else a fresh uuid4; it is echoed in the ``X-Request-ID``
    response header, in error bodies, in the request's log line
    ``{"event": "request", "method", "path", "status", "duration_ms",
    "request_id", "client", "bytes_in"}`` and in every other line logged
    while the request is served (:data:`current_request_id`).
    """

    def __init__(self, app: ASGIApp, logger: logging.Logger = log, metrics: Any = None) -> None:
        self.app = app
        self.logger = logger
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid, replaced = check_request_id(Headers(scope=scope).get("x-request-id"))
        scope.setdefault("state", {})["request_id"] = rid
        reset = current_request_id.set(rid)
        status = 500  # what the client gets if the app raises before answering
        bytes_in = 0
        t0 = time.perf_counter()

        async def counting_receive() -> Message:
            nonlocal bytes_in
            message = await receive()
            if message["type"] == "http.request":
                bytes_in += len(message.get("body", b""))
            return message

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers.append("x-request-id", rid)
                if replaced is not None:
                    headers.append("x-request-id-replaced", replaced)
            await send(message)

        try:
            await self.app(scope, counting_receive, send_with_id)
        finally:
            seconds = time.perf_counter() - t0
            if self.metrics is not None:
                self.metrics.request(scope["path"], scope["method"], status, seconds)
            if self.logger.isEnabledFor(logging.INFO):
                client = scope.get("client")
                fields = {
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status,
                    "duration_ms": round(seconds * 1000, 2),
                    "request_id": rid,
                    "client": f"{client[0]}:{client[1]}" if client else None,
                    "bytes_in": bytes_in,
                }
                if replaced is not None:
                    fields["request_id_replaced"] = replaced
                self.logger.info("request", extra={"fields": fields})
            current_request_id.reset(reset)


class BearerAuthMiddleware:
    """``Authorization: Bearer <token>`` on every path but ``public_paths``.

    The check reads headers only, before any of the body. Both sides are
    hashed (SHA-256) and compared with :func:`hmac.compare_digest`, so the
    comparison takes the same time whatever the token's length or content.
    A missing or wrong token gets 401 with ``WWW-Authenticate: Bearer``; the body the client
    still sends is drained, not read (:func:`refuse_and_drain`).
    """

    def __init__(self, app: ASGIApp, token: str, public_paths: Collection[str]) -> None:
        self.app = app
        self._digest = hashlib.sha256(token.encode("ascii")).digest()
        self.public_paths = frozenset(public_paths)

    def _authorized(self, scope: Scope) -> tuple[bool, str]:
        value = Headers(scope=scope).get("authorization")
        if value is None:
            return False, "missing bearer token: send the header 'Authorization: Bearer <token>'"
        scheme, _, credential = value.partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():
            return False, "the Authorization header must be 'Bearer <token>'"
        given = hashlib.sha256(credential.strip().encode("latin-1")).digest()
        if not hmac.compare_digest(given, self._digest):
            return False, "wrong bearer token"
        return True, ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.public_paths:
            await self.app(scope, receive, send)
            return
        ok, why = self._authorized(scope)
        if ok:
            await self.app(scope, receive, send)
            return
        challenge = 'Bearer realm="ctxsel"' + ("" if why.startswith("missing") else ', error="invalid_token"')
        await refuse_and_drain(scope, receive, send, 401, "unauthorized", why, {"WWW-Authenticate": challenge})


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
#: what a refusal sent before the body was read drops of the rest of it: at most this many bytes, and
#: only while they keep coming (a pause of DRAIN_IDLE_S ends it), for at most DRAIN_TOTAL_S in all
DRAIN_BYTES = 64 * 1024 * 1024
DRAIN_IDLE_S = 1.0
DRAIN_TOTAL_S = 30.0


async def refuse_and_drain(
    scope: Scope,
    receive: Receive | None,
    send: Send,
    status: int,
    error: str,
    message: str,
    headers: dict[str, str] | None = None,
) -> None:
    """An error answer (with ``Connection: close``) sent before the request's body was read, then,
    with ``receive``, the unread body read and dropped before the response ends and the connection
    closes (bounded by :data:`DRAIN_BYTES`, :data:`DRAIN_IDLE_S` and :data:`DRAIN_TOTAL_S`).

    A client that reads while it sends (curl, httpx) sees the answer at once and stops; one that
    sends everything first (Python's urllib) finds it waiting instead of "connection reset by
    peer", which is what closing a socket with unread data in it gives. A client that asked
    ``Expect: 100-continue`` has sent no body, so nothing is drained."""
    if Headers(scope=scope).get("expect", "").lower() == "100-continue":
        receive = None
    await send_error(
        scope, send, status, error, message, {**(headers or {}), "Connection": "close"}, more_body=receive is not None
    )
    if receive is None:
        return
    dropped = 0
    with anyio.move_on_after(DRAIN_TOTAL_S):
        while dropped <= DRAIN_BYTES:
            with anyio.move_on_after(DRAIN_IDLE_S):
                message_ = await receive()
                dropped += len(message_.get("body", b""))
                if message_["type"] != "http.request" or not message_.get("more_body"):
                    break
                continue
            break  # the client stopped sending (it read the answer)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


class HeaderLimitMiddleware:
    """431 for a request whose headers are more than ``max_headers`` or, with its target (path
    and query), more than ``max_bytes`` of names and values, before anything reads them.

    The HTTP protocol (:mod:`ctxsel.service.protocols`) has already refused a header section
    still incomplete past twice that size, so a huge header never reaches this check; this one
    is exact, and the same whatever the HTTP parser."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_headers: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_headers = max_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope.get("headers") or []
            size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
            size += sum(len(k) + len(v) for k, v in headers)
            why = header_refusal(len(headers), size, self.max_headers, self.max_bytes)
            if why is not None:
                await refuse_and_drain(scope, receive, send, 431, "headers_too_large", why)
                return
        await self.app(scope, receive, send)


def header_refusal(count: int, size: int, max_headers: int, max_bytes: int) -> str | None:
    """Why a request's headers are refused (431), or None."""
    if count > max_headers:
        return (
            f"the request has {count:,} headers; this server takes at most {max_headers:,} "
            "(its --max-headers): send fewer"
        )
    if size > max_bytes:
        return (
            f"the request's headers and target are {size:,} bytes; this server takes at most {max_bytes:,} "
            "(its --max-header-bytes): send the data in the body"
        )
    return None


class BodySizeLimitMiddleware:
    """The whole request body read before the app runs (so before a concurrency slot is taken),
    within a time and a size; the app then reads it from memory.

    - 411 for a POST with neither ``Content-Length`` nor ``Transfer-Encoding`` (an HTTP/1.0
      client's body would otherwise be read as empty: a misleading 422).
    - 413 for a body over ``max_bytes``: a ``Content-Length`` over the limit is answered before a
      byte of the body is read; a body without one (chunked), or longer than it says, is counted
      as it streams in and refused the moment it passes the limit. Either way the rest of it is
      drained (:func:`refuse_and_drain`), never kept.
    - 408 (``Connection: close``) for a body not all received within ``body_timeout_s`` seconds
      of the request's headers: a client that sends a byte a second holds its connection for
      that long, and no concurrency slot at all.
    - 503 with ``Retry-After`` when the bodies being read and waiting for a slot already hold
      ``budget_bytes``: reading before the slot must not let many connections fill the memory.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        body_timeout_s: float = 10.0,
        budget_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.body_timeout_s = body_timeout_s
        self.budget_bytes = budget_bytes
        self.buffered = 0  # bytes held by bodies read (or being read) by requests still running

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        if declared is None and scope["method"] in _BODY_METHODS and "transfer-encoding" not in headers:
            # HTTP/1.0 has no chunked bodies: without a length the server cannot tell where the body ends
            await send_error(
                scope,
                send,
                411,
                "length_required",
                f"a {scope['method']} body needs a Content-Length header (or, on HTTP/1.1, "
                "Transfer-Encoding: chunked); send the JSON body with its length",
                {"Connection": "close"},
            )
            return
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
            drain = None if int(declared) > DRAIN_BYTES else receive  # past the drain's bound: just close
            exc = BodyTooLarge(self.max_bytes, int(declared), "declared")
            await refuse_and_drain(scope, drain, send, 413, "body_too_large", exc.detail)
            return
        no_body = declared is None and "transfer-encoding" not in headers
        if no_body or (declared is not None and declared.strip() == "0"):
            await self.app(scope, receive, send)  # nothing to read first
            return
        held = 0
        try:
            parts: list[bytes] = []
            refusal: str | None = "timeout"  # what ended the read: None (the whole body came), or why not
            complete = False  # the last part came: nothing left to drain
            with anyio.move_on_after(self.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return  # the client went away while sending: nobody to answer
                    chunk = message.get("body", b"")
                    complete = not message.get("more_body")
                    held += len(chunk)
                    self.buffered += len(chunk)
                    if held > self.max_bytes:
                        refusal = "too_large"
                        break
                    if self.budget_bytes is not None and self.buffered > self.budget_bytes:
                        refusal = "budget"
                        break
                    if chunk:
                        parts.append(chunk)
                    if complete:
                        refusal = None
                        break
            if refusal == "timeout":
                await send_error(
                    scope,
                    send,
                    408,
                    "body_timeout",
                    f"the request body did not all arrive within {self.body_timeout_s:g} s of its headers "
                    f"(the server's --body-timeout; {held:,} bytes came): send the whole body at once",
                    {"Connection": "close"},
                )
                return
            drain = None if complete else receive
            if refusal == "budget":
                await refuse_and_drain(
                    scope,
                    drain,
                    send,
                    503,
                    "overloaded",
                    "the server already holds as many request bodies in memory as it keeps at once (bodies being "
                    "read, and requests waiting for a slot); retry shortly",
                    {"Retry-After": "1"},
                )
                return
            if refusal is not None:
                exc = BodyTooLarge(self.max_bytes, held, "" if complete else "so far")
                await refuse_and_drain(scope, drain, send, 413, "body_too_large", exc.detail)
                return
            body = b"".join(parts)
            del parts
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()  # after the body: the client's disconnect, when it comes

            await self.app(scope, replay, send)
        finally:
            self.buffered -= held


class ReadinessMiddleware:
    """503 with ``Retry-After`` for ``paths`` while ``refusal()`` says why the
    server cannot take work yet (its scorer is loading), before the app parses the body."""

    def __init__(self, app: ASGIApp, refusal: Callable[[], tuple[str, str] | None], paths: Collection[str]) -> None:
        self.app = app
        self.refusal = refusal
        self.paths = frozenset(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in self.paths:
            refused = self.refusal()
            if refused is not None:
                retry = "2" if refused[0] == "starting" else "30"
                await send_error(scope, send, 503, refused[0], refused[1], {"Retry-After": retry})
                return
        await self.app(scope, receive, send)


class JsonLogFormatter(logging.Formatter):
    """Log records as one JSON object a line: ts, level, logger, event, and
    the record's ``fields`` (see RequestLogMiddleware)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        out.update(getattr(record, "fields", {}) or {})
        if "request_id" not in out and (rid := current_request_id.get()) is not None:
            out["request_id"] = rid
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)
