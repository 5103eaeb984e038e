"""LDAR trained with the paper's reward: the bundled reader's answer is correct, on a CPU budget.

The label reward (gold-chunk F2) needs gold chunks and ignores the reader; the paper's reward
(Eq. 3) is whether the reader answers correctly from the band, which is what should make the
band depend on the reader. Every sampled band costs a reader call, so on 2 CPU cores the run is
kept small, as the issue asks:

- pools of the ``--pool`` (64) best-scored hotpotqa-long paragraphs per question (MiniLM), the
  small end of the paper's 64-256 chunks, written to WORK/pools.jsonl (same ids, so the same
  fixed 80/20 split as everywhere else);
- the reader's window is ``--n-ctx`` (2,048) tokens: a band that does not fit scores 0 without a
  call (LLMCorrectnessReward's overflow rule), which caps what one exploratory band costs;
- correctness is cached per (question, l, u) in WORK/llm/llm_rewards.jsonl, so a band the
  policy samples again is free, across steps and resumed runs;
- the LLM run starts from a policy trained on the same pools with the label reward
  (``--init-policy``): random initial bands of ~30 paragraphs would overflow and teach nothing.
  That policy ends nearly deterministic, so the LLM run uses the options against collapse
  (``--llm-train-args``, default ``--baseline question --normalize-advantages --entropy-coef
  0.01``): without them every sample is the same band and REINFORCE has nothing to compare.

    python -m experiments.ldar_llm_reward [--llm-steps 40] [--batch-size 8] [--reader local]

Stages, each skipped when its output exists (training resumes where a killed run stopped; raise
``--llm-steps`` to train longer): pools, label policy, LLM-reward policy, the reader on the 20
held-out questions (``ctxsel eval``: both policies, adaptive-k, top-k@5 and the fixed top-k with
the best label F2 on the training split), report. ``--report-only`` tables what exists.

Writes benchmarks/results/ldar_llm_reward.{md,json} and the LLM run's reward curve,
ldar_llm_reward_curve.{png,json}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks import _common as C
from experiments.ldar_holobench import K_GRID, example_dict, mean, rows_for


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--pool", type=int, default=64, help="paragraphs per question, best-scored first (default 64)")
    p.add_argument("--label-steps", type=int, default=300, help="label-reward steps of the starting policy")
    p.add_argument("--llm-steps", type=int, default=100, help="LLM-reward steps (default 100)")
    p.add_argument("--batch-size", type=int, default=8, help="questions per LLM-reward step (default 8)")
    p.add_argument(
        "--llm-train-args",
        default="--baseline question --normalize-advantages --entropy-coef 0.01",
        help="more `ctxsel train ldar` options for the LLM run (default: the options against collapse)",
    )
    p.add_argument("--reader", default="local", help="reader for the reward and the evaluation (default local)")
    p.add_argument("--n-ctx", type=int, default=2048, help="reader window, tokens (default 2048)")
    p.add_argument("--llm-threads", type=int, default=1, help="llama.cpp threads (default 1)")
    p.add_argument("--work-dir", type=Path, default=Path("runs/ldar/llm-reward"), help="pools, policies, eval")
    p.add_argument("--no-eval", action="store_true", help="skip the reader on the held-out questions")
    p.add_argument("--report-only", action="store_true", help="run nothing: table what the stages have written")
    return p.parse_args()


def write_pools(path: Path, pool: int) -> int:
    """hotpotqa-long with each question's pool cut to its ``pool`` best-scored paragraphs.

    A gold paragraph outside them replaces the lowest-scored one kept, so every pool holds its
    question's evidence, as the paper's pools (a whole document's chunks) do; how often this
    happened is returned (it makes the pools easier than a plain top-64 retrieval)."""
    import numpy as np

    from ctxsel.datasets.hotpotqa import load_hotpotqa_long
    from ctxsel.scoring import get_scorer

    scorer = get_scorer("dense")
    lines, swapped = [], 0
    for ex in load_hotpotqa_long():
        scores = np.asarray(scorer.score(ex.question, ex.chunks), dtype=np.float64)
        ranked = [int(i) for i in np.argsort(-scores, kind="stable")]
        gold_ids = set(ex.gold_ids)
        gold = {i for i, c in enumerate(ex.chunks) if c.id in gold_ids}
        keep = [i for i in ranked if i not in gold][: pool - len(gold)] + sorted(gold)
        swapped += len(gold - set(ranked[:pool]))
        row = example_dict(ex, "")
        row["chunks"] = [row["chunks"][i] for i in sorted(keep)]  # document order, as the full pool
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return swapped


def train(argv: list[str]) -> None:
    from ctxsel.cli.main import main as ctxsel

    if ctxsel(["train", "ldar", *argv, "--no-progress", "--no-eval"]) != 0:
        raise SystemExit(f"training failed: ctxsel train ldar {' '.join(argv)}")


def best_fixed_k(pools: Path) -> int:
    """The top-k with the best label F2 on the training split (no reader calls)."""
    import numpy as np

    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.splits import split_examples
    from ctxsel.scoring import get_scorer
    from ctxsel.selectors import get_selector

    scorer = get_scorer("dense")
    exs = split_examples(load_dataset(str(pools)), "train")
    scored = [(ex, np.asarray(scorer.score(ex.question, ex.chunks), dtype=np.float64)) for ex in exs]
    pool = max(len(ex.chunks) for ex in exs)
    ks = [k for k in K_GRID if k <= pool]
    return max(ks, key=lambda k: mean(rows_for(get_selector(f"top-k@{k}"), scored), "f2"))


def reward_log(llm_dir: Path) -> dict[str, Any]:
    """Reader calls, cache hits and the answers' rewards from the LLM run's cache file and curve."""
    cache = llm_dir / "llm_rewards.jsonl"
    rows = [json.loads(line) for line in cache.read_text().splitlines() if line.strip()] if cache.exists() else []
    curve = json.loads((llm_dir / "reward_curve.json").read_text()) if (llm_dir / "reward_curve.json").exists() else {}
    steps = curve.get("steps", [])

    def window(part: list[dict[str, Any]]) -> dict[str, float] | None:
        return {k: mean(part, k) for k in ("reward", "k")} if part else None

    return {
        "bands_read": sum(r["answer"] != "<context overflow>" for r in rows),
        "bands_overflowed": sum(r["answer"] == "<context overflow>" for r in rows),
        "correct_share": sum(r["reward"] for r in rows) / len(rows) if rows else None,
        "steps": len(steps),
        "samples": len(steps) * curve.get("config", {}).get("batch_size", 0),
        "train_seconds": sum(s["seconds"] for s in steps),
        "first_10": window(steps[:10]),
        "last_10": window(steps[-10:]),
        "curve": curve,
    }


def main() -> int:
    args = parse_args()
    info = C.machine_info(C.setup_threads(args.threads), ("numpy", "torch", "llama_cpp"))
    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    pools, label_dir, llm_dir, eval_dir = work / "pools.jsonl", work / "label", work / "llm", work / "eval"
    seconds: dict[str, float] = {}
    reader = ["--reader", args.reader, "--n-ctx", str(args.n_ctx), "--llm-threads", str(args.llm_threads)]
    common = ["--dataset", str(pools), "--threads", str(args.threads)]
    label_argv = [*common, "--reward", "label", "--steps", str(args.label_steps), "--output", str(label_dir)]
    llm_argv = [*common, "--reward", "llm", *reader, "--init-policy", str(label_dir / "policy")]
    llm_argv += ["--steps", str(args.llm_steps), "--batch-size", str(args.batch_size), "--eval-every", "0"]
    llm_argv += ["--output", str(llm_dir), *args.llm_train_args.split()]
    if not args.report_only:
        t0 = time.perf_counter()
        if not pools.exists():
            swapped = write_pools(pools, args.pool)
            (work / "pools_info.json").write_text(json.dumps({"pool": args.pool, "gold_swapped_in": swapped}))
        seconds["pools"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        if not (label_dir / "policy").exists():
            train(label_argv)
        seconds["label"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        train(llm_argv)
        seconds["llm"] = time.perf_counter() - t0
    k = best_fixed_k(pools)
    methods = [
        f"ldar[policy={llm_dir / 'policy'}]",
        f"ldar[policy={label_dir / 'policy'}]",
        "adaptive-k",
        "top-k@5",
        *([f"top-k@{k}"] if k != 5 else []),
    ]
    eval_argv = ["eval", *common, "--split", "test", "--methods", ",".join(methods), *reader]
    eval_argv += ["--output", str(eval_dir), "--no-progress"]
    if not args.report_only and not args.no_eval:
        from ctxsel.cli.main import main as ctxsel

        t0 = time.perf_counter()
        if ctxsel(eval_argv) != 0:
            raise SystemExit("evaluation failed")
        seconds["eval"] = time.perf_counter() - t0
    info["loadavg_end"] = C.loadavg()
    log = reward_log(llm_dir)
    swapped = json.loads((work / "pools_info.json").read_text())["gold_swapped_in"]
    summary = json.loads((eval_dir / "summary.json").read_text()) if (eval_dir / "summary.json").exists() else {}
    names = {methods[0]: "ldar (LLM reward)", methods[1]: "ldar (label reward)"}
    names.update({f"top-k@{k}": f"top-k@{k} (best F2 on train)"} if k != 5 else {})

    md = [
        C.header_md(
            "LDAR with the LLM-correctness reward (the paper's) on 64-paragraph pools",
            info,
            [
                f"Pools: each hotpotqa-long question's {args.pool} best-scored paragraphs (MiniLM), the fixed "
                f"80/20 split (80 training, 20 held-out questions); {swapped} of the 200 gold paragraphs were "
                "outside their question's best-scored ones and replaced its lowest-scored paragraph.",
                f"Label policy: `ctxsel train ldar {' '.join(label_argv)}` (the paper's network and training).",
                f"LLM policy: `ctxsel train ldar {' '.join(llm_argv)}`; reward curve: ldar_llm_reward_curve.png.",
                f"Reader calls: {log['bands_read']} bands read, {log['bands_overflowed']} longer than the "
                f"{args.n_ctx}-token window (reward 0, no call); "
                + (
                    f"{100 * log['correct_share']:.1f}% of the cached bands answered correctly."
                    if log["bands_read"]
                    else ""
                ),
                *(["Seconds (this call): " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items())] if seconds else []),
            ],
        ),
        "## Training with the LLM reward",
        "",
        f"{log['steps']} steps of {args.batch_size} questions ({log['samples']} sampled bands) in "
        f"{log['train_seconds'] / 60:.0f} minutes; the band cache holds {log['bands_read']} bands read by the reader "
        f"(so {max(0, log['samples'] - log['bands_read'] - log['bands_overflowed'])} or more samples were served "
        "from it).",
        "",
        "| steps | mean reward (share answered right) | mean k |",
        "|---|---:|---:|",
        *(
            f"| {name} | {w['reward']:.3f} | {w['k']:.2f} |"
            for name, w in (("first 10", log["first_10"]), ("last 10", log["last_10"]))
            if w is not None
        ),
        "",
        "![reward curve](ldar_llm_reward_curve.png)",
        "",
        f"## The reader on the 20 held-out questions (`ctxsel {' '.join(eval_argv)}`)",
        "",
        "| method | SubEM % | EM % | F1 % | recall % | tokens | k |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m in methods:
        row = summary.get("methods", {}).get(m)
        if row is None:
            continue
        md.append(
            f"| {names.get(m, m)} | {100 * row['score']:.1f} | {100 * (row.get('em') or 0):.1f} | "
            f"{100 * (row.get('f1') or 0):.1f} | {100 * (row.get('recall') or 0):.1f} | {row['n_tokens']:,.0f} | "
            f"{row['k']:.1f} |"
        )
    md.append("")
    args.out.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "json"):
        if (llm_dir / f"reward_curve.{ext}").exists():
            shutil.copyfile(llm_dir / f"reward_curve.{ext}", args.out / f"ldar_llm_reward_curve.{ext}")
    C.write_report(
        "ldar_llm_reward", args.out, "\n".join(md), {**info, "seconds": seconds, "reward": log, "eval": summary}
    )
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
