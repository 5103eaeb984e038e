"""nomic-embed-text-v1.5's routes side by side in one run: llama.cpp f16 and Q8_0, ONNX Runtime fp32
(length-sorted batches) and int8 (today's recipe, one text a thread (the default) and one text on
all threads; and the previous recipe, the down projections in fp32, where its file is still cached).

Passages/s and CPU-seconds per passage on the first N hotpotqa-long pool paragraphs (each with its
``search_document: `` prefix), cold (the backend's ``encode``, no cache), in blocks interleaved in
a rotating order so a change in the machine's load hits every route alike; the 1-minute load average
is read before each block. Also each route's lowest and mean cosine to llama f16 (the reference),
and the compute floor: nomic's matrix-product work per passage against this machine's float32
matrix-multiply rate at nomic's shapes.

    PYTHONPATH=src python -m benchmarks.nomic_routes [--n 80] [--threads 2] [--recall DIR]

``--recall DIR``: a recall column from ``ctxsel eval`` runs on the hotpotqa-long TRAIN split, one
folder per backend, ``DIR/ev-train-<backend>/summary.json`` (top-n-tokens@1k and adaptive-k).

Writes benchmarks/results/nomic_routes.md / .json; compare routes by their ratio, within one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import _common as C

BLOCK = 20


def encoder_flops(lengths: list[int], layers: int = 12, hidden: int = 768, ff: int = 3072) -> float:
    """Multiply-add work (2 FLOP each) of nomic-bert over texts of these token lengths: per layer the
    fused Q/K/V and output projections (4 L H^2 MACs), SwiGLU's up, gate and down (3 L H F) and the
    attention scores and mix (2 L^2 H); norms, rotary, softmax and pooling left out: a lower bound."""
    return float(sum(2 * layers * (4 * n * hidden**2 + 3 * n * hidden * ff + 2 * n * n * hidden) for n in lengths))


def matmul_gflops(threads: int, repeats: int = 15) -> tuple[float, float]:
    """This machine's float32 matrix-multiply rate (torch) at nomic's feed-forward shape, 512 tokens x
    768 x 3,072: the best GFLOP per wall second with ``threads`` threads, and the best GFLOP per CPU
    second (less hurt by other jobs: the floor on a busy machine)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(512, 768), torch.randn(768, 3072)
    a @ b
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(4):
            a @ b
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    work = 4 * 2 * 512 * 768 * 3072 / 1e9
    return work / best_wall, work / max(best_cpu, 1e-9)


