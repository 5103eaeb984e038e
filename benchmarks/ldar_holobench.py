"""Does LDAR's band move with the question? The policy trained on a mix whose relevant-chunk count varies.

On hotpotqa-long every question has two gold paragraphs, and LDAR trained there learns one fixed
band (exactly top-3: benchmarks/results/ldar_latency.md). Here the training data varies: HoloBench-
style sets (``ctxsel make-holo``: one chunk per sentence) at several information amounts in a
context of fixed size, so the number of relevant chunks ranges over an order of magnitude. The
held-out sets are generated with a seed never used for training.

    python benchmarks/ldar_holobench.py [--amounts 500,1k,2k,4k] [--size 8k] [--train-seeds 1,2,3]
        [--test-seed 100] [--steps 300] [--encoder summary] [--threads 1]

1. Writes the sets to --work-dir (train.jsonl: every amount x training seed; test.jsonl: every
   amount at --test-seed), with the merge strategy cycling over uniform/begin/end/middle/bimodal.
2. Trains LDAR with the label reward: ``ctxsel train ldar --dataset train.jsonl --reward label ...``
   (the trainer's own 80/20 split of train.jsonl monitors it).
3. On test.jsonl: the policy's k per query against the query's relevant-chunk count (Spearman), and
   recall and tokens next to adaptive-k, the fixed top-k that is best on the training sets (by the
   label reward's F2) and the fixed top-k whose training-set tokens are closest to the policy's.

``--mix-hotpotqa`` adds hotpotqa-long's training split (80 questions, two gold paragraphs among
991) to the training file and reports its test split (20 questions) beside the fixed top-k that is
best on hotpotqa's training questions; ``--train-args`` passes options to ``ctxsel train ldar`` (the
options against collapse to one band: ``--baseline question --normalize-advantages --entropy-coef
0.01 --lr-schedule cosine``). ``--name`` names the report (default ldar_holobench).

Writes benchmarks/results/NAME.{md,json,png} and the reward curve, NAME_curve.{png,json}.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

STRATEGIES = ("uniform", "begin", "end", "middle", "bimodal")
K_GRID = (1, 2, 3, 5, 8, 10, 15, 20, 30, 40, 50, 75, 100, 150, 200, 300)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    C.add_common_args(p)
    p.add_argument("--amounts", default="500,1k,2k,4k", help="information amounts, tokens (comma-separated)")
    p.add_argument("--size", default="8k", help="context size, tokens (default 8k)")
    p.add_argument("--train-seeds", default="1,2,3", help="generation seeds of the training sets")
    p.add_argument("--test-seed", type=int, default=100, help="generation seed of the held-out sets")
    p.add_argument("--n-queries", type=int, default=30, help="queries per set (default 30)")
    p.add_argument("--steps", type=int, default=300, help="REINFORCE steps (default 300)")
    p.add_argument("--encoder", default="summary", help="transformer (the paper) or summary (default: fast)")
    p.add_argument("--work-dir", type=Path, default=Path("runs/ldar/holobench"), help="sets, policy, eval")
    p.add_argument("--mix-hotpotqa", action="store_true", help="train on hotpotqa-long's training split too")
    p.add_argument("--train-args", default="", help="more `ctxsel train ldar` options, e.g. '--entropy-coef 0.01'")
    p.add_argument("--name", default="ldar_holobench", help="report name (default ldar_holobench)")
    return p.parse_args()


def tokens(value: str) -> int:
    from ctxsel.specs import spec_value

    return int(spec_value(value))


def write_sets(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from ctxsel.datasets.holobench.generate import dumps_jsonl, make_examples

    amounts = [tokens(a) for a in args.amounts.split(",")]
    size = tokens(args.size)
    seeds = [int(s) for s in args.train_seeds.split(",")]
    counts: dict[str, int] = {}
    for name, run_seeds in (("train", seeds), ("test", [args.test_seed])):
        examples: list[dict[str, Any]] = []
        for i, (amount, seed) in enumerate((a, s) for s in run_seeds for a in amounts):
            gen = make_examples(amount, size=size, seed=seed, n_queries=args.n_queries, strategy=STRATEGIES[i % 5])
            for ex in gen.examples:
                ex["id"] = f"{name}-{amount}-{seed}-{ex['id']}"
            examples += gen.examples
        if name == "train" and args.mix_hotpotqa:
            examples += [example_dict(ex, "hotpotqa-") for ex in hotpotqa_split("train")]
        (work / f"{name}.jsonl").write_bytes(dumps_jsonl(examples))
        counts[name] = len(examples)
    return {"amounts": amounts, "size": size, "train_seeds": seeds, "n_examples": counts}


def hotpotqa_split(part: str) -> list[Any]:
    """hotpotqa-long's fixed training or test split (ctxsel.datasets.splits, seed 0)."""
    from ctxsel.datasets.hotpotqa import load_hotpotqa_long
    from ctxsel.datasets.splits import split_examples

    return split_examples(load_hotpotqa_long(), part)  # type: ignore[arg-type]


