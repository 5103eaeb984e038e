"""Run the service with uvicorn: JSON logs on stderr, a socket bound first.

The socket is bound before uvicorn starts, so ``--port 0`` works: the first
log line, ``{"event": "listening", "host": ..., "port": ..., "url": ...}``,
says which port the system gave (tests and the load benchmark read it).
The scorer then loads and warms in the background; ``{"event": "ready"}``
follows when it is done (until then /health says "starting").
"""

from __future__ import annotations

import importlib.util
import logging
import socket
import sys
from typing import Any, Literal

from ctxsel.errors import InputError, MissingExtraError, install_hint
from ctxsel.service.middleware import JsonLogFormatter, log
from ctxsel.service.settings import ServiceSettings


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
    # TCP, and accepted sockets inherit this; with proto 0 every keep-alive response waited ~40 ms for the
    # client's delayed ACK between its header and body writes.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise InputError(
            f"cannot listen on {host}:{port}: {e.strerror}; pick another --port (0: any free one)"
        ) from None
    sock.set_inheritable(True)
    return sock


def _resolve(choice: str, fast: str, fallback: str) -> str:
    """What uvicorn's ``auto`` picks: the C implementation when it is installed."""
    if choice != "auto":
        return choice
    return fast if importlib.util.find_spec(fast) is not None else fallback


def run_server(
    settings: ServiceSettings,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    log_level: str = "info",
    timeout_keep_alive: int = 5,
    http: Literal["auto", "httptools", "h11"] = "auto",
    loop: Literal["auto", "uvloop", "asyncio"] = "auto",
) -> None:
    """Serve ``create_app(settings)`` until SIGINT/SIGTERM (graceful shutdown).

    ``http`` and ``loop`` are uvicorn's: by default its C parser (httptools)
    and uvloop, which the ``serve`` extra installs, else the pure-Python ones.

    If the scorer fails to load at start-up the server stops and this raises
    ValueError with the reason (``ctxsel serve`` prints it and exits 2).
    """
    try:
        import uvicorn
    except ImportError as e:
        raise MissingExtraError(f"the HTTP service needs uvicorn: {install_hint('serve')}") from e
    from ctxsel.service.app import create_app

    setup_json_logging(log_level)
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
                "max_chunks": settings.max_chunks,
                "max_chars": settings.max_chars,
                "scorer": settings.scorer,
                "reader": settings.reader_name,
                "http": _resolve(http, "httptools", "h11"),
                "loop": _resolve(loop, "uvloop", "asyncio"),
            }
        },
    )
    if settings.token is None and host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "no bearer token and not loopback-only: anyone who can reach the port can use the server",
            extra={"fields": {"host": host}},
        )
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        log_level=log_level,
        lifespan="on",
        timeout_keep_alive=timeout_keep_alive,
        server_header=False,
        http=http,
        loop=loop,
    )
    server = uvicorn.Server(config)
    service = app.state.service
    service.on_warm_up_failure = lambda: setattr(server, "should_exit", True)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if service.status == "failed":  # a server that cannot score is of no use: stop, and say why
        raise InputError(f"{service.status_message}; the server stopped (check --scorer and --model)")
