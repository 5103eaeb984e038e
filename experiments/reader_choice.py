"""Which local model reads best, and with how many llama.cpp threads: the choice of ``--reader local``.

On questions of the hotpotqa-long *training* split (never the 20 test
questions), every bundled model answers from the same adaptive-k selection
(MiniLM scores) with the factoid template; the table gives SubEM / EM / F1
and seconds per question. A second table times one ~1,000-token prompt with
1 and 2 threads, alternating, on the same model, so the thread default rests
on a ratio measured in one run.

    OMP_NUM_THREADS=1 python -m experiments.reader_choice [--n 12] [--models qwen-1.5b,qwen-0.5b,gemma-270m]

Writes benchmarks/results/reader_choice.md and .json. No response cache:
every call is a real one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from benchmarks._common import add_common_args, header_md, loadavg, machine_info, setup_threads, write_report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=12, help="training-split questions per model")
    p.add_argument("--models", default="qwen-1.5b,qwen-0.5b,gemma-270m")
    p.add_argument("--thread-model", default="qwen-1.5b", help="the model the 1-vs-2-threads timing uses")
    p.add_argument("--thread-repeats", type=int, default=3)
    p.add_argument("--n-ctx", type=int, default=8192, help="window for this benchmark (the selections are short)")
    add_common_args(p)
    args = p.parse_args(argv)
    info = machine_info(setup_threads(args.threads), versions=("llama_cpp",))

    from tqdm.auto import tqdm

    import ctxsel
    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.splits import split_examples
    from ctxsel.llm.local import LocalLlamaClient
    from ctxsel.llm.models import get_model
    from ctxsel.metrics import exact_match, substring_exact_match, token_f1
    from ctxsel.reader import Reader
    from ctxsel.scoring import get_scorer

    examples = split_examples(load_dataset("hotpotqa-long"), "train")[: args.n]
    scorer = get_scorer("dense", num_threads=args.threads, show_progress=False)
    selections = [
        ctxsel.select(e.question, e.chunks, method="adaptive-k", scores=scorer.score(e.question, e.chunks))
        for e in tqdm(examples, desc="select", unit="q")
    ]

    rows = []
    for name in args.models.split(","):
        client = LocalLlamaClient(name, n_ctx=args.n_ctx, n_threads=args.threads)
        reader = Reader(client)
        subem, em, f1, secs, toks = [], [], [], [], []
        for ex, sel in tqdm(list(zip(examples, selections)), desc=name, unit="q"):
            t0 = time.perf_counter()
            ans = reader.answer(ex.question, sel)
            secs.append(time.perf_counter() - t0)
            toks.append(ans.usage.tokens_in)
            subem.append(substring_exact_match(ans.text, ex.answers))
            em.append(exact_match(ans.text, ex.answers))
            f1.append(token_f1(ans.text, ex.answers))
        rows.append(
            {
                "model": name,
                "title": get_model(name).title,
                "n": len(examples),
                "subem": statistics.mean(subem),
                "em": statistics.mean(em),
                "f1": statistics.mean(f1),
                "s_per_q": statistics.mean(secs),
                "tokens_in": statistics.mean(toks),
            }
        )
        del client, reader

    # 1 vs 2 threads, alternating, one prompt of ~1,000 model tokens, no prefix reuse between runs
    timing = []
    sel = max(selections, key=lambda s: s.n_tokens)
    for threads in [1, 2] * args.thread_repeats:
        client = LocalLlamaClient(args.thread_model, n_ctx=args.n_ctx, n_threads=threads)
        prompt = Reader(client).prompt(examples[0].question, sel.text("\n\n"))
        t0 = time.perf_counter()
        out = client.complete(prompt, max_tokens=24, temperature=0.0)
        dt = time.perf_counter() - t0
        raw = out.raw.get("timings") or {}
        timing.append(
            {
                "threads": threads,
                "seconds": dt,
                "tokens_in": out.usage.tokens_in,
                "tokens_out": out.usage.tokens_out,
                "load1": (loadavg() or (None,))[0],
                **raw,
            }
        )
        del client
    info["loadavg_end"] = loadavg()

    lines = [
        header_md(
            "Choosing the bundled reader (hotpotqa-long training split)",
            info,
            [
                f"{len(examples)} training-split questions, adaptive-k selections (MiniLM), factoid template, greedy, "
                f"n_ctx {args.n_ctx}, {args.threads} llama.cpp thread(s); no response cache."
            ],
        ),
        "| model | SubEM | EM | F1 | s / question | prompt tokens |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['title']} (`{r['model']}`) | {100 * r['subem']:.1f} | {100 * r['em']:.1f} | "
            f"{100 * r['f1']:.1f} | {r['s_per_q']:.1f} | {r['tokens_in']:.0f} |"
        )
    lines += [
        "",
        f"Threads, `{args.thread_model}`, one prompt of {timing[0]['tokens_in']:,} tokens + up to 24 "
        "generated, alternating (seconds, load average at the end of each run):",
        "",
        "| threads | runs (s) | median s | ratio to 1 thread |",
        "|---:|---|---:|---:|",
    ]
    med = {t: statistics.median(x["seconds"] for x in timing if x["threads"] == t) for t in (1, 2)}
    for t in (1, 2):
        runs = ", ".join(f"{x['seconds']:.1f} (load {x['load1']:.1f})" for x in timing if x["threads"] == t)
        lines.append(f"| {t} | {runs} | {med[t]:.1f} | {med[t] / med[1]:.2f} |")
    md = "\n".join(lines) + "\n"
    write_report("reader_choice", args.out, md, {"machine": info, "models": rows, "threads": timing})
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