def train_recall(folder: Path, backend: str) -> dict[str, float]:
    """Recall (%) of top-n-tokens@1k and adaptive-k, and adaptive-k's tokens, from an eval summary."""
    path = folder / f"ev-train-{backend}" / "summary.json"
    if not path.is_file():
        return {}
    rows = json.loads(path.read_text(encoding="utf-8"))["methods"]
    out = {}
    for method, key in (("top-n-tokens@1k", "recall_1k"), ("adaptive-k", "recall_adaptive_k")):
        if method in rows:
            out[key] = 100 * float(rows[method]["recall"])
    if "adaptive-k" in rows:
        out["tokens_adaptive_k"] = float(rows["adaptive-k"]["n_tokens"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=80)
    ap.add_argument("--recall", type=Path, default=None, help="folder of train-split eval runs (see above)")
    C.add_common_args(ap)
    args = ap.parse_args(argv)
    thread_info = C.setup_threads(args.threads)
    info = C.machine_info(thread_info, ("numpy", "onnxruntime", "llama_cpp_python", "torch"))
    import numpy as np

    from ctxsel.datasets.hotpotqa import load_hotpotqa_long
    from ctxsel.scoring.llama_embed import LlamaEmbedBackend
    from ctxsel.scoring.nomic_onnx import NomicOnnxBackend
    from ctxsel.scoring.onnx_backend import cpu_session

    texts = list(dict.fromkeys(c.text for ex in load_hotpotqa_long() for c in ex.chunks))[: args.n]
    texts = ["search_document: " + t for t in texts]
    t = args.threads
    backs: dict[str, Any] = {}
    load_s: dict[str, float] = {}
    for name, make in (
        ("llama f16", lambda: LlamaEmbedBackend("nomic-v1.5", "f16", num_threads=t)),
        ("llama Q8_0", lambda: LlamaEmbedBackend("nomic-v1.5", "q8_0", num_threads=t)),
        ("onnx fp32, sorted batches", lambda: NomicOnnxBackend("nomic-v1.5", quantize=False, num_threads=t)),
        ("onnx int8, one text a thread", lambda: NomicOnnxBackend("nomic-v1.5", quantize=True, num_threads=t)),
        (
            "onnx int8, one text on all threads",
            lambda: NomicOnnxBackend("nomic-v1.5", quantize=True, num_threads=t, texts_at_once=1),
        ),
    ):
        t0 = time.perf_counter()
        backs[name] = make()
        load_s[name] = time.perf_counter() - t0
    previous = backs["onnx int8, one text a thread"].path.with_name("model_int8_keep-down.onnx")
    if previous.is_file():  # the recipe before smoothing: every MatMul int8 but the MLP's down projections
        t0 = time.perf_counter()
        old = NomicOnnxBackend("nomic-v1.5", quantize=True, num_threads=t, texts_at_once=1)  # as measured before
        old.session = cpu_session(previous, t)
        backs["onnx int8, previous recipe (down in fp32)"] = old
        load_s["onnx int8, previous recipe (down in fp32)"] = time.perf_counter() - t0
    backend_of = {
        "llama f16": "llama-f16",
        "llama Q8_0": "llama-q8_0",
        "onnx fp32, sorted batches": "onnx",
        "onnx int8, one text a thread": "onnx-int8",
        "onnx int8, one text on all threads": "onnx-int8",  # the same vectors: each text is still read alone
    }
    batch = dict.fromkeys(backs, 32)
    names = list(backs)
    wall = dict.fromkeys(names, 0.0)
    cpu = dict.fromkeys(names, 0.0)
    vecs: dict[str, list[np.ndarray]] = {q: [] for q in names}
    loads: list[float] = []
    for k, start in enumerate(range(0, len(texts), BLOCK)):
        block = texts[start : start + BLOCK]
        for name in names[k % len(names) :] + names[: k % len(names)]:
            la = C.loadavg()
            loads.append(la[0] if la else float("nan"))
            print(f"block {k}, {name} (load {loads[-1]})", file=sys.stderr)
            t0, c0 = time.perf_counter(), time.process_time()
            vecs[name].append(backs[name].encode(block, batch_size=batch[name]))
            wall[name] += time.perf_counter() - t0
            cpu[name] += time.process_time() - c0
    ref = np.concatenate(vecs["llama f16"])
    n = len(texts)
    tokens = [len(backs["llama f16"].tokenize(x)) for x in texts]
    rate, rate_cpu = matmul_gflops(args.threads)
    flop = encoder_flops(tokens) / n
    rows = {}
    for name in names:
        cos = (np.concatenate(vecs[name]) * ref).sum(1)
        rows[name] = {
            "passages_per_s": n / wall[name],
            "cpu_s_per_passage": cpu[name] / n,
            "min_cos_f16": float(cos.min()),
            "mean_cos_f16": float(cos.mean()),
            "load_s": load_s.get(name, 0.0),
        }
        if args.recall is not None and name in backend_of:
            rows[name] |= train_recall(args.recall, backend_of[name])
    info["loadavg_end"] = C.loadavg()
    floor = {
        "gflop_per_passage": flop / 1e9,
        "fp32_matmul_gflops_wall": rate,
        "fp32_matmul_gflop_per_cpu_s": rate_cpu,
        "max_passages_per_s_fp32": rate * 1e9 / flop,
        "min_cpu_s_per_passage_fp32": flop / (rate_cpu * 1e9),
    }
    fastest = max(rows, key=lambda r: rows[r]["passages_per_s"])
    notes = [
        f"Passages: the first {n} hotpotqa-long pool paragraphs with `search_document: `; tokens mean "
        f"{np.mean(tokens):.0f} (max {max(tokens)}), [CLS] and [SEP] included.",
        f"Blocks of {BLOCK} passages, routes in a rotating order; 1-minute load average over the blocks: "
        f"min {min(loads):.2f}, max {max(loads):.2f}, mean {np.mean(loads):.2f}.",
        "Cold: each route's `encode` on texts it has not seen (no embedding cache); CPU-s = this process's CPU "
        "time, less sensitive to other jobs than wall time. int8 reads one text a run (see ctxsel.scoring.nomic_onnx).",
    ]
    if args.recall is not None:
        notes.append(
            "Recall: hotpotqa-long TRAIN split (80 questions), no expansion, from `ctxsel eval --dataset hotpotqa-long "
            "--split train --scorer 'dense[model=nomic-v1.5,backend=B]' --methods adaptive-k,top-n-tokens@1k "
            f"--threads 2 --output {args.recall}/ev-train-B`; `-`: not measured."
        )

    def pct(r: dict[str, Any], key: str) -> str:
        return f"{r[key]:.1f}" if key in r else "-"

    table = C.md_table(
        [
            "route",
            "passages/s",
            "CPU-s / passage",
            "min cos to f16",
            "mean cos to f16",
            "recall top-n-tokens@1k (train)",
            "recall adaptive-k (train)",
            "load (s)",
        ],
        [
            [
                f"`{name}`",
                f"{r['passages_per_s']:.2f}",
                f"{r['cpu_s_per_passage']:.3f}",
                f"{r['min_cos_f16']:.4f}",
                f"{r['mean_cos_f16']:.4f}",
                pct(r, "recall_1k"),
                pct(r, "recall_adaptive_k")
                + (f" at {r['tokens_adaptive_k']:.0f} tokens" if "tokens_adaptive_k" in r else ""),
                f"{r['load_s']:.1f}",
            ]
            for name, r in rows.items()
        ],
        ["l", "r", "r", "r", "r", "r", "r", "r"],
    )
    md = (
        C.header_md("nomic-embed-text-v1.5: routes side by side", info, notes)
        + "\n"
        + table
        + "\n\nFastest route in this run: **"
        + fastest
        + f"**. Compute floor: nomic's matrix products need at least {floor['gflop_per_passage']:.2f} GFLOP per "
        f"passage here, and this machine multiplies float32 matrices of nomic's shapes at {rate:.0f} GFLOP/s "
        f"with {args.threads} threads at best (torch; {rate_cpu:.0f} GFLOP per CPU-second), so no float32 route "
        f"can pass **{floor['max_passages_per_s_fp32']:.1f} passages/s** in this run, nor spend less than "
        f"**{floor['min_cpu_s_per_passage_fp32']:.3f} CPU-s per passage** (int8 with VNNI can go below it: four "
        "8-bit products per 32-bit lane).\n"
    )
    md_path, _ = C.write_report("nomic_routes", args.out, md, {"info": info, "rows": rows, "floor": floor, "n": n})
    print(md)
    print(f"wrote {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
