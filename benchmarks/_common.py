"""Shared helpers for the benchmark scripts (not part of the ctxsel package).

Each script calls ``setup_threads(argv)`` BEFORE importing numpy or torch, so
OMP_NUM_THREADS / MKL_NUM_THREADS / OPENBLAS_NUM_THREADS take effect, then
``machine_info()`` for the report header and ``write_report()`` to write
``benchmarks/results/NAME.md`` and ``NAME.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
BUSY_LOAD = 1.5  # load average above which the header warns about contention

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def module_argv(module: str) -> list[str]:
    """How to start ``module`` (``benchmarks.NAME``) in a new process, wherever that process's folder is."""
    return [sys.executable, "-m", module]


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the repository root on PYTHONPATH, so the child finds ``benchmarks``."""
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), out.get("PYTHONPATH", "")) if p)
    return out


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads", type=int, default=1, help="torch / OpenMP / BLAS threads (default 1; recorded in the report)"
    )
    p.add_argument(
        "--out", type=Path, default=RESULTS_DIR, help="folder for NAME.md / NAME.json (default benchmarks/results)"
    )


def setup_threads(threads: int) -> dict[str, Any]:
    """Pin thread counts via the environment; call before importing numpy/torch.

    Returns what the environment said before, for the record.
    """
    before = {v: os.environ.get(v) for v in _THREAD_VARS}
    for v in _THREAD_VARS:
        os.environ[v] = str(threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    return {"threads": threads, "env_before": before}


def set_torch_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (interop threads can only be set once)
        pass


def loadavg() -> tuple[float, float, float] | None:
    try:
        a, b, c = Path("/proc/loadavg").read_text().split()[:3]
        return float(a), float(b), float(c)
    except (OSError, ValueError):
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> str:
    from ctxsel.scoring.onnx_backend import cpu_flags as read_flags

    flags = read_flags()
    if not flags:
        return "unknown"
    return ", ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "fma") if f in flags) or "no AVX2"


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _versions(extra: tuple[str, ...]) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "ctxsel", *extra):
        try:
            m = __import__(mod)
            out[mod] = str(getattr(m, "__version__", None) or importlib.metadata.version(mod))
        except Exception:
            pass
    return out


def machine_info(thread_info: dict[str, Any], versions: tuple[str, ...] = ()) -> dict[str, Any]:
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        affinity = os.cpu_count() or 1
    head = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--", "src"))
    script = Path(sys.argv[0]).resolve()
    # run as `python -m benchmarks.NAME` or `python -m experiments.NAME`: argv[0] is the module's file
    room = script.parent
    argv0 = ["-m", f"{room.name}.{script.stem}"] if room in (BENCH_DIR, ROOT / "experiments") else [sys.argv[0]]
    python = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(str(ROOT)) else sys.executable
    return {
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": affinity,
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join([python, *argv0, *sys.argv[1:]]),
        "cwd": os.getcwd(),
        "threads": thread_info["threads"],
        "thread_env_before": thread_info["env_before"],
        "loadavg_start": loadavg(),
        "git": (head or "?") + ("+dirty src" if dirty else ""),
        "versions": _versions(versions),
        "platform": platform.platform(),
    }


def header_md(title: str, info: dict[str, Any], notes: Sequence[str] = ()) -> str:
    la = info.get("loadavg_start")
    lae = info.get("loadavg_end")
    lines = [
        f"# {title}",
        "",
        f"- Machine: {info['cpu_model']} ({info['cpu_flags']}), {info['logical_cpus']} logical cores "
        f"({info['usable_cpus']} usable), {info['platform']}",
        f"- Date: {info['date']}",
        f"- Threads: {info['threads']} (torch.set_num_threads and OMP/MKL/OPENBLAS_NUM_THREADS; "
        f"OMP_NUM_THREADS before the script: {info['thread_env_before'].get('OMP_NUM_THREADS') or 'unset'})",
        f"- Command: `{info['command']}` "
        + ("(run from the repository root)" if Path(info["cwd"]) == ROOT else f"(run from `{info['cwd']}`)"),
        f"- Code: ctxsel {info['versions'].get('ctxsel', '?')} at git {info['git']}; "
        + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if k != "ctxsel"),
    ]
    if la is not None:
        s = f"- Load average at start: {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} (1 / 5 / 15 min)"
        if lae is not None:
            s += f"; at end: {lae[0]:.2f} (the end value includes this benchmark's own load)"
        lines.append(s)
        if la[0] > BUSY_LOAD:
            lines.append(
                f"- **Warning: load average above {BUSY_LOAD} — another job was using the CPU; "
                "these timings are pessimistic and noisier than on a quiet machine.**"
            )
    lines.extend(f"- {n}" for n in notes)
    lines.append("")
    return "\n".join(lines)


def write_report(name: str, out_dir: Path, md: str, data: dict[str, Any]) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path = out_dir / f"{name}.md"
    js_path = out_dir / f"{name}.json"
    md_path.write_text(md if md.endswith("\n") else md + "\n", encoding="utf-8")
    js_path.write_text(json.dumps(data, indent=2, default=_json_default) + "\n", encoding="utf-8")
    return md_path, js_path


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# -- statistics ---------------------------------------------------------------


def percentile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``xs``, interpolated linearly (numpy's default)."""
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(times_s: list[float]) -> dict[str, Any]:
    """Median / p90 / min / mean in milliseconds, plus the raw count."""
    xs = sorted(times_s)
    n = len(xs)
    if n == 0:
        return {"n": 0}

    return {
        "n": n,
        "median_ms": percentile(xs, 0.5) * 1e3,
        "p90_ms": percentile(xs, 0.9) * 1e3,
        "min_ms": xs[0] * 1e3,
        "mean_ms": sum(xs) / n * 1e3,
        "max_ms": xs[-1] * 1e3,
    }


def time_calls(
    fn: Callable[[], Any],
    *,
    warmup: int = 2,
    budget_s: float = 0.5,
    min_repeats: int = 7,
    max_repeats: int = 500,
) -> list[float]:
    """Time ``fn()`` with perf_counter: ``warmup`` untimed calls, then as many
    timed calls as fit in ``budget_s`` (bounded by min/max repeats)."""
    t_est = None
    for _ in range(max(1, warmup)):
        t0 = time.perf_counter()
        fn()
        t_est = time.perf_counter() - t0
    assert t_est is not None
    repeats = int(min(max_repeats, max(min_repeats, budget_s / max(t_est, 1e-7))))
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 1:
        return f"{ms:.2f}"
    if ms >= 0.1:
        return f"{ms:.3f}"
    return f"{ms:.4f}"


def fmt_cell(stats: dict[str, Any] | None) -> str:
    """``median (p90)`` in ms."""
    if not stats or not stats.get("n"):
        return "—"
    return f"{fmt_ms(stats['median_ms'])} ({fmt_ms(stats['p90_ms'])})"


def md_table(headers: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    align = align or ["l"] + ["r"] * (len(headers) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
