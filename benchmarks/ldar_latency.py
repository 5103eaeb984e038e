"""LDAR on CPU: policy inference latency for one query, and REINFORCE step time.

Inference: for N = 256, 1,000 and 10,000 seeded random scores, times the
``ldar`` selector's ``decide(scores, n_tokens)`` (rank + policy forward +
band) and, separately, the bare policy forward pass on one query, with one
torch thread and with the default (one per logical core). Training: one
REINFORCE step at batch 32 (forward, Beta sampling, log-probability,
backward, Adam step) for N = 256 and 1,000. The policy is the paper's
network (Table 4 sizes) with seeded random weights: latency does not depend
on what it learned. The peak memory of one
inference is measured in a fresh process per N and path.

    python benchmarks/ldar_latency.py [--sizes 256,1000,10000] [--train-sizes 256,1000]

Writes benchmarks/results/ldar_latency.{md,json}.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--sizes", default="256,1000,10000", help="N for inference")
    p.add_argument("--train-sizes", default="256,1000", help="N for the training step")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--default-threads", type=int, default=os.cpu_count() or 1,
                   help="the 'default' thread count (default: logical cores)")
    p.add_argument("--budget-s", type=float, default=1.0, help="timed seconds per inference cell")
    p.add_argument("--train-repeats", type=int, default=3, help="timed training steps per cell (after 1 warm-up)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def child_rss(n: int, path: str, threads: int) -> dict[str, float]:
    """Peak RSS (MB) of a fresh process before and after one forward pass at N (``path``:
    ``infer`` = what the selector runs, ``fastpath`` = eval mode under inference_mode)."""
    import subprocess

    # VmHWM (peak RSS of this address space) starts afresh at exec, unlike ru_maxrss
    code = (
        "import re, torch; torch.set_num_threads(%d); torch.manual_seed(0)\n"
        "hwm = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) / 1024\n"
        "from ctxsel.selectors.ldar.policy import LDARPolicy\n"
        "p = LDARPolicy().eval(); x = torch.rand(1, %d)\n"
        "before = hwm()\n"
        "if %r == 'infer':\n    p.infer(x)\n"
        "else:\n    with torch.inference_mode(): p(x)\n"
        "print(before, hwm())\n"
    ) % (threads, n, path)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return {"before_mb": float(out[0]), "after_mb": float(out[1])}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    thread_info = C.setup_threads(args.threads)

    import numpy as np
    import torch
    from tqdm import tqdm

    from ctxsel.selectors.ldar.policy import LDARPolicy, PolicyConfig, count_parameters
    from ctxsel.selectors.ldar.selector import LDAR
    from selection_latency import make_scores

    C.set_torch_threads(args.threads)
    info = C.machine_info(thread_info, ("torch",))
    sizes = [int(float(x)) for x in args.sizes.split(",") if x.strip()]
    train_sizes = [int(float(x)) for x in args.train_sizes.split(",") if x.strip()]
    thread_counts = sorted({args.threads, args.default_threads})

    torch.manual_seed(args.seed)
    policy = LDARPolicy(PolicyConfig()).eval()
    selector = LDAR(policy=policy)
    n_params = count_parameters(policy)

    infer: dict[int, dict[int, dict]] = {t: {} for t in thread_counts}
    forward: dict[int, dict[int, dict]] = {t: {} for t in thread_counts}
    fastpath: dict[int, dict[int, dict]] = {t: {} for t in thread_counts}
    train: dict[int, dict[int, dict]] = {t: {} for t in thread_counts}
    cells = len(thread_counts) * (3 * len(sizes) + len(train_sizes))
    bar = tqdm(total=cells, desc="ldar latency", unit="cell", file=sys.stderr)
    for t in thread_counts:
        torch.set_num_threads(t)
        for n in sizes:
            scores, tokens = make_scores(n, args.seed)
            bar.set_postfix_str(f"threads={t} N={n} decide")
            infer[t][n] = C.summarize(C.time_calls(lambda: selector.decide(scores, tokens), budget_s=args.budget_s,
                                                   min_repeats=5, max_repeats=200))
            x = torch.as_tensor(np.sort(scores), dtype=torch.float32)[None]

            def fast(x=x):
                with torch.inference_mode():
                    policy(x)

            bar.update()
            bar.set_postfix_str(f"threads={t} N={n} forward")
            forward[t][n] = C.summarize(C.time_calls(lambda x=x: policy.infer(x), budget_s=args.budget_s,
                                                     min_repeats=5, max_repeats=200))
            bar.update()
            bar.set_postfix_str(f"threads={t} N={n} eval-mode fast path")
            fastpath[t][n] = C.summarize(C.time_calls(fast, budget_s=args.budget_s, min_repeats=5, max_repeats=200))
            bar.update()
        for n in train_sizes:
            bar.set_postfix_str(f"threads={t} N={n} train step")
            torch.manual_seed(args.seed)
            tp = LDARPolicy(PolicyConfig()).train()
            opt = torch.optim.Adam(tp.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8)
            rng = np.random.default_rng(args.seed)
            batch = torch.as_tensor(np.sort(np.stack([make_scores(n, args.seed + b)[0]
                                                      for b in range(args.batch_size)]), axis=1),
                                    dtype=torch.float32)

            def step():
                out = tp(batch)
                q_l, q_d = out.sample_band()
                logp = out.band_log_prob(q_l, q_d)
                adv = torch.as_tensor(rng.random(args.batch_size) - 0.5, dtype=torch.float32)
                loss = -(adv * logp).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            step()  # warm-up
            times = []
            for _ in range(args.train_repeats):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            train[t][n] = C.summarize(times)
            bar.update()
    bar.close()
    rss: dict[str, dict[str, float]] = {}
    for n in sizes:
        for path in ("infer", "fastpath"):
            rss[f"{path} N={n}"] = child_rss(n, path, args.threads)
    info["loadavg_end"] = C.loadavg()
    torch.set_num_threads(args.threads)

    notes = [
        f"Policy: the paper's network (periodic embeddings, 2-layer transformer, 4 heads, d = 256, "
        f"feed-forward 256, attention pooling, Beta heads), {n_params:,} parameters, float32, seeded random weights.",
        "Inference: one query. `decide()` = `ldar` selector on arrays (stable argsort + `policy.infer` + band); "
        "`policy.infer` = the policy alone, as the selector runs it (no autograd, encoder through "
        "`scaled_dot_product_attention`); `eval-mode fast path` = `policy.eval()` under `torch.inference_mode`, "
        "PyTorch's native TransformerEncoderLayer kernel, for reference (same outputs). Cells: median (p90) in "
        f"**ms** over repeats filling {args.budget_s:g} s (5-200) after warm-up calls.",
        f"Training: one REINFORCE step at batch {args.batch_size} (forward with autograd, Beta sampling, "
        f"log-probability, backward, Adam step), median (p90) in **ms** over {args.train_repeats} steps after 1 "
        "warm-up step.",
        f"Threads: {', '.join(str(t) for t in thread_counts)} (torch.set_num_threads at run time; "
        f"{args.default_threads} = one per logical core, torch's default here).",
    ]
    md = [C.header_md("LDAR policy latency (CPU)", info, notes)]
    md.append("## Inference, one query: ms, median (p90)\n")
    rows = []
    for t in thread_counts:
        rows.append([f"`decide()`, {t} thread{'s' if t > 1 else ''}"] + [C.fmt_cell(infer[t].get(n)) for n in sizes])
        rows.append([f"`policy.infer`, {t} thread{'s' if t > 1 else ''}"]
                    + [C.fmt_cell(forward[t].get(n)) for n in sizes])
        rows.append([f"ref: eval-mode fast path, {t} thread{'s' if t > 1 else ''}"]
                    + [C.fmt_cell(fastpath[t].get(n)) for n in sizes])
    md.append(C.md_table(["path"] + [f"N = {n:,}" for n in sizes], rows))
    md.append(f"\n## REINFORCE step, batch {args.batch_size}: ms, median (p90)\n")
    rows = [[f"{t} thread{'s' if t > 1 else ''}"] + [C.fmt_cell(train[t].get(n)) for n in train_sizes]
            for t in thread_counts]
    md.append(C.md_table(["threads"] + [f"N = {n:,}" for n in train_sizes], rows))
    md.append(f"\n## Peak memory of one inference (fresh process, {args.threads} thread), MB\n")
    md.append(C.md_table(["path"] + [f"N = {n:,}" for n in sizes],
                         [[label] + [f"{rss[f'{path} N={n}']['after_mb'] - rss[f'{path} N={n}']['before_mb']:,.0f} "
                                     f"(peak {rss[f'{path} N={n}']['after_mb']:,.0f})" for n in sizes]
                          for path, label in (("infer", "`policy.infer`"), ("fastpath", "ref: eval-mode fast path"))]))
    md.append("\nEach cell: growth of the peak resident set during the forward pass (peak of the whole process, "
              "which includes torch itself).")
    data = {
        "benchmark": "ldar_latency",
        "machine": info,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "n_parameters": n_params,
        "unit": "ms",
        "inference_decide": {str(t): {str(n): s for n, s in v.items()} for t, v in infer.items()},
        "inference_forward": {str(t): {str(n): s for n, s in v.items()} for t, v in forward.items()},
        "inference_eval_fastpath": {str(t): {str(n): s for n, s in v.items()} for t, v in fastpath.items()},
        "train_step": {str(t): {str(n): s for n, s in v.items()} for t, v in train.items()},
        "rss_one_inference_mb": rss,
    }
    md_path, js_path = C.write_report("ldar_latency", args.out, "\n".join(md), data)
    print(md_path.read_text())
    print(f"wrote {md_path}, {js_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