def example_dict(ex: Any, prefix: str) -> dict[str, Any]:
    """An Example in ctxsel's generic JSONL format, its id prefixed (token counts kept)."""
    return {
        "id": prefix + ex.id,
        "question": ex.question,
        "chunks": [{"id": c.id, "text": c.text, "doc_id": c.doc_id, "position": c.position} for c in ex.chunks],
        "gold_ids": list(ex.gold_ids),
        "answers": list(ex.answers),
    }


def spearman(x: list[float], y: list[float]) -> float:
    import numpy as np
    from scipy.stats import spearmanr

    if len(set(x)) < 2 or len(set(y)) < 2:
        return float("nan")
    return float(spearmanr(np.asarray(x), np.asarray(y)).statistic)


def rows_for(selector: Any, scored: list[tuple[Any, Any]]) -> list[dict[str, Any]]:
    from ctxsel import metrics
    from ctxsel.train.ldar_rewards import fbeta

    out = []
    for ex, s in scored:
        sel = selector.select(ex.question, ex.chunks, s)
        rec, prec = metrics.context_recall(sel.ids, ex.gold_ids), metrics.context_precision(sel.ids, ex.gold_ids)
        out.append(
            {"gold": len(ex.gold_ids), "k": sel.k, "tokens": sel.n_tokens, "recall": rec, "f2": fbeta(rec, prec)}
        )
    return out


