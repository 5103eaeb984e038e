"""``ctxsel eval`` on hotpotqa-long: the local engine against ``--engine ray``.

Runs the command line as a user would (a subprocess each), all 100 questions,
the default method set (15 methods), dense MiniLM scores, and measures:

- cold: a fresh, empty embedding cache (the 991 paragraphs are embedded:
  once by the local engine, once per actor by Ray, all writing one cache);
- warm: the cache filled by the cold local run;
- Ray startup alone: ``import ray`` + ``ray.init(num_cpus=2,
  include_dashboard=False)`` and ``ray.shutdown()`` in a new process;
- and checks that each Ray run's summary.json equals the local one field by
  field (timing columns ``select_ms`` / ``wall_s`` and the engine name aside).

    python -m benchmarks.ray_engine [--threads 1] [--repeats 1] [--startup-repeats 3]

Writes benchmarks/results/ray_engine.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import _common as C

TIMING = {"select_ms", "wall_s"}
RAY_LINE = re.compile(
    r"ray: (?P<how>.+?) \((?P<init>[\d.]+) s\), (?P<cpus>[\d.]+) CPUs, (?P<actors>\d+) actors "
    r"x (?P<cpa>[\d.]+) CPU; examples took (?P<run>[\d.]+) s"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--dataset", default="hotpotqa-long")
    p.add_argument("--methods", default=None, help="method specs (default: ctxsel eval's default set)")
    p.add_argument("--limit", type=int, default=None, help="only the first N questions")
    p.add_argument("--repeats", type=int, default=1, help="warm runs of each engine (default 1)")
    p.add_argument("--startup-repeats", type=int, default=3, help="Ray start/stop measurements (default 3)")
    p.add_argument("--skip-cold", action="store_true", help="only warm runs (the cache is filled first)")
    p.add_argument("--ray-actors", type=int, default=None)
    p.add_argument("--ray-cpus-per-actor", type=float, default=0.5)
    return p.parse_args(argv)


def run_eval(args: argparse.Namespace, out: Path, cache: Path, engine: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "ctxsel.cli.main",
        "eval",
        "--dataset",
        args.dataset,
        "--output",
        str(out),
        "--overwrite",
        "--threads",
        str(args.threads),
        "--no-progress",
    ]
    if args.methods:
        cmd += ["--methods", args.methods]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    if engine == "ray":
        cmd += [
            "--engine",
            "ray",
            "--ray-num-cpus",
            str(os.cpu_count() or 2),
            "--ray-cpus-per-actor",
            str(args.ray_cpus_per_actor),
        ]
        if args.ray_actors:
            cmd += ["--ray-actors", str(args.ray_actors)]
    env = {**os.environ, "CTXSEL_CACHE_DIR": str(cache)}
    env.pop("RAY_ADDRESS", None)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    res: dict[str, Any] = {"engine": engine, "wall_s": round(wall, 2)}
    m = RAY_LINE.search(proc.stderr)
    if engine == "ray":
        if not m:
            raise RuntimeError(f"no ray summary line in stderr:\n{proc.stderr[-2000:]}")
        res.update(
            ray_init_s=float(m["init"]),
            ray_examples_s=float(m["run"]),
            actors=int(m["actors"]),
            cpus_per_actor=float(m["cpa"]),
            cluster_cpus=float(m["cpus"]),
        )
    return res


def summary_diff(a: Path, b: Path) -> list[str]:
    sa = json.loads((a / "summary.json").read_text(encoding="utf-8"))
    sb = json.loads((b / "summary.json").read_text(encoding="utf-8"))
    diffs = []
    ca = {k: v for k, v in sa["config"].items() if k != "engine"}
    cb = {k: v for k, v in sb["config"].items() if k != "engine"}
    if ca != cb:
        diffs.append("config")
    if list(sa["methods"]) != list(sb["methods"]):
        diffs.append("method list")
    for m, entry in sa["methods"].items():
        for f, v in entry.items():
            if f not in TIMING and sb["methods"].get(m, {}).get(f) != v:
                diffs.append(f"{m}.{f}: {v} != {sb['methods'].get(m, {}).get(f)}")
    return diffs


def ray_startup(repeats: int) -> list[dict[str, float]]:
    code = (
        "import time; t0 = time.perf_counter(); import ray; t1 = time.perf_counter()\n"
        "ray.init(address='local', num_cpus=2, include_dashboard=False); t2 = time.perf_counter()\n"
        "ray.shutdown(); t3 = time.perf_counter()\n"
        "print('RESULT', t1 - t0, t2 - t1, t3 - t2)\n"
    )
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        total = time.perf_counter() - t0
        imp, init, stop = (float(x) for x in proc.stdout.split("RESULT")[1].split())
        out.append(
            {
                "import_s": round(imp, 2),
                "init_s": round(init, 2),
                "shutdown_s": round(stop, 2),
                "process_s": round(total, 2),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    thread_info = C.setup_threads(args.threads)
    info = C.machine_info(thread_info, versions=("ray",))
    work = Path(tempfile.mkdtemp(prefix="ctxsel-ray-bench-"))
    runs: list[dict[str, Any]] = []
    try:
        cache = work / "cache"
        ref = work / "local-cold"
        if not args.skip_cold:
            print("cold local ...", flush=True)
            runs.append({**run_eval(args, ref, cache, "local"), "cache": "cold"})
            print("cold ray ...", flush=True)
            cold_ray_cache = work / "cache-ray"
            r = run_eval(args, work / "ray-cold", cold_ray_cache, "ray")
            diffs = summary_diff(ref, work / "ray-cold")
            r.update(cache="cold", same_summary_as_local=not diffs, diffs=diffs)
            runs.append(r)
        else:
            print("filling the cache ...", flush=True)
            run_eval(args, ref, cache, "local")
        for i in range(args.repeats):
            print(f"warm local {i + 1} ...", flush=True)
            runs.append({**run_eval(args, work / "local-warm", cache, "local"), "cache": "warm"})
            print(f"warm ray {i + 1} ...", flush=True)
            r = run_eval(args, work / "ray-warm", cache, "ray")
            diffs = summary_diff(ref, work / "ray-warm")
            r.update(cache="warm", same_summary_as_local=not diffs, diffs=diffs)
            runs.append(r)
        print("ray startup ...", flush=True)
        startup = ray_startup(args.startup_repeats)
        ref_summary = json.loads((ref / "summary.json").read_text(encoding="utf-8"))
        n_methods, n_q = len(ref_summary["methods"]), ref_summary["config"]["n_examples"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info["loadavg_end"] = C.loadavg()

    md = C.header_md(
        "ctxsel eval: local engine vs --engine ray",
        info,
        [
            f"Dataset: {args.dataset}, {n_q} questions x {n_methods} methods "
            f"({'the default set' if not args.methods else args.methods}), dense MiniLM scores (`--threads {args.threads}`)",
            'Ray: a local cluster started by the command (`ray.init(address="local", num_cpus=N, include_dashboard=False)`), '
            "shut down at the end; wall time is the whole `ctxsel eval` process, as a user sees it",
        ],
    )
    md += "\n| engine | cache | wall s | Ray start s | examples s | actors | same summary as local |\n"
    md += "|---|---|---:|---:|---:|---:|---|\n"
    for r in runs:
        same = (
            "-"
            if r["engine"] == "local"
            else ("yes" if r["same_summary_as_local"] else "NO: " + "; ".join(r["diffs"][:3]))
        )
        md += (
            f"| {r['engine']} | {r['cache']} | {r['wall_s']:.1f} | {r.get('ray_init_s', '-')} | "
            f"{r.get('ray_examples_s', '-')} | "
            f"{'-' if r['engine'] == 'local' else str(r['actors']) + ' x ' + format(r['cpus_per_actor'], 'g') + ' CPU'} | "
            f"{same} |\n"
        )
    md += '\nRay startup alone (new process each time): import ray, `ray.init(address="local", num_cpus=2, include_dashboard=False)`, `ray.shutdown()`:\n\n'
    md += "| run | import s | init s | shutdown s | whole process s |\n|---:|---:|---:|---:|---:|\n"
    for i, s in enumerate(startup, start=1):
        md += f"| {i} | {s['import_s']} | {s['init_s']} | {s['shutdown_s']} | {s['process_s']} |\n"
    md += (
        "\n'Ray start' is `ray.init` inside `ctxsel eval`; 'examples' is the Ray Data run itself (actor start-up: "
        "loading MiniLM once per actor, then every question). Cold runs embed the 991 paragraphs: the local engine "
        "once, each Ray actor once on its first question (they share one cache file), so on one 2-core machine Ray "
        "cannot beat the local engine; it is there to spread the evaluation over more machines "
        "(`--ray-address`, see README).\n"
    )
    C.write_report(
        "ray_engine",
        args.out,
        md,
        {"machine": info, "runs": runs, "ray_startup": startup, "n_questions": n_q, "n_methods": n_methods},
    )
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
