"""The dense window check in a new process over cached texts: with and without stored token counts.

The dense scorer checks which chunks are longer than the model's window (to warn, count them in
``Selection.meta["truncated"]`` and, with ``long_chunks=max_window``, score them by windows). A
process whose vectors all come from the embedding cache used to tokenise every chunk for that
check; the cache now stores each text's token count beside its vector. This script fills a cache
with N random unit vectors for N synthetic 100-word chunks (so no time goes to embedding), then
times ``DenseScorer.score`` in fresh processes, interleaved: with the token counts removed from the
cache (what the first process over a pool pays, and every process paid before) and with them
stored.

    python -m benchmarks.cold_window [--n 20000] [--repeats 3]

Writes benchmarks/results/cold_window.{md,json}.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks import _common as C

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "harbour",
    "observatory",
    "telescope",
    "meteorite",
    "ticket",
    "museum",
    "bus",
    "line",
]


def texts(n: int) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(100)) + f" {i}" for i in range(n)]


def fill(path: Path, n: int) -> None:
    """N random unit vectors under the keys the scorer looks up, and the question's."""
    import numpy as np

    from ctxsel.scoring.cache import text_key
    from ctxsel.scoring.dense import DenseScorer

    s = DenseScorer(cache=path)
    assert s.cache is not None
    vecs = np.random.default_rng(0).standard_normal((n + 1, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    keys = [text_key(s.model_id, s.document_prefix + t) for t in texts(n)]
    keys.append(text_key(s.model_id, s.query_prefix + "question"))
    s.cache.put_many(dict(zip(keys, vecs)))


def score_once(path: Path, n: int) -> float:
    """One fresh process's ``score()`` over the N cached chunks, in seconds (printed by the child)."""
    from ctxsel.scoring.dense import DenseScorer
    from ctxsel.types import as_chunks

    chunks = as_chunks(texts(n))
    scorer = DenseScorer(cache=path)
    t0 = time.perf_counter()
    scorer.score("question", chunks)
    return time.perf_counter() - t0


def child(path: Path, n: int, with_counts: bool) -> float:
    if not with_counts:
        with sqlite3.connect(path) as con:
            con.execute("DELETE FROM lens")
    cmd = [*C.module_argv("benchmarks.cold_window"), "--child", str(path), "--n", str(n)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=C.child_env())
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--n", type=int, default=20000, help="cached chunks scored (default 20,000)")
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per case (default 3)")
    p.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    thread_info = C.setup_threads(args.threads)
    if args.child is not None:
        print(score_once(args.child, args.n))
        return
    info = C.machine_info(thread_info, ("numpy", "tokenizers", "onnxruntime"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "embeddings.sqlite"
        fill(path, args.n)
        runs: dict[str, list[float]] = {"without stored counts": [], "with stored counts": []}
        for _ in range(args.repeats):
            runs["without stored counts"].append(child(path, args.n, with_counts=False))
            runs["with stored counts"].append(child(path, args.n, with_counts=True))
    info["loadavg_end"] = C.loadavg()
    stats = {k: C.summarize(v) for k, v in runs.items()}
    ratio = stats["without stored counts"]["median_ms"] / stats["with stored counts"]["median_ms"]
    rows = [[k, C.fmt_cell(s), f"{s['min_ms'] / 1000:.2f} s"] for k, s in stats.items()]
    md = C.header_md(
        "Dense window check over cached texts, new process",
        info,
        [
            f"{args.n:,} synthetic 100-word chunks (about 650 characters each, so none takes the short-ASCII "
            "shortcut and each is tokenised), their vectors in the cache"
        ],
    )
    md += "\n" + C.md_table(["cache", "`score()`: median (p90), ms", "fastest"], rows, ["l", "r", "r"])
    md += f"\n\nStored token counts make a new process's first `score()` {ratio:.1f}x faster.\n"
    md_path, js_path = C.write_report("cold_window", args.out, md, {"info": info, "runs": runs, "stats": stats})
    print(md)
    print(f"wrote {md_path}, {js_path}")


if __name__ == "__main__":
    main()
