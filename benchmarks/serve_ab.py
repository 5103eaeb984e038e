"""Server CPU per request of two versions of ``ctxsel serve``, measured in one run: the current
checkout and an earlier git revision answer the same POST /select (``serve_load``'s request:
1,000 chunks with scores, adaptive-k, one keep-alive client) in alternating blocks, so that
whatever else loads the machine hits both alike. The ratio is the result; the absolute numbers
are only as quiet as the machine.

    python -m benchmarks.serve_ab --baseline REV [--blocks 6] [--block-s 4] [--payload scores]

The baseline's ``src`` is exported with ``git archive`` into a temporary folder and served from
there (its own code, this environment's packages). Writes benchmarks/results/serve_ab.{md,json}
(another payload: serve_ab_PAYLOAD.{md,json}).
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import _common as C
from benchmarks.serve_load import Server, make_payloads, post


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--baseline", required=True, help="the git revision to compare against (a commit, tag or branch)")
    p.add_argument("--blocks", type=int, default=6, help="timed blocks per server, alternating")
    p.add_argument("--block-s", type=float, default=4.0, help="seconds per block")
    p.add_argument("--payload", default="scores", help="scores, scores+n_tokens or embeddings (serve_load's)")
    p.add_argument("--n-chunks", type=int, default=1000)
    return p.parse_args(argv)


def export_src(rev: str, into: Path) -> tuple[Path, str]:
    """``rev``'s ``src`` folder under ``into``, and the commit it names."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=C.ROOT, check=True, capture_output=True, text=True
    )
    archive = subprocess.run(["git", "archive", rev, "src"], cwd=C.ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src", commit.stdout.strip()


def block(server: Server, body: bytes, seconds: float) -> tuple[float, int]:
    """(server CPU seconds, requests answered 200) over ``seconds`` of back-to-back requests."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port)
    post(conn, body)  # a fresh connection (the last block's may have idled past keep-alive), warm
    cpu0, n, end = server.cpu_s(), 0, time.monotonic() + seconds
    while time.monotonic() < end:
        status, data, _ = post(conn, body)
        if status != 200:
            raise RuntimeError(f"status {status}: {data[:300]!r}")
        n += 1
    cpu = server.cpu_s() - cpu0
    conn.close()
    return cpu, n


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = C.machine_info(C.setup_threads(args.threads), versions=("fastapi", "uvicorn", "pydantic"))
    body = json.dumps(make_payloads(args.n_chunks, 384, 0, "adaptive-k")[args.payload]).encode()
    with tempfile.TemporaryDirectory(prefix="serve-ab-") as tmp:
        base_src, base_commit = export_src(args.baseline, Path(tmp))
        servers = {
            f"baseline ({base_commit})": Server(args.threads, src=base_src),
            "this checkout": Server(args.threads),
        }
        totals: dict[str, list[float]] = {name: [0.0, 0] for name in servers}
        blocks: list[dict[str, Any]] = []
        try:
            for b in range(args.blocks):
                for name, server in servers.items():
                    cpu, n = block(server, body, args.block_s)
                    totals[name][0] += cpu
                    totals[name][1] += n
                    blocks.append({"block": b, "server": name, "cpu_ms_per_request": cpu / n * 1e3, "requests": n})
                    print(f"block {b} {name:>20}: {cpu / n * 1e3:.2f} ms CPU / request ({n} requests)", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    info["loadavg_end"] = C.loadavg()
    per = {name: cpu / n * 1e3 for name, (cpu, n) in totals.items()}
    base_name, new_name = list(servers)
    rows = [[name, f"{int(totals[name][1]):,}", f"{ms:.2f}"] for name, ms in per.items()]
    md = C.header_md(
        "Server CPU per request: this checkout against an earlier revision, in one run",
        info,
        notes=[
            f"Request: serve_load's `{args.payload}` payload ({args.n_chunks:,} chunks, adaptive-k), one keep-alive "
            f"client; {args.blocks} blocks of {args.block_s:g} s per server, alternating; server CPU from /proc.",
        ],
    )
    md += "\n" + C.md_table(["server", "requests", "server CPU ms / request"], rows, ["l", "r", "r"])
    md += f"\n\nRatio (this checkout / baseline): **{per[new_name] / per[base_name]:.2f}**.\n"
    name = "serve_ab" if args.payload == "scores" else f"serve_ab_{args.payload.replace('+', '_')}"
    C.write_report(name, args.out, md, {"info": info, "per_request_ms": per, "blocks": blocks})
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
