"""Where a chat reader reads the HoloBench template's closing cue: in the user's message, or opening its own turn.

The Adaptive-k paper's HoloBench template ends with ``- **Reasoning:**``, written to start a
completion. Sent as the end of a chat user message (``holobench-qa`` version 1), the bundled
1.5B sometimes echoes the cue and stops: an empty answer. Version 2 sends the cue as the reply's
start (``reply_start``), after the chat template's assistant header. This script reads the same
selections both ways, on HoloBench-style sets generated with a *training* seed (the reader tables'
sets use seed 0), and counts empty answers, answers that hit the token cap, and the set overlap
of listed items with the ground truth (no judge, so nothing here depends on a second model).

    OMP_NUM_THREADS=1 python -m experiments.reader_cue [--amounts 5k,10k] [--queries 8] [--seed 1]

Calls go through the response cache (a rerun is free). Writes benchmarks/results/reader_cue.md and .json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks._common import add_common_args, header_md, loadavg, machine_info, md_table, setup_threads, write_report

AMOUNTS = {"5k": 5000, "10k": 10000}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--amounts", default="5k,10k", help=f"information amounts ({', '.join(AMOUNTS)})")
    p.add_argument("--queries", type=int, default=8, help="queries read per set")
    p.add_argument("--seed", type=int, default=1, help="generation seed (a training seed: the reader tables use 0)")
    p.add_argument("--method", default="top-n-tokens@2k", help="the selection both variants read")
    p.add_argument("--reader", default="local", help="local or local:NAME (a bundled chat model)")
    p.add_argument("--llm-threads", type=int, default=1)
    p.add_argument("--no-progress", action="store_true")
    add_common_args(p)
    args = p.parse_args(argv)
    info = machine_info(setup_threads(args.threads), versions=("llama_cpp",))

    from tqdm import tqdm

    import ctxsel
    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.holobench import make_examples, write_jsonl
    from ctxsel.datasets.holobench.scoring import score_answer
    from ctxsel.judge import is_empty_answer
    from ctxsel.llm.cache import CachedClient, ResponseCache
    from ctxsel.llm.local import LocalLlamaClient
    from ctxsel.llm.prompts import HOLOBENCH_QA
    from ctxsel.reader import DEFAULT_MAX_ANSWER_TOKENS, Reader

    variants = {
        "in the user's message (v1)": replace(HOLOBENCH_QA, version=1, cue=""),
        f"opening the model's turn (v{HOLOBENCH_QA.version})": HOLOBENCH_QA,
    }
    client = CachedClient(
        LocalLlamaClient(args.reader.partition(":")[2] or None, n_threads=args.llm_threads), ResponseCache()
    )
    cap = DEFAULT_MAX_ANSWER_TOKENS[HOLOBENCH_QA.name]
    rows: dict[str, dict[str, dict[str, float]]] = {}
    samples: dict[str, list[dict[str, str]]] = {}
    for amount in filter(None, args.amounts.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "set.jsonl"
            write_jsonl(make_examples(AMOUNTS[amount], seed=args.seed, n_queries=args.queries).examples, path)
            examples = load_dataset(str(path))
        readers = {name: Reader(client, template) for name, template in variants.items()}
        got = {
            name: dict.fromkeys(("empty", "capped", "overlap_f1", "overlap_recall", "tokens_out", "s"), 0.0)
            for name in variants
        }
        # both variants read a question one after the other, so llama.cpp reads their shared prompt once
        for ex in tqdm(examples, desc=amount, disable=args.no_progress):
            sel = ctxsel.select(ex.question, ex.chunks, args.method)
            for name, reader in readers.items():
                t0 = time.perf_counter()
                answer = reader.answer(ex.question, sel)
                overlap = score_answer(answer.text, ex.answers)
                g = got[name]
                g["empty"] += is_empty_answer(answer.text)
                g["capped"] += answer.usage.tokens_out >= cap
                g["overlap_f1"] += overlap.f1
                g["overlap_recall"] += overlap.recall
                g["tokens_out"] += answer.usage.tokens_out
                g["s"] += time.perf_counter() - t0
                samples.setdefault(f"{amount} {name}", []).append({"id": ex.id, "answer": answer.text[:300]})
        rows[amount] = {
            name: {k: v / len(examples) for k, v in g.items()} | {"n": len(examples)} for name, g in got.items()
        }
    info["loadavg_end"] = loadavg()

    header = header_md(
        "Where a chat reader reads the HoloBench template's cue",
        info,
        [
            f"Reader: `{client.model_id}`, {args.llm_threads} llama.cpp thread(s), greedy, {cap}-token answers; "
            f"selections: `{args.method}` (MiniLM); sets: HoloBench-style, 100k-token contexts, seed {args.seed} "
            f"(a training seed), first {args.queries} queries; score: set overlap of listed items (no judge)."
        ],
    )
    table = md_table(
        [
            "set",
            "the cue ...",
            "queries",
            "empty answers %",
            "hit the cap %",
            "overlap F1 %",
            "overlap recall %",
            "tokens out",
            "s / answer",
        ],
        [
            [
                amount,
                name,
                f"{r['n']:.0f}",
                f"{100 * r['empty']:.1f}",
                f"{100 * r['capped']:.1f}",
                f"{100 * r['overlap_f1']:.1f}",
                f"{100 * r['overlap_recall']:.1f}",
                f"{r['tokens_out']:.0f}",
                f"{r['s']:.1f}",
            ]
            for amount, by_variant in rows.items()
            for name, r in by_variant.items()
        ],
        align=["l", "l"] + ["r"] * 7,
    )
    md = header + "\n" + table + "\n"
    write_report("reader_cue", args.out, md, {"machine": info, "rows": rows, "answers": samples})
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
