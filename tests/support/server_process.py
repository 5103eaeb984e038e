"""Start ``ctxsel serve`` as a real process on loopback and talk to it.

    with ServerProcess(["--scorer", "keywords"], token="t") as srv:
        status, headers, body = srv.request("POST", "/select", {...})

The server binds port 0; its first log line says which port it got. Its
stderr (one JSON object a line) is kept in a file: ``srv.log_lines()``.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.cli import ctxsel_command


class ServerProcess:
    def __init__(
        self, args: list[str], token: str | None = None, start_timeout: float = 60.0, wait_ready: bool = True
    ) -> None:
        """``wait_ready``: ``start`` returns once /health says the server is ready
        (200); False: once /health answers at all (it may say "starting")."""
        self.args = args
        self.token = token
        self.wait_ready = wait_ready
        self.start_timeout = start_timeout
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="ctxsel-serve-", suffix=".log", delete=False)  # noqa: SIM115

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> ServerProcess:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        env.pop("CTXSEL_SERVE_TOKEN", None)
        if self.token is not None:
            env["CTXSEL_SERVE_TOKEN"] = self.token
        self.proc = subprocess.Popen(
            [*ctxsel_command(), "serve", "--host", "127.0.0.1", "--port", "0", *self.args],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env=env,
        )
        end = time.monotonic() + self.start_timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ctxsel serve exited with {self.proc.returncode}:\n{self.log_text()}")
            for line in self.log_lines():
                if line.get("event") == "listening":
                    self.port = int(line["port"])
            if self.port:
                try:
                    if self.request("GET", "/health", auth=False)[0] == 200 or not self.wait_ready:
                        return self
                except OSError:
                    pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"ctxsel serve did not become healthy in {self.start_timeout} s:\n{self.log_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        Path(self._log.name).unlink(missing_ok=True)

    # -- logs ------------------------------------------------------------------

    def log_text(self) -> str:
        return Path(self._log.name).read_text(encoding="utf-8", errors="replace")

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"unparsed": line})
        return out

    def request_log(self, request_id: str, timeout: float = 3.0) -> dict[str, Any]:
        """The request log line with this id (it is written just after the response)."""
        end = time.monotonic() + timeout
        while True:
            for line in self.log_lines():
                if line.get("event") == "request" and line.get("request_id") == request_id:
                    return line
            if time.monotonic() > end:
                raise AssertionError(f"no request log line for {request_id}:\n{self.log_text()}")
            time.sleep(0.02)

    # -- HTTP ------------------------------------------------------------------

    def headers(self, auth: bool | str = True, **extra: str) -> dict[str, str]:
        h = {"Content-Type": "application/json", **extra}
        if auth is True and self.token is not None:
            h["Authorization"] = f"Bearer {self.token}"
        elif isinstance(auth, str):
            h["Authorization"] = auth
        return h

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        auth: bool | str = True,
        raw: bytes | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """One request on a fresh connection: (status, lower-cased headers, parsed JSON or text);
        ``headers`` are sent besides the JSON content type and the token."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            conn.request(method, path, body=data, headers=self.headers(auth, **(headers or {})))
            resp = conn.getresponse()
            payload = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()
        try:
            parsed: Any = json.loads(payload)
        except ValueError:
            parsed = payload.decode("utf-8", "replace")
        return resp.status, hdrs, parsed

    def peak_rss_kib(self) -> int:
        """The server process's peak resident memory (VmHWM), Linux only."""
        return self._status_kib("VmHWM")

    def rss_kib(self) -> int:
        """The server process's resident memory now (VmRSS), Linux only."""
        return self._status_kib("VmRSS")

    def reset_peak_rss(self) -> None:
        """Start VmHWM again from the current RSS (Linux: ``5`` to /proc/PID/clear_refs)."""
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")

    def cpu_seconds(self) -> float:
        """User plus system CPU time the server process has used."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _status_kib(self, key: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
        raise RuntimeError(f"no {key} in /proc status")
