"""``ctxsel serve --workers 2``: two processes on one port, metrics summed across them, a clean stop."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server_process import ServerProcess

pytestmark = pytest.mark.slow  # real server processes

SELECT = {"question": "How heavy is the meteorite?", "chunks": ["A meteorite.", "A banana."], "method": "top-k@1"}


def count(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def wait_for_lines(srv: ServerProcess, event: str, n: int, timeout: float = 120.0) -> list[dict[str, Any]]:
    end = time.monotonic() + timeout
    while True:
        lines = [line for line in srv.log_lines() if line.get("event") == event]
        if len(lines) >= n:
            return lines
        assert time.monotonic() < end, f"fewer than {n} {event!r} lines:\n{srv.log_text()}"
        time.sleep(0.1)


def test_two_workers_serve_one_port_and_their_metrics_add_up(tmp_path: Any) -> None:
    with ServerProcess(["--scorer", "keywords", "--workers", "2"]) as srv:
        started = wait_for_lines(srv, "worker started", 2)
        pids = {line["pid"] for line in started}
        assert len(pids) == 2 and srv.pid not in pids
        wait_for_lines(srv, "ready", 2)
        listening = next(line for line in srv.log_lines() if line.get("event") == "listening")
        assert listening["workers"] == 2
        for _ in range(20):  # each on a fresh connection: the kernel spreads them over the workers
            status, _, body = srv.request("POST", "/select", SELECT, auth=False)
            assert status == 200 and body["ids"][0] == "0"
        # whichever worker answers a scrape, it reports both workers' requests
        for _ in range(6):
            status, _, text = srv.request("GET", "/metrics", auth=False)
            assert status == 200
            assert count(text, "ctxsel_http_requests_total", route="/select", status="200") == 20
            assert count(text, "ctxsel_requests_in_flight") == 0
        assert srv.proc is not None
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(timeout=30) == 0
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


def test_a_worker_that_cannot_load_its_scorer_stops_the_server_with_one_line(tmp_path: Any) -> None:
    import subprocess

    from tests.support.cli import ctxsel_command

    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [*ctxsel_command(), "serve", "--port", "0", "--workers", "2", "--scorer", "dense", "--model", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ctxsel serve: error: worker ") and "could not load its scorer" in last, done.stderr
    assert "Traceback" not in done.stderr
