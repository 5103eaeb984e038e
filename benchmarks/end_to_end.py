"""End-to-end latency of ``ctxsel.select(question, pool, method="adaptive-k",
scorer=DenseScorer(...))`` for hotpotqa-long questions over the 991-paragraph pool.

Cold: a new Python process with a fresh, empty CTXSEL_CACHE_DIR runs the whole
thing once -- interpreter start, ``import ctxsel``, loading the pool, importing
torch / sentence-transformers and loading MiniLM, embedding every paragraph and
the question, and selecting. The parent times the subprocess wall clock; the
child reports its own stage times. A few repeats, each with a new cache.

Warm: in this process, paragraph embeddings already cached (the last cold run's
cache), model loaded; repeated queries with *different* questions (so the
question embedding is computed each time, as for a new user query). Warm
latency is then broken into scoring -- question embedding, paragraph lookup
in the scorer's in-memory matrix (hashing only new texts), dot product -- and
the cut; and the whole select timed once the question is embedded.

    python -m benchmarks.end_to_end [--threads 1] [--cold-repeats 3] [--queries 30]

Writes benchmarks/results/end_to_end.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_T_START = time.perf_counter()  # the child reports stage times from here

from benchmarks import _common as C  # noqa: E402 (after _T_START)

CHILD_MARK = "CTXSEL_BENCH_RESULT "


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--method", default="adaptive-k", help="selector spec (default adaptive-k)")
    p.add_argument("--cold-repeats", type=int, default=3, help="cold subprocess runs (default 3)")
    p.add_argument(
        "--queries", type=int, default=30, help="timed warm queries, and as many again for the breakdown (default 30)"
    )
    p.add_argument("--warmup", type=int, default=3, help="untimed warm queries first (default 3)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--question-index", type=int, default=0, help="hotpotqa question for the cold runs")
    p.add_argument("--hotpotqa", default=None, help="path to hotpot_dev_distractor_100.json (default: auto)")
    p.add_argument(
        "--seed-cache",
        default=None,
        help="with --cold-repeats 0: an embeddings.sqlite whose vectors of the pool's paragraphs are "
        "copied into the warm run's fresh cache first, so only what it lacks is embedded (the "
        "questions are not copied: the warm timings do not change)",
    )
    p.add_argument("--child-cold", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# -- the cold run, in a child process ---------------------------------------------------------


def child_cold(args: argparse.Namespace) -> int:
    """One cold end-to-end run, exactly as a user script would do it, with stage timers."""
    C.setup_threads(args.threads)
    t = {"process_start_to_main": time.perf_counter() - _T_START}
    t0 = time.perf_counter()
    import ctxsel
    from ctxsel.datasets.hotpotqa import load_hotpotqa_long
    from ctxsel.scoring.dense import DenseScorer

    t["import_ctxsel"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ex = load_hotpotqa_long(args.hotpotqa)[args.question_index]
    pool = ex.chunks
    t["load_pool"] = time.perf_counter() - t0

    scorer = DenseScorer(batch_size=args.batch_size, num_threads=args.threads)
    stages = {"model_import_and_load": 0.0, "encode": 0.0, "encoded_texts": 0}
    orig_encode = scorer._encode

    def timed_encode(texts: list[str]) -> Any:  # split the model's first load from encoding
        if getattr(scorer, "_model", None) is None:
            t1 = time.perf_counter()
            scorer.model  # noqa: B018 - imports torch + sentence-transformers, loads MiniLM
            stages["model_import_and_load"] += time.perf_counter() - t1
        t1 = time.perf_counter()
        out = orig_encode(texts)
        stages["encode"] += time.perf_counter() - t1
        stages["encoded_texts"] += len(texts)
        return out

    scorer._encode = timed_encode  # type: ignore[method-assign]
    t0 = time.perf_counter()
    sel = ctxsel.select(ex.question, pool, method=args.method, scorer=scorer)
    t["select_call"] = time.perf_counter() - t0
    t.update(stages)
    t["select_call_other"] = t["select_call"] - stages["model_import_and_load"] - stages["encode"]
    t["total_in_process"] = time.perf_counter() - _T_START
    import torch

    result = {
        "timings_s": t,
        "k": sel.k,
        "n_candidates": sel.n_candidates,
        "explanation": sel.explanation,
        "gold_found": len(set(ex.gold_ids) & set(sel.ids)),
        "gold": len(ex.gold_ids),
        "torch_threads": torch.get_num_threads(),
        "cache_dir": os.environ.get("CTXSEL_CACHE_DIR"),
    }
    print(CHILD_MARK + json.dumps(result), flush=True)
    return 0


def run_cold(args: argparse.Namespace, cache_dir: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["CTXSEL_CACHE_DIR"] = cache_dir
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[v] = str(args.threads)
    cmd = [
        *C.module_argv("benchmarks.end_to_end"),
        "--child-cold",
        "--threads",
        str(args.threads),
        "--method",
        args.method,
        "--batch-size",
        str(args.batch_size),
        "--question-index",
        str(args.question_index),
    ]
    if args.hotpotqa:
        cmd += ["--hotpotqa", args.hotpotqa]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=C.child_env(env), capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"cold child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith(CHILD_MARK))
    res: dict[str, Any] = json.loads(line[len(CHILD_MARK) :])
    res["wall_s"] = wall
    res["timings_s"]["interpreter_start_and_exit"] = wall - res["timings_s"]["total_in_process"]
    res["loadavg"] = C.loadavg()
    return res


# -- parent ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child_cold:
        return child_cold(args)
    thread_info = C.setup_threads(args.threads)

    import numpy as np
    from tqdm import tqdm

    import ctxsel
    from ctxsel.datasets.hotpotqa import load_hotpotqa_long
    from ctxsel.scoring.cache import EmbeddingCache
    from ctxsel.scoring.dense import DenseScorer
    from ctxsel.selectors import get_selector

    examples = load_hotpotqa_long(args.hotpotqa)
    pool = examples[0].chunks
    need = 1 + args.warmup + 2 * args.queries
    if need > len(examples):
        raise SystemExit(f"need {need} distinct questions, the file has {len(examples)}: lower --queries")

    import torch

    C.set_torch_threads(args.threads)
    info = C.machine_info(thread_info, ("torch", "sentence_transformers"))
    tmp = tempfile.TemporaryDirectory(prefix="ctxsel-bench-e2e-")

    # -- cold ------------------------------------------------------------------------------
    cold = []
    last_cache = None
    for r in tqdm(range(args.cold_repeats), desc="cold runs (subprocess)", unit="run", file=sys.stderr):
        cache_dir = str(Path(tmp.name) / f"cold-{r}")
        cold.append(run_cold(args, cache_dir))
        last_cache = cache_dir

    # -- warm ------------------------------------------------------------------------------
    if last_cache is None:  # no cold run: fill a cache in-process (untimed)
        last_cache = str(Path(tmp.name) / "fill")
        if args.seed_cache:  # the pool's vectors only: the questions must still be embedded
            from ctxsel.scoring.cache import text_key
            from ctxsel.scoring.dense import DEFAULT_MODEL

            keys = [text_key(DEFAULT_MODEL, c.text) for c in pool]
            EmbeddingCache(Path(last_cache) / "embeddings.sqlite").put_many(
                EmbeddingCache(args.seed_cache).get_many(keys)
            )
    os.environ["CTXSEL_CACHE_DIR"] = last_cache
    scorer = DenseScorer(batch_size=args.batch_size, num_threads=args.threads)
    assert isinstance(scorer.cache, EmbeddingCache) and Path(last_cache) in scorer.cache.path.parents
    texts = [c.text for c in pool]
    if args.cold_repeats == 0:
        print("no cold run: embedding the pool once to fill the cache (untimed)", file=sys.stderr)
        scorer.show_progress = True
        scorer.embed(texts, scorer.document_prefix)
        scorer.show_progress = False
    n_cached_before = len(scorer.cache)

    qi = [i for i in range(len(examples)) if i != args.question_index]
    warm_q = [examples[i].question for i in qi[: args.warmup]]
    total_q = [examples[i].question for i in qi[args.warmup : args.warmup + args.queries]]
    part_q = [examples[i].question for i in qi[args.warmup + args.queries : args.warmup + 2 * args.queries]]

    encode_calls = {"n": 0, "texts": 0}
    orig_encode = scorer._encode

    def counting_encode(batch: list[str]) -> Any:
        encode_calls["n"] += 1
        encode_calls["texts"] += len(batch)
        return orig_encode(batch)

    scorer._encode = counting_encode  # type: ignore[method-assign,assignment]

    t0 = time.perf_counter()
    for q in warm_q:
        ctxsel.select(q, pool, method=args.method, scorer=scorer)
    warmup_s = time.perf_counter() - t0  # includes the model load in this process

    totals, totals_cpu, ks = [], [], []
    for q in tqdm(total_q, desc="warm ctxsel.select", unit="query", file=sys.stderr):
        c0 = time.thread_time()  # torch runs its one thread in the caller's: this is the query's CPU
        t0 = time.perf_counter()
        sel = ctxsel.select(q, pool, method=args.method, scorer=scorer)
        totals.append(time.perf_counter() - t0)
        totals_cpu.append(time.thread_time() - c0)
        ks.append(sel.k)

    selector = get_selector(args.method)
    import ctxsel.scoring.dense as dense_mod

    hashed = {"n": 0}
    orig_key = dense_mod.text_key  # type: ignore[attr-defined]

    def counting_key(model_id: str, text: str) -> str:
        hashed["n"] += 1
        return orig_key(model_id, text)

    dense_mod.text_key = counting_key  # type: ignore[attr-defined]
    parts: dict[str, list[float]] = {
        "query_embedding": [],
        "paragraph_cache_lookup": [],
        "dot_product": [],
        "scoring_total": [],
        "selection": [],
        "scoring_plus_selection": [],
        "after_question": [],
    }
    for q in tqdm(part_q, desc="warm breakdown", unit="query", file=sys.stderr):
        t0 = time.perf_counter()
        qv = scorer.embed_query(q)  # cache miss (new question): model encode + SQLite read + write
        t1 = time.perf_counter()
        docs = scorer._doc_matrix(texts, scorer.document_prefix)  # in memory: dict lookups by text, a view
        t2 = time.perf_counter()
        scores = (docs @ qv).astype(np.float32)
        t3 = time.perf_counter()
        sel = selector.select(q, pool, scores)
        t4 = time.perf_counter()
        parts["query_embedding"].append(t1 - t0)
        parts["paragraph_cache_lookup"].append(t2 - t1)
        parts["dot_product"].append(t3 - t2)
        parts["scoring_total"].append(t3 - t0)
        parts["selection"].append(t4 - t3)
        parts["scoring_plus_selection"].append(t4 - t0)
        parts["after_question"].append(t4 - t1)
    dense_mod.text_key = orig_key  # type: ignore[attr-defined]
    hashed_per_query = hashed["n"] / len(part_q)
    # the query embedding alone, without the cache: what the model costs per question
    raw_q = C.time_calls(
        lambda: scorer.model.encode([part_q[0]]),
        warmup=2,
        budget_s=0,
        min_repeats=args.queries,
        max_repeats=args.queries,
    )
    # the paragraph scoring path once everything is cached, including this question
    cached_q = C.time_calls(
        lambda: scorer.score(part_q[0], pool), warmup=2, budget_s=0, min_repeats=args.queries, max_repeats=args.queries
    )
    # the whole warm select once the question is embedded (its vector in the scorer's LRU)
    cached_select = C.time_calls(
        lambda: ctxsel.select(part_q[0], pool, method=args.method, scorer=scorer),
        warmup=2,
        budget_s=0,
        min_repeats=args.queries,
        max_repeats=args.queries,
    )
    assert encode_calls["texts"] == len(warm_q) + len(total_q) + len(part_q), (
        f"warm queries should encode only the questions, encoded {encode_calls['texts']} texts"
    )
    info["loadavg_end"] = C.loadavg()
    tmp.cleanup()

    # -- report ----------------------------------------------------------------------------
    def cs(key: str) -> dict[str, Any]:
        return C.summarize([c["timings_s"][key] for c in cold])

    def s_cell(stats: dict[str, Any]) -> str:
        if not stats.get("n"):
            return "—"
        return f"{stats['median_ms'] / 1e3:.2f} ({stats['p90_ms'] / 1e3:.2f})"

    cold_rows = [
        ["**cold total: new process, wall clock**", s_cell(C.summarize([c["wall_s"] for c in cold]))],
        ["&nbsp;&nbsp;interpreter start-up + exit", s_cell(cs("interpreter_start_and_exit"))],
        ["&nbsp;&nbsp;script start to main (benchmark helpers)", s_cell(cs("process_start_to_main"))],
        ["&nbsp;&nbsp;`import ctxsel` (+ DenseScorer module)", s_cell(cs("import_ctxsel"))],
        ["&nbsp;&nbsp;load hotpotqa-long pool (JSON + cl100k token counts)", s_cell(cs("load_pool"))],
        ["&nbsp;&nbsp;`ctxsel.select(...)` call", s_cell(cs("select_call"))],
        [
            "&nbsp;&nbsp;&nbsp;&nbsp;import torch + sentence-transformers, load MiniLM",
            s_cell(cs("model_import_and_load")),
        ],
        [f"&nbsp;&nbsp;&nbsp;&nbsp;encode {len(pool)} paragraphs + 1 question", s_cell(cs("encode"))],
        ["&nbsp;&nbsp;&nbsp;&nbsp;rest: hashing, SQLite, dot product, selection", s_cell(cs("select_call_other"))],
    ]
    warm_rows = [
        [
            f"**warm total: `ctxsel.select(q, pool, method={args.method!r}, scorer=scorer)`**",
            C.fmt_cell(C.summarize(totals)),
        ],
        [
            "&nbsp;&nbsp;the same, CPU time of the calling thread (`time.thread_time`; not counting the "
            "time other jobs held the core)",
            C.fmt_cell(C.summarize(totals_cpu)),
        ],
    ]
    labels = {
        "scoring_total": "scoring (`scorer.score` steps below)",
        "query_embedding": "&nbsp;&nbsp;question embedding (`embed_query`: model + SQLite miss + write; LRU on a repeat)",
        "paragraph_cache_lookup": f"&nbsp;&nbsp;paragraph lookup: {len(pool)} texts in the scorer's in-memory "
        f"matrix (dict by text; {hashed_per_query:g} sha256 per query: the question's)",
        "dot_product": f"&nbsp;&nbsp;cosine: dot product ({len(pool)} x 384 float32)",
        "selection": f"cut: selection (`get_selector({args.method!r}).select(q, pool, scores)`, linear-time cut)",
        "scoring_plus_selection": "scoring + selection (sum, other questions)",
        "after_question": "**after the question is embedded: lookup + cosine + cut** (sum of the three)",
    }
    for key in (
        "scoring_total",
        "query_embedding",
        "paragraph_cache_lookup",
        "dot_product",
        "selection",
        "scoring_plus_selection",
        "after_question",
    ):
        warm_rows.append([labels[key], C.fmt_cell(C.summarize(parts[key]))])
    warm_rows.append(
        [
            "**warm `ctxsel.select` with the question already embedded (LRU hit)**",
            C.fmt_cell(C.summarize(cached_select)),
        ]
    )
    warm_rows.append(["reference: MiniLM `encode([question])` alone, no cache", C.fmt_cell(C.summarize(raw_q))])
    warm_rows.append(
        ["reference: `scorer.score(q, pool)` with the question cached too", C.fmt_cell(C.summarize(cached_q))]
    )
    tot, after = C.summarize(totals)["median_ms"], C.summarize(cached_select)["median_ms"]
    tot_cpu = C.summarize(totals_cpu)["median_ms"]
    goals = (
        f"Goals (issue 16): warm select <= 15 ms median in all: **{tot:.1f} ms wall, {tot_cpu:.1f} ms CPU: "
        f"{'met' if tot <= 15 else 'not met'} / {'met' if tot_cpu <= 15 else 'not met'}**; <= 5 ms after the "
        f"question is embedded: **{after:.2f} ms, {'met' if after <= 5 else 'not met'}**. Embedding a new "
        f"question is a MiniLM forward pass on the scorer's backend (`{scorer.backend}`; see the reference row), "
        "most of the total; the rest is the lookup, cosine and cut above."
    )

    first_cold = cold[0] if cold else None
    notes = [
        f"Pool: {len(pool)} hotpotqa-long paragraphs; method `{args.method}`; DenseScorer = bundled "
        f"all-MiniLM-L6-v2, batch size {args.batch_size}, cache in a fresh temporary CTXSEL_CACHE_DIR.",
        f"Cold: {args.cold_repeats} subprocess run(s) of this script (`--child-cold`), each with a new empty cache, "
        f"question #{args.question_index}; time in **seconds**, median (p90)."
        + (
            f" It kept k = {first_cold['k']} of {first_cold['n_candidates']} ({first_cold['gold_found']}/{first_cold['gold']} gold paragraphs)."
            if first_cold
            else ""
        ),
        f"Warm: same process, paragraph embeddings cached ({n_cached_before} vectors), model loaded; "
        f"{args.warmup} untimed warm-up queries ({warmup_s:.1f} s, including loading MiniLM; torch was "
        f"already imported), then "
        f"{args.queries} timed queries with different questions, and {args.queries} more for the breakdown; "
        f"time in **milliseconds**, median (p90). k kept: median {int(np.median(ks)) if ks else '—'}, "
        f"range {min(ks) if ks else '—'}-{max(ks) if ks else '—'}.",
    ]
    md = [
        C.header_md(
            f"End-to-end latency: ctxsel.select(..., method={args.method!r}, scorer=DenseScorer())", info, notes
        )
    ]
    md.append("## Cold (new process, empty cache), seconds: median (p90)\n")
    md.append(C.md_table(["stage", "seconds"], cold_rows))
    md.append("\n## Warm (same process, cached paragraph embeddings), ms: median (p90)\n")
    md.append(C.md_table(["stage", "ms"], warm_rows))
    md.append("\n" + goals)

    data = {
        "benchmark": "end_to_end",
        "machine": info,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "pool_size": len(pool),
        "cold": {
            "runs": cold,
            "wall": C.summarize([c["wall_s"] for c in cold]),
            "stages": {k: cs(k) for k in (cold[0]["timings_s"] if cold else {}) if k != "encoded_texts"},
        },
        "warm": {
            "total": C.summarize(totals),
            "total_cpu": C.summarize(totals_cpu),
            "k": ks,
            "warmup_s": warmup_s,
            "parts": {k: C.summarize(v) for k, v in parts.items()},
            "raw_query_encode": C.summarize(raw_q),
            "score_all_cached": C.summarize(cached_q),
            "select_question_cached": C.summarize(cached_select),
            "sha256_per_query": hashed_per_query,
        },
        "units": {"cold": "s in runs, ms in summaries", "warm": "ms"},
        "torch_threads": torch.get_num_threads(),
    }
    md_path, js_path = C.write_report("end_to_end", args.out, "\n".join(md), data)
    print(md_path.read_text())
    print(f"wrote {md_path}, {js_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
