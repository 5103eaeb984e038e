"""Load on ``ctxsel serve``: POST /select with 1,000 chunks and precomputed
scores (or embeddings), at 1, 8 and 32 concurrent clients.

Starts the server as its own process on loopback (``--port 0``, bearer token
on, JSON request logs on, the server's default limits: ``--max-concurrency``
4 with a queue of 16 unless ``--max-concurrency`` / ``--max-queue`` say
otherwise), builds one request -- 1,000 chunks of about 80 words with their
precomputed scores (payload ``scores``; ``embeddings``: 384-d float32
vectors instead; ``scores+n_tokens``: chunk objects with their token
counts), method adaptive-k -- and has N client threads send it back to back
over keep-alive connections for ``--duration-s`` seconds each. A client that
gets 503 waits its ``Retry-After`` and sends again, as a well-behaved client
does. Reports requests/s (200s per wall-clock second), p50 / p99 latency of
the 200s, every status seen, and the server process's CPU per answered
request; a last table times the stages of one request in process, to show
where the time goes.

    python -m benchmarks.serve_load [--duration-s 10] [--clients 1,8,32] [--payloads scores]

Writes benchmarks/results/serve_load.{md,json}.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import _common as C

TOKEN = "bench-token"
WORDS = [
    "the",
    "of",
    "and",
    "a",
    "in",
    "to",
    "is",
    "was",
    "for",
    "on",
    "as",
    "with",
    "by",
    "he",
    "at",
    "from",
    "his",
    "an",
    "were",
    "are",
    "which",
    "this",
    "be",
    "or",
    "had",
    "first",
    "one",
    "their",
    "its",
    "new",
    "after",
    "who",
    "they",
    "two",
    "her",
    "she",
    "been",
    "other",
    "when",
    "time",
    "there",
    "all",
    "during",
    "into",
    "school",
    "also",
    "city",
    "year",
    "university",
    "world",
    "season",
    "state",
    "united",
    "film",
    "most",
    "team",
    "over",
    "between",
    "only",
    "series",
    "some",
    "known",
    "under",
    "later",
    "three",
    "many",
    "while",
    "album",
    "river",
    "county",
    "war",
    "station",
    "american",
    "national",
    "club",
    "history",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--clients", default="1,8,32", help="concurrent clients per level")
    p.add_argument("--duration-s", type=float, default=10.0, help="timed seconds per level and payload")
    p.add_argument(
        "--payloads", default="scores", help="comma-separated: scores, scores+n_tokens, embeddings (8.8 MB each)"
    )
    p.add_argument(
        "--pure-python", action="store_true", help="also one client on uvicorn's h11 parser and asyncio loop"
    )
    p.add_argument("--warmup", type=int, default=3, help="untimed requests before each level")
    p.add_argument("--n-chunks", type=int, default=1000)
    p.add_argument("--dim", type=int, default=384, help="embedding dimension (MiniLM: 384)")
    p.add_argument("--method", default="adaptive-k")
    p.add_argument(
        "--max-concurrency", type=int, default=None, help="the server's --max-concurrency (default: its own, 4)"
    )
    p.add_argument("--max-queue", type=int, default=None, help="the server's --max-queue (default: its own, 16)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_payloads(n: int, dim: int, seed: int, method: str) -> dict[str, dict[str, Any]]:
    """One request with embeddings, the same with precomputed scores, and the scores one with
    chunk objects that carry their cl100k ``n_tokens`` (so the server counts nothing)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    chunks = [" ".join(rng.choice(WORDS, size=int(rng.integers(60, 100)))) for _ in range(n)]
    q = rng.standard_normal(dim).astype(np.float32)
    q /= np.linalg.norm(q)
    emb = rng.standard_normal((n, dim)).astype(np.float32)
    relevant = rng.choice(n, size=8, replace=False)
    emb[relevant] += 6.0 * q  # a few chunks close to the question, the rest unrelated
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    scores = (emb @ q).astype(np.float64)
    base = {
        "question": "Which station did the river county team open first?",
        "chunks": chunks,
        "method": method,
        "with_text": True,
    }
    from ctxsel.tokens import count_tokens_batch

    counted = [
        {"id": str(i), "text": t, "n_tokens": k} for i, (t, k) in enumerate(zip(chunks, count_tokens_batch(chunks)))
    ]
    return {
        "embeddings": {**base, "embeddings": emb.tolist(), "query_embedding": q.tolist()},
        "scores": {**base, "scores": scores.tolist()},
        "scores+n_tokens": {**base, "chunks": counted, "scores": scores.tolist()},
    }


