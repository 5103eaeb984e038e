"""One HTTP POST to an LLM server, and when to try it again.

:func:`send_once` makes one attempt on a fresh connection under a deadline that covers connect,
send and the whole reply; :func:`should_retry` and :func:`parse_retry_after` are the retry policy
(openai-python's, described in :mod:`ctxsel.llm.openai_compat`). Standard library only.
"""

from __future__ import annotations

import email.utils
import http.client
import math
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from datetime import UTC

from ctxsel.errors import LLMContextLengthError, LLMError, TransportError

#: Status codes that are never retried (the same request cannot succeed).
NEVER_RETRY = frozenset({400, 401, 403, 404, 422})
#: Status codes retried as openai-python does (plus every 5xx).
RETRY_STATUSES = frozenset({408, 409, 429})

#: Refuse to buffer absurd replies.
MAX_BODY_BYTES = 64 * 1024 * 1024


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds the server asks to wait, from ``retry-after-ms`` or ``retry-after``; None if unparseable.

    ``headers`` must have lower-case keys. ``retry-after`` may be seconds
    (floats accepted, as openai-python does) or an HTTP date. The value may
    be negative or huge: the caller decides whether it is sane.
    """
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            v = float(ms) / 1000.0
            if math.isfinite(v):
                return v
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if ra is None:
        return None
    try:
        v = float(ra)
        return v if math.isfinite(v) else None
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(ra.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if dt is None:  # pragma: no cover - older Pythons
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp() - (time.time() if now is None else now)


def should_retry(status: int, headers: Mapping[str, str], err: LLMError) -> bool:
    """Whether a failed attempt is worth repeating: the status, unless ``x-should-retry`` says otherwise
    (never for :data:`NEVER_RETRY` or a context-length error)."""
    if status in NEVER_RETRY or isinstance(err, LLMContextLengthError):
        return False
    hint = headers.get("x-should-retry", "").strip().lower()
    if hint == "true":
        return True
    if hint == "false":
        return False
    return status in RETRY_STATUSES or status >= 500


def send_once(
    scheme: str,
    host: str,
    port: int,
    path: str,
    body: bytes,
    headers: dict[str, str],
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One POST on a fresh connection, within ``timeout`` seconds overall; always closes the connection.

    (status, lower-cased headers, body), or :class:`~ctxsel.errors.TransportError` for a timeout,
    a connection error or a reply over :data:`MAX_BODY_BYTES`."""
    if scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=ssl_context or ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    expired = threading.Event()
    held: list[socket.socket] = []  # the socket, kept: http.client drops conn.sock once a reply says close
    resp: http.client.HTTPResponse | None = None

    def _expire() -> None:  # the per-attempt deadline: unblock whatever the call is waiting on
        expired.set()
        for sock in list(held):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    watchdog = threading.Timer(timeout, _expire)
    watchdog.daemon = True
    timed_out = f"the LLM server did not answer within {timeout:g} s"
    try:
        watchdog.start()
        conn.connect()
        if conn.sock is not None:
            held.append(conn.sock)
        if expired.is_set():
            raise TransportError(True, timed_out)
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        length = resp.getheader("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            raise TransportError(False, f"the LLM server sent a {int(length)}-byte reply, over the 64 MiB limit")
        data = resp.read()
        if expired.is_set():
            raise TransportError(True, timed_out)
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    except TransportError:
        raise
    except TimeoutError as e:
        raise TransportError(True, timed_out) from e
    except (OSError, http.client.HTTPException) as e:
        if expired.is_set():
            raise TransportError(True, timed_out) from e
        raise TransportError(False, f"could not reach the LLM server at {host}:{port} ({type(e).__name__}: {e})") from e
    finally:
        watchdog.cancel()
        if resp is not None:
            resp.close()
        conn.close()
        for sock in held:
            sock.close()


__all__ = ["MAX_BODY_BYTES", "NEVER_RETRY", "RETRY_STATUSES", "parse_retry_after", "send_once", "should_retry"]