def mean(rows: list[dict[str, Any]], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def main() -> int:
    args = parse_args()
    thread_info = C.setup_threads(args.threads)
    info = C.machine_info(thread_info, ("numpy", "torch", "onnxruntime"))
    import numpy as np

    from ctxsel.cli.main import main as ctxsel
    from ctxsel.datasets import load_dataset
    from ctxsel.scoring import get_scorer
    from ctxsel.selectors import get_selector
    from ctxsel.selectors.ldar.selector import LDAR

    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    sets = write_sets(args, work)
    seconds = {"generate": time.perf_counter() - t0}
    scorer = get_scorer("dense")
    data = {name: load_dataset(str(work / f"{name}.jsonl")) for name in ("train", "test")}
    t0 = time.perf_counter()
    scored = {
        name: [(ex, np.asarray(scorer.score(ex.question, ex.chunks), dtype=np.float64)) for ex in exs]
        for name, exs in data.items()
    }
    seconds["embed"] = time.perf_counter() - t0
    policy_dir = work / f"policy-{args.encoder}"
    t0 = time.perf_counter()
    argv = ["train", "ldar", "--dataset", str(work / "train.jsonl"), "--reward", "label", "--encoder", args.encoder]
    argv += ["--output", str(policy_dir), "--steps", str(args.steps), "--threads", str(args.threads)]
    argv += args.train_args.split()
    if ctxsel([*argv, "--overwrite", "--no-progress"]) != 0:
        raise SystemExit("training failed")
    seconds["train"] = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "json"):  # the reward curve beside the report
        shutil.copyfile(policy_dir / f"reward_curve.{ext}", args.out / f"{args.name}_curve.{ext}")

    ldar = LDAR(policy=policy_dir / "policy")
    holo_train = [(ex, sc) for ex, sc in scored["train"] if not ex.id.startswith("hotpotqa-")]
    hotpot_train = [(ex, sc) for ex, sc in scored["train"] if ex.id.startswith("hotpotqa-")]
    fixed_train = {k: rows_for(get_selector(f"top-k@{k}"), holo_train) for k in K_GRID}
    best_k = max(K_GRID, key=lambda k: mean(fixed_train[k], "f2"))
    ldar_train_tokens = mean(rows_for(ldar, holo_train), "tokens")
    matched_k = min(K_GRID, key=lambda k: abs(mean(fixed_train[k], "tokens") - ldar_train_tokens))
    results = {
        "ldar": rows_for(ldar, scored["test"]),
        "adaptive-k": rows_for(get_selector("adaptive-k"), scored["test"]),
        f"top-k@{best_k} (best F2 on train)": rows_for(get_selector(f"top-k@{best_k}"), scored["test"]),
        f"top-k@{matched_k} (train tokens nearest LDAR's)": rows_for(
            get_selector(f"top-k@{matched_k}"), scored["test"]
        ),
    }
    gold = [r["gold"] for r in results["ldar"]]
    rho = {m: spearman(gold, [r["k"] for r in rows]) for m, rows in results.items()}
    ldar_tokens = mean(results["ldar"], "tokens")
    at_equal = topk_recall_at(ldar_tokens, scored["test"], max(K_GRID))
    gain = 100 * (mean(results["ldar"], "recall") - at_equal)
    hotpot = hotpotqa_rows(ldar, scorer, hotpot_train) if args.mix_hotpotqa else None
    info["loadavg_end"] = C.loadavg()

    md = C.header_md(
        "LDAR on HoloBench-style sets: does the band move with the question?",
        info,
        [
            f"Sets: information amounts {sets['amounts']} tokens in {sets['size']:,}-token contexts (one chunk per "
            f"sentence), {args.n_queries} queries a set; training seeds {sets['train_seeds']} "
            f"({sets['n_examples']['train']} queries), held-out seed {args.test_seed} "
            f"({sets['n_examples']['test']} queries); all-MiniLM-L6-v2 scores.",
            f"Policy: `{args.encoder}` encoder, label reward (F2), {args.steps} REINFORCE steps "
            f"(`ctxsel {' '.join(argv)}`); reward curve: {args.name}_curve.png."
            + (
                f" The training file also holds hotpotqa-long's training split ({len(hotpot_train)}"
                " questions); the fixed top-k rows below are chosen on the HoloBench-style training sets."
                if args.mix_hotpotqa
                else ""
            ),
            "Seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()) + ".",
        ],
    )
    table = [
        [
            m,
            f"{100 * mean(rows, 'recall'):.1f}",
            f"{mean(rows, 'tokens'):,.0f}",
            f"{mean(rows, 'k'):.1f}",
            f"{100 * mean(rows, 'f2'):.1f}",
            "—" if rho[m] != rho[m] else f"{rho[m]:.2f}",  # NaN: a fixed k does not vary
        ]
        for m, rows in results.items()
    ]
    table.append(
        ["top-k at LDAR's tokens (held-out curve, interpolated)", f"{100 * at_equal:.1f}", f"{ldar_tokens:,.0f}"]
    )
    table[-1] += ["", "", ""]
    md += "\n## Held-out sets\n\n" + C.md_table(
        ["method", "recall %", "tokens", "k", "F2 %", "Spearman(gold count, k)"], table, ["l", "r", "r", "r", "r", "r"]
    )
    by_amount: dict[int, list[int]] = {}
    for ex, r in zip(data["test"], results["ldar"]):
        by_amount.setdefault(int(ex.meta.get("info_amount", 0)), []).append(r["k"])
    md += "\n\nLDAR's k by information amount (held-out): " + ", ".join(
        f"{a:,} tokens: {np.mean(ks):.1f} (gold {np.mean([g for g, e in zip(gold, data['test']) if int(e.meta.get('info_amount', 0)) == a]):.1f})"
        for a, ks in sorted(by_amount.items())
    )
    md += (
        f"\n\nGoals (issue 18): Spearman >= 0.8 between a query's relevant-chunk count and the policy's k "
        f"(LDAR: {rho['ldar']:.2f}); recall at equal tokens >= 5 points above fixed top-k (LDAR: {gain:+.1f} "
        "points against top-k on the held-out recall/tokens curve at LDAR's mean tokens).\n"
    )
    if hotpot is not None:
        md += "\n## hotpotqa-long test split (20 questions, never trained on)\n\n" + C.md_table(
            ["method", "recall %", "tokens", "k", "F2 %"],
            [
                [
                    m,
                    f"{100 * mean(r, 'recall'):.1f}",
                    f"{mean(r, 'tokens'):,.0f}",
                    f"{mean(r, 'k'):.1f}",
                    f"{100 * mean(r, 'f2'):.1f}",
                ]
                for m, r in hotpot["rows"].items()
            ],
            ["l", "r", "r", "r", "r"],
        )
        md += (
            f"\n\nGoal (issue 18): on this split LDAR no worse than the fixed top-k best on the training data "
            f"(top-k@{hotpot['best_k']}, best F2 on hotpotqa's 80 training questions): recall "
            f"{100 * mean(hotpot['rows']['ldar'], 'recall'):.1f} against "
            f"{100 * mean(hotpot['rows'][hotpot['best_label']], 'recall'):.1f}, F2 "
            f"{100 * mean(hotpot['rows']['ldar'], 'f2'):.1f} against "
            f"{100 * mean(hotpot['rows'][hotpot['best_label']], 'f2'):.1f}. At LDAR's own "
            f"{mean(hotpot['rows']['ldar'], 'tokens'):,.0f} tokens, fixed top-k (this split's recall/tokens curve, "
            f"interpolated) has {100 * hotpot['topk_recall_at_ldar_tokens']:.1f}% recall.\n"
        )
    plot(results["ldar"], args.out / f"{args.name}.png")
    md += f"\n![k against the relevant-chunk count]({args.name}.png)\n"
    md_path, js_path = C.write_report(
        args.name,
        args.out,
        md,
        {
            "info": info,
            "sets": sets,
            "seconds": seconds,
            "rho": rho,
            "gain_at_equal_tokens": gain,
            "results": results,
            "hotpotqa": hotpot,
        },
    )
    print(md)
    print(f"wrote {md_path}, {js_path}")
    return 0


