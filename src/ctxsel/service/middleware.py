"""Pure ASGI middleware for the service: request log and id, bearer token, body
size limit, readiness (the concurrency limit is in :mod:`ctxsel.service.limiter`).

Each is a plain ASGI callable (no ``BaseHTTPMiddleware``), so none of them
buffers a request or a response. They run outermost first, in this order::

    RequestLog -> BearerAuth -> BodySizeLimit -> Readiness -> ConcurrencyLimit -> the app

so every request is logged (401s, 413s and 503s included), an unauthenticated
client can neither make the server read its body nor take a slot, an
oversized body is refused before it could take a slot, and a server still
loading its scorer refuses work before reading a body.
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
    A missing or wrong token gets 401 with ``WWW-Authenticate: Bearer``.
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
        await send_error(scope, send, 401, "unauthorized", why, {"WWW-Authenticate": challenge})


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class BodySizeLimitMiddleware:
    """413 for a request body over ``max_bytes``, without keeping it; 411 for
    a POST with neither ``Content-Length`` nor ``Transfer-Encoding`` (an
    HTTP/1.0 client's body would otherwise be read as empty: a misleading 422).

    A ``Content-Length`` over the limit is answered before the app runs and
    before a byte of the body is read. A body without one (chunked) or one
    longer than it says is counted as it streams in: the ``receive`` that
    passes the limit raises :class:`BodyTooLarge`, so at most one more
    transport chunk than the limit is ever held.

    The 413 (with ``Connection: close``) is sent at once, and then the rest of
    the body is read and thrown away, up to ``drain_bytes`` and while it keeps
    coming (``drain_idle_s``), before the connection closes. A client that
    reads while it sends (curl, httpx) sees the 413 at once and stops; one
    that sends everything first (Python's urllib) finds the 413 waiting
    instead of "connection reset by peer", which is what closing a socket
    with unread data in it gives. A client that asked ``Expect:
    100-continue`` has sent no body, so nothing is drained.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        drain_bytes: int = 64 * 1024 * 1024,
        drain_idle_s: float = 1.0,
        drain_total_s: float = 30.0,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.drain_bytes = drain_bytes
        self.drain_idle_s = drain_idle_s
        self.drain_total_s = drain_total_s

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
        expects_continue = headers.get("expect", "").lower() == "100-continue"
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
            exc = BodyTooLarge(self.max_bytes, int(declared), "declared")
            drain = None if expects_continue or int(declared) > self.drain_bytes else receive
            await self._refuse(scope, send, exc, drain)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes, seen, "so far" if message.get("more_body") else "")
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge as exc:
            if started:
                raise
            await self._refuse(scope, send, exc, None if expects_continue else receive)

    async def _refuse(self, scope: Scope, send: Send, exc: BodyTooLarge, drain: Receive | None) -> None:
        """The 413, then (with ``drain``) the unread body read and dropped before the response ends."""
        await send_error(
            scope, send, 413, "body_too_large", exc.detail, {"Connection": "close"}, more_body=drain is not None
        )
        if drain is None:
            return
        dropped = 0
        with anyio.move_on_after(self.drain_total_s):
            while dropped <= self.drain_bytes:
                with anyio.move_on_after(self.drain_idle_s):
                    message = await drain()
                    dropped += len(message.get("body", b""))
                    if message["type"] != "http.request" or not message.get("more_body"):
                        break
                    continue
                break  # the client stopped sending (it read the 413)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class ReadinessMiddleware:
    """503 with ``Retry-After`` for ``paths`` while ``refusal()`` says why the
    server cannot take work yet (its scorer is loading), before the body is read."""

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
