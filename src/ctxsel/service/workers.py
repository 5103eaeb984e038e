"""``ctxsel serve --workers N``: N forked processes serving one listening socket.

The parent binds the socket, then forks N workers before it loads any model
or starts a thread (forking a process with threads or a loaded model is not
safe). Each worker builds its own app, scorer and caches and runs uvicorn
on the shared socket; the kernel spreads new connections among them.

Each worker enforces the settings on its own: ``--max-concurrency``,
``--max-queue``, ``--max-chunks`` and ``--max-chars`` hold per worker, so the
server as a whole runs up to N x max-concurrency requests at once and its
memory bound is N times one worker's (each loads its own scorer). Metrics go
through prometheus_client's multiprocess mode: the parent points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh folder before forking (or empties the
one given in the environment), and any worker's /metrics sums all of them.

SIGTERM or SIGINT to the parent stops every worker gracefully (each finishes
its requests). A worker that dies, or whose scorer fails to load, stops the
whole server with a one-line reason: restarting is a supervisor's job
(systemd, Kubernetes). A worker whose parent disappears stops too.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Literal

from ctxsel.errors import InputError
from ctxsel.service.middleware import log
from ctxsel.service.settings import ServiceSettings

#: a worker's exit status when its scorer failed to load (its log line says why)
SCORER_FAILED = 3


def _metrics_dir() -> str | None:
    """The multiprocess metrics folder, made (or emptied) before any worker starts;
    the path when it is ours to remove at the end."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        for old in Path(given).glob("*.db"):  # counts of an earlier run would be summed in
            old.unlink()
        return None
    made = tempfile.mkdtemp(prefix="ctxsel-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
    return made


def _worker(index: int, settings: ServiceSettings, sock: socket.socket, options: dict[str, Any]) -> int:
    """One worker's life, in the forked child: its app on the shared socket."""
    from ctxsel.service.app import create_app

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = os.getppid()
    try:
        app = create_app(settings)
        app.state.service.scorer()
    except Exception as e:
        log.error("worker could not start", extra={"fields": {"worker": index, "error": f"{type(e).__name__}: {e}"}})
        return SCORER_FAILED

    def orphan_watch() -> None:  # the parent was killed hard: stop rather than hold the port
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=orphan_watch, daemon=True, name="ctxsel-orphan-watch").start()
    log.info("worker started", extra={"fields": {"worker": index, "pid": os.getpid()}})
    failure = serve_on(app, sock, **options)
    if failure is not None:
        log.error("worker stopped", extra={"fields": {"worker": index, "error": failure}})
        return SCORER_FAILED
    return 0


def run_workers(settings: ServiceSettings, sock: socket.socket, n: int, **options: Any) -> None:
    """Fork ``n`` workers on ``sock`` and wait for them; raises InputError when one failed."""
    made = _metrics_dir()
    stopping = False
    pids: dict[int, int] = {}

    def stop_all(*_: Any) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    old = {sig: signal.signal(sig, stop_all) for sig in (signal.SIGTERM, signal.SIGINT)}
    sys.stderr.flush()
    failure: str | None = None
    try:
        for i in range(n):
            pid = os.fork()
            if pid == 0:  # the worker: never returns into the parent's code
                code = 1
                try:
                    os.setpgid(0, 0)  # a terminal's Ctrl+C reaches the parent only; it stops the workers
                    code = _worker(i, settings, sock, options)
                finally:
                    sys.stderr.flush()
                    os._exit(code)
            pids[pid] = i
        while pids:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            index = pids.pop(pid, None)
            if index is None:
                continue
            _mark_dead(pid)
            code = os.waitstatus_to_exitcode(status)
            if not stopping:
                failure = failure or (
                    f"worker {index} could not load its scorer (the log line above says why); the server stopped"
                    if code == SCORER_FAILED
                    else f"worker {index} exited unexpectedly (status {code}); the server stopped"
                )
                log.error("worker exited", extra={"fields": {"worker": index, "pid": pid, "status": code}})
                stop_all()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
    if failure is not None:
        raise InputError(failure)


def serve_on(
    app: Any,
    sock: socket.socket,
    *,
    log_level: str,
    timeout_keep_alive: int,
    http: Literal["auto", "httptools", "h11"],
    loop: Literal["auto", "uvloop", "asyncio"],
) -> str | None:
    """Run ``app`` with uvicorn on ``sock`` until told to stop; why it stopped
    when its scorer failed to load, else None."""
    import uvicorn

    from ctxsel.service.protocols import protocol_class, resolve_http

    settings = app.state.service.settings
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        log_level=log_level,
        lifespan="on",
        timeout_keep_alive=timeout_keep_alive,
        server_header=False,
        # a head still incomplete past twice the limit is refused as it comes (the protocol); the exact
        # check is HeaderLimitMiddleware's, on complete heads
        http=protocol_class(resolve_http(http), settings.max_header_bytes),
        h11_max_incomplete_event_size=2 * settings.max_header_bytes,
        loop=loop,
    )
    server = uvicorn.Server(config)
    service = app.state.service
    service.on_warm_up_failure = lambda: setattr(server, "should_exit", True)
    server.run(sockets=[sock])
    if service.status == "failed":  # a server that cannot score is of no use: stop, and say why
        return f"{service.status_message}; the server stopped (check --scorer and --model)"
    return None


def _mark_dead(pid: int) -> None:
    """Drop a dead worker's live gauges (in flight, queued) from the merged metrics."""
    try:
        from prometheus_client import multiprocess
    except ImportError:
        return
    mark: Any = multiprocess.mark_process_dead  # untyped in prometheus_client
    mark(pid)


__all__ = ["SCORER_FAILED", "run_workers", "serve_on"]