class Server:
    def __init__(self, threads: int, extra: tuple[str, ...] = (), src: Path | None = None) -> None:
        """``src``: serve the ctxsel package found in that folder (another checkout's ``src``) instead
        of the installed one."""
        self.log = tempfile.NamedTemporaryFile(prefix="serve-load-", suffix=".log", delete=False)  # noqa: SIM115
        script = Path(sys.executable).with_name("ctxsel")
        cmd = [str(script)] if script.is_file() and src is None else [sys.executable, "-m", "ctxsel.cli.main"]
        env = dict(os.environ, CTXSEL_SERVE_TOKEN=TOKEN, OMP_NUM_THREADS=str(threads))
        if src is not None:
            env["PYTHONPATH"] = str(src)
        self.cmd = [
            *cmd,
            "serve",
            "--port",
            "0",
            "--scorer",
            "keywords",
            "--max-body-bytes",
            str(64 * 1024 * 1024),
            "--deadline",
            "120",
            *extra,
        ]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        self.port = 0
        self.http = self.loop = "?"
        ready = False
        end = time.monotonic() + 300  # a loaded machine can take minutes to import the server
        while not (self.port and ready) and time.monotonic() < end:
            for line in Path(self.log.name).read_text().splitlines():
                obj = json.loads(line)
                if obj.get("event") == "listening":
                    self.port = int(obj["port"])
                    self.http, self.loop = obj["http"], obj["loop"]  # what uvicorn runs on
                ready = ready or obj.get("event") == "ready"  # the scorer is warm: /select is served
            if self.proc.poll() is not None:
                raise RuntimeError(Path(self.log.name).read_text())
            time.sleep(0.05)
        if not (self.port and ready):
            raise RuntimeError("the server did not start")

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def threads(self) -> int:
        """The server process's thread count now (/proc)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        return 0

    def request_lines(self) -> int:
        return sum('"event": "request"' in line for line in Path(self.log.name).read_text().splitlines())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)
        Path(self.log.name).unlink(missing_ok=True)


def post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, bytes, float]:
    """(status, body, the Retry-After seconds of a 503 or 0)."""
    conn.request(
        "POST", "/select", body=body, headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    )
    resp = conn.getresponse()
    data = resp.read()
    retry = float(resp.getheader("Retry-After") or 0) if resp.status == 503 else 0.0
    if resp.getheader("Connection", "").lower() == "close":
        conn.close()  # http.client reconnects on the next request
    return resp.status, data, retry


def run_level(
    port: int, body: bytes, clients: int, duration_s: float, warmup: int, server: Server | None = None
) -> dict[str, Any]:
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=300) for _ in range(clients)]
    for c in conns:  # Nagle off, as curl, requests and httpx do
        for attempt in range(600):  # the socket is bound before uvicorn listens: on a loaded machine, wait
            try:
                c.connect()
                break
            except ConnectionRefusedError:
                if attempt == 599:
                    raise
                time.sleep(0.2)
        c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # warm-up on a connection of its own: a level's connections are then all fresh, none idle past the
    # server's keep-alive timeout (5 s) while the client threads start, which would close it under them
    warm = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    for _ in range(warmup):
        status, data, _ = post(warm, body)
        assert status == 200, data[:300]
    warm.close()
    latencies: list[float] = []
    errors: dict[int, int] = {}
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    stop_at = [0.0]

    conn_errors: dict[str, int] = {}
    no_retry_after = [0]

    def client(conn: http.client.HTTPConnection) -> None:
        start.wait()
        while time.perf_counter() < stop_at[0]:
            t0 = time.perf_counter()
            try:
                status, _, retry = post(conn, body)
            except (OSError, http.client.HTTPException) as e:  # the connection failed under the client
                with lock:
                    conn_errors[type(e).__name__] = conn_errors.get(type(e).__name__, 0) + 1
                conn.close()  # http.client reconnects on the next request
                continue
            dt = time.perf_counter() - t0
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                if status == 200:
                    latencies.append(dt)
                else:
                    errors[status] = errors.get(status, 0) + 1
                if status == 503 and not retry:
                    no_retry_after[0] += 1
            if retry:  # a 503: wait as told, but not past the level's end
                time.sleep(max(0.0, min(retry, stop_at[0] - time.perf_counter())))

    threads = [threading.Thread(target=client, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    threads0 = server.threads() if server else 0
    cpu0 = server.cpu_s() if server else 0.0
    t0 = time.perf_counter()
    stop_at[0] = t0 + duration_s
    start.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0  # includes the requests in flight at the stop time
    cpu = (server.cpu_s() - cpu0) if server else float("nan")
    threads1 = server.threads() if server else 0
    for c in conns:
        c.close()
    xs = sorted(latencies)
    return {
        "clients": clients,
        "n_ok": len(xs),
        "errors": errors,
        "statuses": statuses,
        "wall_s": wall,
        "rps": len(xs) / wall,
        "p50_ms": C.percentile(xs, 0.5) * 1e3,
        "p99_ms": C.percentile(xs, 0.99) * 1e3,
        "mean_ms": sum(xs) / len(xs) * 1e3,
        "max_ms": xs[-1] * 1e3,
        "server_cpu_s": cpu,
        "server_cpu_ms_per_request": cpu / len(xs) * 1e3,
        "connection_errors": conn_errors,
        "503_without_retry_after": no_retry_after[0],
        "server_threads": [threads0, threads1],
    }


def stage_times(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """One request's stages in process (no HTTP), each timed alone."""
    from pydantic_core import from_json

    from ctxsel.selectors import get_selector
    from ctxsel.service.cancel import CancelToken
    from ctxsel.service.models import SelectionOut, SelectRequest
    from ctxsel.service.service import Service
    from ctxsel.service.settings import ServiceSettings
    from ctxsel.tokens import clear_count_cache, count_tokens_batch

    service = Service(ServiceSettings(scorer="keywords"))
    parsed = from_json(body)
    req = SelectRequest.model_validate(parsed)
    chunks = service.chunks(req)
    selector = get_selector(req.method)
    scores = service.given_scores(req, len(chunks))
    sel = selector.select(req.question, chunks, scores)
    kind = "embeddings to cosine (numpy)" if req.embeddings is not None else "the sent scores as an array"
    texts = [c if isinstance(c, str) else c["text"] for c in req.chunks or []]

    def count_all() -> Any:
        return count_tokens_batch(texts)

    def cold(fn: Any) -> Any:
        def run() -> Any:
            clear_count_cache()
            return fn()

        return run

    def whole() -> Any:
        return service.select(SelectRequest.model_validate(from_json(body)), CancelToken()).to_dict()

    sent = all(not isinstance(c, str) and c.get("n_tokens") is not None for c in req.chunks or [])
    rows = [
        ("parse: pydantic_core.from_json (what the server uses)", lambda: from_json(body)),
        ("(for comparison: json.loads, FastAPI's default)", lambda: json.loads(body)),
        ("validate: SelectRequest.model_validate", lambda: SelectRequest.model_validate(parsed)),
    ]
    if sent:
        rows.append(("chunks: Chunk objects with the client's n_tokens (nothing counted)", lambda: service.chunks(req)))
    else:
        rows += [
            ("chunks: the texts checked (TextChunks: nothing built or counted yet)", lambda: service.chunks(req)),
            ("(for comparison: every text counted, new texts: count cache cleared first)", cold(count_all)),
        ]
    rows += [
        ("method: spec parsed, options checked, selector built", lambda: service.selector(req, CancelToken())),
        (f"scores: {kind}", lambda: service.given_scores(req, len(chunks))),
        (
            f"select: {req.method} on the scores, the kept chunks built and counted, Selection",
            lambda: selector.select(req.question, service.chunks(req), scores),
        ),
        ("respond: to_dict + SelectionOut validation", lambda: SelectionOut.model_validate(sel.to_dict())),
        ("(whole path in process: parse to response dict, counts remembered)", whole),
        ("(whole path in process, new texts: count cache cleared first)", cold(whole)),
    ]
    return [
        (name, C.summarize(C.time_calls(fn, warmup=1, budget_s=2.0, min_repeats=5, max_repeats=50)))
        for name, fn in rows
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    thread_info = C.setup_threads(args.threads)
    levels = [int(x) for x in args.clients.split(",")]
    kinds = [k.strip() for k in args.payloads.split(",") if k.strip()]
    info = C.machine_info(thread_info, versions=("fastapi", "uvicorn", "pydantic", "starlette", "prometheus_client"))
    payloads = make_payloads(args.n_chunks, args.dim, args.seed, args.method)
    unknown = sorted(set(kinds) - set(payloads))
    if unknown:
        raise SystemExit(f"--payloads: unknown {unknown}; choose from {sorted(payloads)}")
    bodies = {k: json.dumps(v).encode() for k, v in payloads.items()}
    limits: tuple[str, ...] = ()
    if args.max_concurrency is not None:
        limits += ("--max-concurrency", str(args.max_concurrency))
    if args.max_queue is not None:
        limits += ("--max-queue", str(args.max_queue))
    server = Server(args.threads, extra=limits)
    results: list[dict[str, Any]] = []
    try:
        for kind in kinds:
            for clients in levels:
                r = run_level(server.port, bodies[kind], clients, args.duration_s, args.warmup, server)
                r.update(payload=kind, http=server.http, loop=server.loop, loadavg=C.loadavg())
                results.append(r)
                print(
                    f"{kind:>15} x{clients:<3} {r['rps']:7.2f} req/s  p50 {r['p50_ms']:8.1f} ms  "
                    f"p99 {r['p99_ms']:8.1f} ms  server CPU {r['server_cpu_ms_per_request']:6.2f} ms/req  "
                    f"statuses={r['statuses']}",
                    flush=True,
                )
        logged = server.request_lines()
    finally:
        server.stop()
    if args.pure_python:  # uvicorn's pure-Python parser and asyncio's loop: what httptools and uvloop save
        pure = Server(args.threads, extra=(*limits, "--http", "h11", "--loop", "asyncio"))
        try:
            for kind in kinds:
                r = run_level(pure.port, bodies[kind], 1, args.duration_s, args.warmup, pure)
                r.update(payload=kind, http=pure.http, loop=pure.loop, loadavg=C.loadavg())
                results.append(r)
                print(f"{kind:>15} x1 (h11, asyncio) server CPU {r['server_cpu_ms_per_request']:6.2f} ms/req")
        finally:
            pure.stop()
    stages = {kind: stage_times(bodies[kind]) for kind in kinds}
    info["loadavg_end"] = C.loadavg()

    shown_limits = " ".join(limits) or "(the defaults: --max-concurrency 4 --max-queue 16 --queue-timeout 5)"
    notes = [
        f"Server: `ctxsel {' '.join(server.cmd[server.cmd.index('serve') :])}` {'' if limits else shown_limits} "
        f"(one uvicorn process on {server.http} and {server.loop}, one event loop; a small score-only cut "
        "such as this one runs on the loop, other work in worker threads), bearer token on, one JSON log line "
        "per request "
        f"({logged} logged), /metrics counting. Clients: threads in the benchmark process, one keep-alive "
        "`http.client` connection each (TCP_NODELAY), sending the same pre-encoded body back to back; a 503 "
        "is followed by a wait of its Retry-After; client and server share the machine's cores.",
        f"Request: {args.n_chunks:,} chunks of 60-100 words, method `{args.method}`, the selected chunks' text "
        f"returned. `scores`: {args.n_chunks:,} precomputed scores, {len(bodies['scores']) / 1e6:.2f} MB "
        "(the server counts the chunks' cl100k tokens); `scores+n_tokens`: chunk objects carrying their "
        f"`n_tokens`, {len(bodies['scores+n_tokens']) / 1e6:.2f} MB; `embeddings`: {args.dim}-d float32 "
        f"vectors instead of scores, {len(bodies['embeddings']) / 1e6:.1f} MB.",
        f"Each level runs {args.duration_s:g} s after {args.warmup} warm-up requests. requests/s: responses with "
        "status 200 per second of wall time; p50 / p99: their latencies seen by the client (first byte sent to "
        "last byte received). statuses: every answer, by status.",
    ]
    md = [C.header_md("HTTP service load: POST /select, 1,000 chunks", info, notes), ""]
    rows = []
    for r in results:
        seen = ", ".join(f"{n} x {s}" for s, n in sorted(r["statuses"].items())) or "-"
        la = r.get("loadavg")
        rows.append(
            [
                f"`{r['payload']}`",
                f"{r['http']}, {r['loop']}",
                str(r["clients"]),
                f"{r['rps']:.1f}",
                C.fmt_ms(r["p50_ms"]),
                C.fmt_ms(r["p99_ms"]),
                f"{r['p99_ms'] / r['p50_ms']:.1f}",
                f"{r['server_cpu_ms_per_request']:.2f}",
                seen,
                str(sum(r["connection_errors"].values())),
                "{} -> {}".format(*r["server_threads"]),
                f"{la[0]:.1f}" if la else "?",
            ]
        )
    md += [
        "## Throughput, latency, statuses and the server's CPU per request",
        "",
        "Server CPU: user + system seconds of the server process (from /proc) over the level, divided by the "
        "requests answered 200; it includes HTTP, JSON logs, metrics and any worker threads. The same body is "
        "sent again and again, so after the first request the server's token counts come from its LRU. "
        "connection errors: requests that got no answer (the connection failed or was closed under the "
        "client). server threads: the server process's threads before -> after the level (/proc). "
        "load: the 1-minute load average after the level.",
        "",
        C.md_table(
            [
                "payload",
                "HTTP parser, loop",
                "clients",
                "requests/s",
                "p50 ms",
                "p99 ms",
                "p99 / p50",
                "server CPU ms / request",
                "statuses",
                "connection errors",
                "server threads",
                "load",
            ],
            rows,
            ["l", "l", "r", "r", "r", "r", "r", "r", "l", "r", "r", "r"],
        ),
        "",
    ]
    by = {(r["payload"], r["clients"]): r for r in results if (r["http"], r["loop"]) == (server.http, server.loop)}
    if ("scores", 8) in by:
        r8 = by[("scores", 8)]
        cpu = max(r["server_cpu_ms_per_request"] for (k, _), r in by.items() if k == "scores")
        no_500 = all(500 not in r["statuses"] for r in results)
        no_503 = 503 not in r8["statuses"]
        ratio = r8["p99_ms"] / r8["p50_ms"]
        md += [
            "Goals (issue 45), `scores`: never a 500: **"
            + ("met" if no_500 else "not met")
            + "**; no 503 at 8 clients with the default settings: **"
            + ("met" if no_503 else "not met")
            + f"**; p99 <= 3 x p50 at 8 clients: **{ratio:.1f}x, {'met' if ratio <= 3 else 'not met'}**; "
            f"server CPU per request <= 3 ms: **{cpu:.2f} ms (the highest of the levels), "
            f"{'met' if cpu <= 3 else 'not met'}**.",
            "",
        ]
    if ("scores", 8) in by and ("scores", 32) in by:
        r8, r32 = by[("scores", 8)], by[("scores", 32)]
        only_200 = set(r8["statuses"]) == {200} and not r8["connection_errors"]
        documented = set(r32["statuses"]) <= {200, 503} and not r32["503_without_retry_after"]
        clean = not any(r["connection_errors"] for r in results)
        md += [
            "Goals (issue 68), `scores`: nothing but 200s at 8 clients: **"
            + ("met" if only_200 else "not met")
            + "**; at 32 clients only 200s and 503s with Retry-After: **"
            + ("met" if documented else "not met")
            + f"** ({r32['503_without_retry_after']} without); no connection errors at any level: **"
            + ("met" if clean else "not met")
            + "**.",
            "",
        ]
    for kind, st in stages.items():
        md += [
            f"## Where one request's time goes (in process, no HTTP; `{kind}` payload)",
            "",
            "Median (p90) in ms, each stage timed alone in the benchmark process after the load runs. The server "
            "parses the body with pydantic-core's JSON parser (in a worker thread above 1 MiB), validates it, "
            "then runs chunks, scores and select: on the event loop for a small score-only cut like this "
            "one (`Service.runs_inline`), else in a worker thread under the deadline.",
            "",
            C.md_table(["stage", "ms: median (p90)"], [[n, C.fmt_cell(x)] for n, x in st]),
            "",
        ]
    C.write_report(
        "serve_load",
        args.out,
        "\n".join(md),
        {
            "info": info,
            "args": vars(args),
            "results": results,
            "stages": {kind: {n: x for n, x in st} for kind, st in stages.items()},
            "body_bytes": {k: len(v) for k, v in bodies.items()},
        },
    )
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