def topk_recall_at(tokens: float, scored: list[tuple[Any, Any]], max_k: int) -> float:
    """Recall of fixed top-k at ``tokens``: the recall/tokens curve of top-k, k = 1..max_k, interpolated."""
    import numpy as np

    from ctxsel.selectors import get_selector

    curve = [rows_for(get_selector(f"top-k@{k}"), scored) for k in range(1, max_k + 1)]
    return float(np.interp(tokens, [mean(c, "tokens") for c in curve], [mean(c, "recall") for c in curve]))


def hotpotqa_rows(ldar: Any, scorer: Any, train: list[tuple[Any, Any]]) -> dict[str, Any]:
    """LDAR on hotpotqa-long's test split beside adaptive-k and the top-k best (F2) on its training split
    (``train``: the training questions as scored for the policy)."""
    import numpy as np

    from ctxsel.selectors import get_selector

    test = [(ex, np.asarray(scorer.score(ex.question, ex.chunks), dtype=np.float64)) for ex in hotpotqa_split("test")]
    best_k = max(K_GRID, key=lambda k: mean(rows_for(get_selector(f"top-k@{k}"), train), "f2"))
    label = f"top-k@{best_k} (best F2 on hotpotqa train)"
    rows = {
        "ldar": rows_for(ldar, test),
        "adaptive-k": rows_for(get_selector("adaptive-k"), test),
        label: rows_for(get_selector(f"top-k@{best_k}"), test),
    }
    at_equal = topk_recall_at(mean(rows["ldar"], "tokens"), test, 30)
    return {"best_k": best_k, "best_label": label, "rows": rows, "topk_recall_at_ldar_tokens": at_equal}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.scatter([r["gold"] for r in rows], [r["k"] for r in rows], s=12, alpha=0.7)
    top = max(max(r["gold"] for r in rows), max(r["k"] for r in rows))
    ax.plot([0, top], [0, top], color="grey", lw=0.8, ls="--", label="k = relevant count")
    ax.set_xlabel("relevant chunks in the query's context")
    ax.set_ylabel("chunks LDAR keeps (k)")
    ax.set_title("LDAR on held-out HoloBench-style sets")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
