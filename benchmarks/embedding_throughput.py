"""Embedding throughput of DenseScorer (bundled all-MiniLM-L6-v2) on the
hotpotqa-long paragraphs: cold (empty SQLite cache) and cached.

Cold: a fresh temporary CTXSEL_CACHE_DIR, so every paragraph is encoded by the
model (plus hashing and writing the cache); model import/load time and the
first encode call are reported separately. Each cold repeat gets a new empty
cache file. Cached: the same texts again, served from the SQLite cache
(the model is not called -- checked).

    python benchmarks/embedding_throughput.py [--threads 1] [--limit N] [--batch-size 32]

Writes benchmarks/results/embedding_throughput.{md,json}.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--limit", type=int, default=None, help="embed only the first N pool paragraphs (default all 991)")
    p.add_argument("--batch-size", type=int, default=32, help="DenseScorer batch size (default 32, the library default)")
    p.add_argument("--cold-repeats", type=int, default=2,
                   help="cold passes, each into a new empty cache (default 2: about a minute each at 1 thread)")
    p.add_argument("--cached-repeats", type=int, default=15, help="timed cached passes (default 15)")
    p.add_argument("--hotpotqa", default=None, help="path to hotpot_dev_distractor_100.json (default: auto)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    thread_info = C.setup_threads(args.threads)
    import os

    import numpy as np

    from ctxsel.datasets.hotpotqa import load_hotpotqa_long
    from ctxsel.scoring.cache import EmbeddingCache

    tmp = tempfile.TemporaryDirectory(prefix="ctxsel-bench-emb-")
    os.environ["CTXSEL_CACHE_DIR"] = tmp.name  # never touch the user's cache

    t0 = time.perf_counter()
    pool = load_hotpotqa_long(args.hotpotqa, limit=1)[0].chunks
    load_data_s = time.perf_counter() - t0
    if args.limit:
        pool = pool[: args.limit]
    texts = [c.text for c in pool]
    n = len(texts)

    # -- import + model load (reported separately) ---------------------------------
    t0 = time.perf_counter()
    import sentence_transformers
    import torch

    import_s = time.perf_counter() - t0
    C.set_torch_threads(args.threads)
    from ctxsel.scoring.dense import DenseScorer

    info = C.machine_info(thread_info, ("torch", "sentence_transformers", "transformers"))
    scorer = DenseScorer(batch_size=args.batch_size, num_threads=args.threads, show_progress=True)
    t0 = time.perf_counter()
    model = scorer.model
    model_load_s = time.perf_counter() - t0
    assert torch.get_num_threads() == args.threads, torch.get_num_threads()
    t0 = time.perf_counter()
    model.encode(["warm-up: a short sentence that is not in the pool."], normalize_embeddings=True)
    first_encode_s = time.perf_counter() - t0

    # passage statistics (what the model actually reads)
    tok = model.tokenizer
    max_len = int(model.max_seq_length)
    enc = tok(texts, add_special_tokens=True, truncation=False, verbose=False)
    lengths = np.array([len(ids) for ids in enc["input_ids"]])
    words = np.array([len(t.split()) for t in texts])

    # count and time the model calls the scorer makes
    encode_calls = {"n": 0, "texts": 0, "s": 0.0}
    orig_encode = scorer._encode

    def timed_encode(batch: list[str]):
        t = time.perf_counter()
        out = orig_encode(batch)
        encode_calls["s"] += time.perf_counter() - t
        encode_calls["n"] += 1
        encode_calls["texts"] += len(batch)
        return out

    scorer._encode = timed_encode  # type: ignore[method-assign]

    # -- cold passes -----------------------------------------------------------------
    cold = []
    ref = None
    for r in range(args.cold_repeats):
        scorer.cache = EmbeddingCache(Path(tmp.name) / f"cold-{r}" / "embeddings.sqlite")
        before = dict(encode_calls)
        print(f"cold pass {r + 1}/{args.cold_repeats}: {n} passages", file=sys.stderr)
        t0 = time.perf_counter()
        vecs = scorer.embed(texts)
        total = time.perf_counter() - t0
        enc_s = encode_calls["s"] - before["s"]
        assert encode_calls["texts"] - before["texts"] == len(set(texts)), "cold pass must encode every text"
        cold.append({"total_s": total, "encode_s": enc_s, "cache_overhead_s": total - enc_s,
                     "passages_per_s": n / total, "loadavg": C.loadavg()})
        ref = vecs if ref is None else ref
        if not np.allclose(vecs, ref, atol=1e-5):
            print("warning: cold passes gave different vectors", file=sys.stderr)

    # -- cached passes ---------------------------------------------------------------
    if ref is None:  # no cold pass requested: fill the cache once, untimed
        scorer.cache = EmbeddingCache(Path(tmp.name) / "fill" / "embeddings.sqlite")
        ref = scorer.embed(texts)
    cache_path = scorer.cache.path
    calls_before = encode_calls["n"]
    cached_times = C.time_calls(lambda: scorer.embed(texts), warmup=2, budget_s=0,
                                min_repeats=args.cached_repeats, max_repeats=args.cached_repeats)
    assert encode_calls["n"] == calls_before, "cached pass called the model"
    vecs = scorer.embed(texts)
    max_diff = float(np.abs(vecs - ref).max())

    # a new scorer on the same cache file: fresh SQLite connection, model never loaded
    fresh = DenseScorer(batch_size=args.batch_size, cache=EmbeddingCache(cache_path))
    t0 = time.perf_counter()
    fresh.embed(texts)
    fresh_first_s = time.perf_counter() - t0
    assert fresh._model is None, "the cached path should not load the model"
    info["loadavg_end"] = C.loadavg()
    cache_bytes = cache_path.stat().st_size + sum(
        p.stat().st_size for p in cache_path.parent.glob(cache_path.name + "-*"))

    # -- report ------------------------------------------------------------------------
    cold_total = C.summarize([c["total_s"] for c in cold])
    cold_enc = C.summarize([c["encode_s"] for c in cold])
    cold_over = C.summarize([c["cache_overhead_s"] for c in cold])
    cached = C.summarize(cached_times)

    def rate(stats: dict, key: str) -> str:
        return f"{n / (stats[key] / 1e3):,.1f}" if stats.get("n") else "—"

    def secs(stats: dict) -> str:
        if not stats.get("n"):
            return "—"
        return f"{stats['median_ms'] / 1e3:.4g} ({stats['p90_ms'] / 1e3:.4g})"

    rows = [
        ["cold: `scorer.embed(texts)`, empty cache", str(n), str(cold_total.get("n", 0)), secs(cold_total),
         rate(cold_total, "median_ms"), rate(cold_total, "p90_ms")],
        ["&nbsp;&nbsp;of which model encode", str(n), str(cold_enc.get("n", 0)), secs(cold_enc),
         rate(cold_enc, "median_ms"), rate(cold_enc, "p90_ms")],
        ["&nbsp;&nbsp;of which hashing + SQLite read/write", str(n), str(cold_over.get("n", 0)),
         secs(cold_over), "", ""],
        ["cached: same scorer, 2nd+ pass", str(n), str(cached["n"]), secs(cached),
         rate(cached, "median_ms"), rate(cached, "p90_ms")],
        ["cached: new DenseScorer, first call (new connection, no model)", str(n), "1",
         f"{fresh_first_s:.4g}", f"{n / fresh_first_s:,.1f}", ""],
    ]
    one_off = [
        ["load hotpotqa-long pool (JSON + cl100k token counts)", f"{load_data_s:.2f}"],
        ["import torch + sentence-transformers", f"{import_s:.2f}"],
        ["model load (`SentenceTransformer(bundled path)`)", f"{model_load_s:.2f}"],
        ["first `encode()` call, 1 short text", f"{first_encode_s:.3f}"],
    ]
    notes = [
        f"Model: bundled all-MiniLM-L6-v2 ({scorer.model_path}), 384-d, max_seq_length {max_len}; "
        f"device cpu; **batch size {args.batch_size}**; **threads {args.threads}**.",
        f"Passages: {n} hotpotqa-long pool paragraphs (`\"title: paragraph\"`); words per passage "
        f"mean {words.mean():.0f} (median {np.median(words):.0f}, max {words.max()}); MiniLM word pieces "
        f"mean {lengths.mean():.0f} (max {lengths.max()}), {int((lengths > max_len).sum())} truncated at {max_len}.",
        f"Cache: SQLite in a temporary CTXSEL_CACHE_DIR, deleted afterwards; each cold repeat writes a new empty "
        f"file; {cache_bytes / 1e6:.1f} MB for {n} vectors. Cached vectors equal the cold ones "
        f"(max |diff| {max_diff:.1e}); the cached passes never called the model.",
        "Time columns: median (p90) in seconds over repeats; passages/s = passages / time "
        "(at the median time, and at the p90 time = the slow end).",
    ]
    md = [C.header_md("Embedding throughput (DenseScorer, all-MiniLM-L6-v2)", info, notes)]
    md.append("## Throughput\n")
    md.append(C.md_table(["pass", "passages", "repeats", "time, s: median (p90)", "passages/s (median)",
                          "passages/s (p90 time)"], rows))
    md.append("\n## One-off costs (seconds, single measurement)\n")
    md.append(C.md_table(["step", "seconds"], one_off))
    md.append("\nPer cold repeat: " + "; ".join(
        f"#{i + 1}: {c['passages_per_s']:.1f} passages/s (encode {c['encode_s']:.1f} s, "
        f"load avg {c['loadavg'][0]:.2f})" for i, c in enumerate(cold)) + "." if cold else "")

    data = {
        "benchmark": "embedding_throughput",
        "machine": info,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "n_passages": n,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "model_path": scorer.model_path,
        "max_seq_length": max_len,
        "passage_words": {"mean": float(words.mean()), "median": float(np.median(words)), "max": int(words.max())},
        "passage_wordpieces": {"mean": float(lengths.mean()), "max": int(lengths.max()),
                               "truncated": int((lengths > max_len).sum())},
        "one_off_s": {"load_data": load_data_s, "import_torch_st": import_s, "model_load": model_load_s,
                      "first_encode": first_encode_s},
        "cold": {"runs": cold, "total": cold_total, "encode": cold_enc, "cache_overhead": cold_over,
                 "passages_per_s_median": n / (cold_total["median_ms"] / 1e3) if cold else None},
        "cached": {"stats": cached, "passages_per_s_median": n / (cached["median_ms"] / 1e3),
                   "new_scorer_first_call_s": fresh_first_s},
        "cache_bytes": cache_bytes,
        "max_abs_diff_cached_vs_cold": max_diff,
        "versions": {"torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__},
    }
    md_path, js_path = C.write_report("embedding_throughput", args.out, "\n".join(md), data)
    tmp.cleanup()
    print(md_path.read_text())
    print(f"wrote {md_path}, {js_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
