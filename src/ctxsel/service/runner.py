"""Run the service with uvicorn: JSON logs on stderr, a socket bound first.

The socket is bound before uvicorn starts, so ``--port 0`` works: the first
log line, ``{"event": "listening", "host": ..., "port": ..., "url": ...}``,
says which port the system gave (tests and the load benchmark read it).
The scorer then loads and warms in the background; ``{"event": "ready"}``
follows when it is done (until then /health says "starting"). With
``workers > 1`` the socket is shared by that many forked worker processes
(:mod:`ctxsel.service.workers`).
"""

from __future__ import annotations

import gc
import logging
import socket
import sys
from typing import Any, Literal

from ctxsel.errors import InputError, MissingExtraError, install_hint
from ctxsel.service.middleware import JsonLogFormatter, log
from ctxsel.service.protocols import resolve_auto, resolve_http
from ctxsel.service.settings import ServiceSettings

#: new container objects between two young collections in the server's process (Python's default: 700)
YOUNG_GC_THRESHOLD = 20_000


def setup_json_logging(level: str = "info", stream: Any = None) -> None:
    """ctxsel's and uvicorn's loggers write one JSON object a line."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLogFormatter())
    for name in ("ctxsel", "uvicorn", "uvicorn.error"):  # all of ctxsel: a cache warning is a JSON line too
        lg = logging.getLogger(name)
        lg.handlers[:] = [handler]
        lg.setLevel(level.upper())
        lg.propagate = False
    logging.getLogger("uvicorn.access").disabled = True  # the request log replaces it


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say they are
    # TCP, and accepted sockets inherit this; with proto 0 every keep-alive response waits for the
    # client's delayed ACK between its header and body writes.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except socket.gaierror as e:  # before OSError: it is one
        sock.close()
        raise InputError(
            f"cannot resolve host {host!r}: {e.strerror}; give --host an address (127.0.0.1, 0.0.0.0, ::) "
            "or a name this machine resolves"
        ) from None
    except OSError as e:
        sock.close()
        raise InputError(
            f"cannot listen on {host}:{port}: {e.strerror}; pick another --port (0: any free one)"
        ) from None
    sock.set_inheritable(True)
    return sock


def run_server(
    settings: ServiceSettings,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    log_level: str = "info",
    timeout_keep_alive: int = 5,
    http: Literal["auto", "httptools", "h11"] = "auto",
    loop: Literal["auto", "uvloop", "asyncio"] = "auto",
    workers: int = 1,
) -> None:
    """Serve ``create_app(settings)`` until SIGINT/SIGTERM (graceful shutdown).

    ``http`` and ``loop`` are uvicorn's: by default its C parser (httptools)
    and uvloop, which the ``serve`` extra installs, else the pure-Python ones.
    ``workers``: processes sharing the socket, each with its own scorer and
    its own limits (see :mod:`ctxsel.service.workers`).

    If the scorer fails to load at start-up the server stops and this raises
    InputError with the reason (``ctxsel serve`` prints it and exits 2).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError(f"--workers must be an integer >= 1, got {workers!r}")
    try:
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise MissingExtraError(f"the HTTP service needs uvicorn: {install_hint('serve')}") from e

    setup_json_logging(log_level)
    # A request of 1,000 chunks makes a few thousand objects that die with it, by reference count. At
    # Python's default (a young collection every 700 new objects) the collector walks them several
    # times a request, and moves them to older generations to be walked again: a noticeable share of
    # the server's CPU (docs/guide/service.md). This process is the server's own, so it can choose.
    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
    if workers == 1:
        from ctxsel.service.app import create_app

        app = create_app(settings)
        app.state.service.scorer()  # a scorer that cannot be built (a bad --model) fails here, before listening
    sock = bind_socket(host, port)
    actual = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    log.info(
        "listening",
        extra={
            "fields": {
                "host": host,
                "port": actual,
                "url": f"http://{shown}:{actual}",
                "auth": settings.token is not None,
                "max_body_bytes": settings.max_body_bytes,
                "deadline_s": settings.deadline_s,
                "max_concurrency": settings.max_concurrency,
                "max_queue": settings.max_queue,
                "queue_timeout_s": settings.queue_timeout_s,
                "body_timeout_s": settings.body_timeout_s,
                "timeout_keep_alive_s": timeout_keep_alive,
                "max_header_bytes": settings.max_header_bytes,
                "max_headers": settings.max_headers,
                "workers": workers,
                "max_chunks": settings.max_chunks,
                "max_chars": settings.max_chars,
                "scorer": settings.scorer,
                "reader": settings.reader_name,
                "http": resolve_http(http),
                "loop": resolve_auto(loop, "uvloop", "asyncio"),
            }
        },
    )
    if settings.token is None and host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "no bearer token and not loopback-only: anyone who can reach the port can use the server",
            extra={"fields": {"host": host}},
        )
    options: dict[str, Any] = {
        "log_level": log_level,
        "timeout_keep_alive": timeout_keep_alive,
        "http": http,
        "loop": loop,
    }
    from ctxsel.service.workers import run_workers, serve_on

    if workers > 1:
        try:
            run_workers(settings, sock, workers, **options)
        finally:
            sock.close()
        return
    try:
        failure = serve_on(app, sock, **options)
    finally:
        sock.close()
    if failure is not None:
        raise InputError(failure)
