"""nomic-embed-text-v1.5's llama.cpp routes (f16, Q8_0) side by side in one run: passages/s and
CPU-seconds per passage on the first N hotpotqa-long pool paragraphs (each with its
``search_document: `` prefix), cold, no cache, blocks of 25 interleaved (f16 then Q8_0, then the
other way round) so a change in the machine's load hits both alike; the 1-minute load average is
read before each block. Also the lowest cosine between the two routes' vectors.

    PYTHONPATH=src python benchmarks/nomic_routes.py [--n 200] [--threads 2]

Prints one JSON object; compare the routes by their ratio, and only within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from ctxsel.datasets.hotpotqa import load_hotpotqa_long
from ctxsel.scoring.llama_embed import LlamaEmbedBackend

BLOCK = 25


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    texts = list(dict.fromkeys(c.text for ex in load_hotpotqa_long() for c in ex.chunks))[: args.n]
    texts = ["search_document: " + t for t in texts]
    backs = {q: LlamaEmbedBackend("nomic-v1.5", q, num_threads=args.threads) for q in ("f16", "q8_0")}
    wall = dict.fromkeys(backs, 0.0)
    cpu = dict.fromkeys(backs, 0.0)
    vecs: dict[str, list[np.ndarray]] = {q: [] for q in backs}
    loads = []
    for start in range(0, len(texts), BLOCK):
        block = texts[start : start + BLOCK]
        for q in ("f16", "q8_0") if (start // BLOCK) % 2 == 0 else ("q8_0", "f16"):
            loads.append(os.getloadavg()[0])
            t0, c0 = time.perf_counter(), time.process_time()
            vecs[q].append(backs[q].encode(block, batch_size=32))
            wall[q] += time.perf_counter() - t0
            cpu[q] += time.process_time() - c0
    a, b = np.concatenate(vecs["f16"]), np.concatenate(vecs["q8_0"])
    n = len(texts)
    out = {
        "n": n,
        "threads": args.threads,
        "tokens": sum(len(backs["f16"].tokenize(t)) for t in texts),
        "load_1min_min_max_mean": [min(loads), max(loads), sum(loads) / len(loads)],
        **{f"{q}_passages_per_s": n / wall[q] for q in backs},
        **{f"{q}_cpu_s_per_passage": cpu[q] / n for q in backs},
        "q8_over_f16_speed": wall["f16"] / wall["q8_0"],
        "min_cosine_f16_q8": float((a * b).sum(1).min()),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
