"""uvicorn's two HTTP protocols (httptools, h11) with a bound on the header section and
ctxsel's JSON error envelope for what they refuse themselves.

uvicorn hands the app a request only once its headers are complete, and neither parser bounds
them the way a server must: httptools keeps every byte of a header however long (each new piece
copied onto the old ones), h11 holds a 16 KiB buffer and answers past it with a plain-text 400.
Here both refuse a header section (request line and headers) still incomplete past twice
``max_header_bytes`` with 431, and every error the parser raises is a JSON answer
``{error, message, status, request_id}`` like the app's own, not uvicorn's
``400 Invalid HTTP request received.`` in plain text. The exact limits (header count, size)
are checked on the complete request by :class:`~ctxsel.service.middleware.HeaderLimitMiddleware`.

A refusal is followed by a lingering close: the server stops sending (half-close), reads and
drops what the client still sends (for at most :data:`LINGER_S` seconds, and only while it
keeps coming), then closes. Closing at once, with the client's data unread, would reset the
connection, and a client still sending (Python's urllib) would see "connection reset" instead
of the answer.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from typing import Any

from ctxsel.service.middleware import error_dict, log

#: the longest a refused connection is kept open to drop what its client still sends
LINGER_S = 5.0
#: ... and the longest pause in what it sends before it is closed
LINGER_IDLE_S = 0.5

_REASONS = {400: b"Bad Request", 431: b"Request Header Fields Too Large"}


class _Limits:
    """What the two protocol classes add: the head bound, the JSON refusal, the lingering close."""

    max_header_bytes: int = 64 * 1024
    # set by the uvicorn protocol this is mixed into
    transport: Any
    loop: Any

    def _init_limits(self) -> None:
        self._head_pending = 0  # bytes received while the current request's headers are incomplete
        self._lingering = False
        self._linger_end = 0.0
        self._linger_last = 0.0

    def _head_grew(self, n: int) -> None:
        self._head_pending += n
        if self._head_pending > 2 * self.max_header_bytes and not self._lingering:
            self._refuse(431, "headers_too_large", self._head_message())

    def _head_message(self) -> str:
        return (
            f"the request's headers passed {2 * self.max_header_bytes:,} bytes before they ended; this server "
            f"takes at most {self.max_header_bytes:,} (its --max-header-bytes): send the data in the body"
        )

    def _refuse(self, status: int, error: str, message: str) -> None:
        """A JSON error answer written straight to the connection, then a lingering close."""
        rid = uuid.uuid4().hex
        body = json.dumps(error_dict(status, error, message, rid), ensure_ascii=False).encode()
        head = [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Error")),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"x-request-id: " + rid.encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        client = self.transport.get_extra_info("peername")
        log.warning(
            "request refused by the HTTP parser",
            extra={
                "fields": {
                    "status": status,
                    "error": error,
                    "message": message,
                    "request_id": rid,
                    "client": f"{client[0]}:{client[1]}" if isinstance(client, tuple) else None,
                }
            },
        )
        if self.transport.is_closing():
            return
        cycle = getattr(self, "cycle", None)  # a parser error in a body: the app's request is over
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:  # an answer half written: nothing more can be said on this connection
                self.transport.close()
                return
        self.transport.write(b"".join(head) + body)
        self._lingering = True
        now = self.loop.time()
        self._linger_end, self._linger_last = now + LINGER_S, now
        try:
            if self.transport.can_write_eof():
                self.transport.write_eof()
        except (OSError, RuntimeError):  # the client has gone already
            self.transport.close()
            return
        self.loop.call_later(LINGER_IDLE_S, self._linger_check)

    def _linger_check(self) -> None:
        now = self.loop.time()
        if self.transport.is_closing():
            return
        if now >= self._linger_end or now - self._linger_last >= LINGER_IDLE_S:
            self.transport.close()
            return
        self.loop.call_later(min(LINGER_IDLE_S, self._linger_end - now), self._linger_check)

    def _dropped(self) -> None:
        """Data from a refused client: dropped, and the lingering goes on."""
        self._linger_last = self.loop.time()

    def send_400_response(self, msg: str) -> None:
        """uvicorn calls this from the ``except`` of every parser error: the error it handles says why."""
        exc = sys.exc_info()[1]
        if getattr(exc, "error_status_hint", 400) == 431:  # h11's receive buffer passed its bound
            self._refuse(431, "headers_too_large", self._head_message())
            return
        detail = str(exc) if exc is not None and str(exc) else msg
        detail = detail if len(detail) <= 200 else detail[:200] + "..."
        self._refuse(400, "bad_request", f"the request is not valid HTTP/1.1 ({detail})")


def resolve_auto(choice: str, fast: str, fallback: str) -> str:
    """What uvicorn's ``auto`` picks: the C implementation (``fast``) when it is installed."""
    if choice != "auto":
        return choice
    return fast if importlib.util.find_spec(fast) is not None else fallback


def resolve_http(choice: str) -> str:
    """The HTTP parser uvicorn's ``auto`` picks: httptools when it is installed, else h11."""
    return resolve_auto(choice, "httptools", "h11")


def protocol_class(kind: str, max_header_bytes: int) -> type[Any]:
    """uvicorn's ``kind`` protocol ("httptools" or "h11") with :class:`_Limits`, for ``uvicorn.Config(http=...)``."""
    if kind == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        class LimitedHttpToolsProtocol(_Limits, HttpToolsProtocol):
            """httptools, with the head bounded: counted after each read that leaves it incomplete."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._init_limits()
                self._in_head = False

            def on_message_begin(self) -> None:
                super().on_message_begin()
                self._in_head, self._head_pending = True, 0

            def on_headers_complete(self) -> None:
                self._in_head = False
                super().on_headers_complete()

            def data_received(self, data: bytes) -> None:
                if self._lingering:
                    self._dropped()
                    return
                super().data_received(data)
                if self._in_head and not self.transport.is_closing():
                    self._head_grew(len(data))

        LimitedHttpToolsProtocol.max_header_bytes = max_header_bytes
        return LimitedHttpToolsProtocol
    if kind == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        class LimitedH11Protocol(_Limits, H11Protocol):
            """h11, whose own receive buffer bound (``h11_max_incomplete_event_size``) is the head bound."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._init_limits()

            def data_received(self, data: bytes) -> None:
                if self._lingering:
                    self._dropped()
                    return
                super().data_received(data)

        LimitedH11Protocol.max_header_bytes = max_header_bytes
        return LimitedH11Protocol
    raise ValueError(f"unknown HTTP protocol {kind!r}")


__all__ = ["LINGER_S", "protocol_class", "resolve_auto", "resolve_http"]
