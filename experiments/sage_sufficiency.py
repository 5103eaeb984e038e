"""SAGE's sufficiency check as a calibrated decision: the reader's probability of YES against whether the
gathered sentences hold every supporting fact, on hotpotqa-long.

    OMP_NUM_THREADS=1 python -m experiments.sage_sufficiency --llm-threads 2 [--limit N] [--split train|test|all]
    python -m experiments.sage_sufficiency --report      # the tables and the ROC plot from the rows so far

Every question runs ``sage[final_verdict=true,sufficient_at=1]`` with the bundled default reader on
llama.cpp: every round asks the sufficiency question (also the last one), and a stop needs P(YES) of 1,
so each question yields one (P(YES), label) pair per round. A round is *sufficient* when every
supporting fact of the question (HotpotQA ``supporting_facts``: title, sentence) is in the sentences
gathered so far (its text within the gathered sentences of its paragraph, joined in document order).
The threshold is chosen on the training split: the one that maximises F1 of "sufficient" (a stop
too early loses a fact; one too late costs a round), reported with the ROC (and its AUC) on the
training split and precision and recall at that threshold on the test split, 95% bootstrap intervals
over questions. Rows are appended to ``runs/sage_sufficiency/rows.jsonl`` as they come, so a stopped
run goes on where it stopped. Writes benchmarks/results/sage_sufficiency.{md,json,png}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks._common import add_common_args, header_md, loadavg, machine_info, setup_threads, write_report

ROWS = Path("runs/sage_sufficiency/rows.jsonl")
SPEC = "sage[final_verdict=true,sufficient_at=1]"


def run_questions(args: argparse.Namespace) -> None:
    from tqdm.auto import tqdm

    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.splits import split_examples
    from ctxsel.llm.local import LocalLlamaClient
    from ctxsel.selectors import get_selector
    from ctxsel.selectors.sage.graph import sentence_vertices
    from experiments.prune_hotpotqa import gold_sentences

    examples = load_dataset("hotpotqa-long")
    index = {e.id: i for i, e in enumerate(examples)}
    splits = {"train": split_examples(examples, "train"), "test": split_examples(examples, "test")}
    todo = splits["train"] + splits["test"] if args.split == "all" else splits[args.split]
    todo = todo[: args.limit] if args.limit else todo
    done = {json.loads(line)["id"] for line in ROWS.read_text().splitlines()} if ROWS.exists() else set()
    gold = gold_sentences()
    client = LocalLlamaClient(n_threads=args.llm_threads)
    sage = get_selector(SPEC, llm=client)
    ROWS.parent.mkdir(parents=True, exist_ok=True)
    split_of = {e.id: name for name, part in splits.items() for e in part}
    for ex in tqdm([e for e in todo if e.id not in done], desc="questions", unit="q"):
        t0 = time.perf_counter()
        sel = sage.select(ex.question, ex.chunks)
        seconds = time.perf_counter() - t0
        text = {v.id: v.text for v in sentence_vertices(ex.chunks)}
        facts = gold[index[ex.id]]
        seen: list[str] = []
        rounds = []
        for step in sel.trace:
            if step.get("step") != "round":
                continue
            seen += list(step["retrieved"]) + list(step["neighbours"])
            by_title: dict[str, list[tuple[int, str]]] = {}
            for sid in dict.fromkeys(seen):
                title, _, j = sid.rpartition("#s")
                by_title.setdefault(title, []).append((int(j), text.get(sid, "")))
            joined = {t: " ".join(s for _, s in sorted(v)) for t, v in by_title.items()}
            kept = sum(1 for title, fact in facts if fact in joined.get(title, ""))
            rounds.append(
                {
                    "round": step["round"],
                    "p_yes": step.get("p_sufficient"),
                    "verdict_raw": step.get("verdict_raw"),
                    "facts": len(facts),
                    "facts_gathered": kept,
                    "sufficient": bool(facts) and kept == len(facts),
                    "sentences": len(dict.fromkeys(seen)),
                }
            )
        row = {"id": ex.id, "split": split_of[ex.id], "seconds": round(seconds, 1), "rounds": rounds}
        with ROWS.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def roc(points: list[tuple[float, bool]]) -> list[tuple[float, float, float]]:
    """(threshold, false-positive rate, true-positive rate) for every distinct P(YES), high to low."""
    pos = sum(1 for _, y in points if y) or 1
    neg = sum(1 for _, y in points if not y) or 1
    out = [(1.01, 0.0, 0.0)]
    for t in sorted({p for p, _ in points}, reverse=True):
        tp = sum(1 for p, y in points if p >= t and y)
        fp = sum(1 for p, y in points if p >= t and not y)
        out.append((t, fp / neg, tp / pos))
    return out


def auc(curve: list[tuple[float, float, float]]) -> float:
    pts = sorted((f, t) for _, f, t in curve) + [(1.0, 1.0)]
    return sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(pts, pts[1:]))


def at_threshold(rows: list[dict[str, Any]], t: float) -> dict[str, Any]:
    """Precision and recall of "P(YES) >= t" for "sufficient", over every round of ``rows``, with 95%
    bootstrap intervals over questions."""
    import numpy as np

    def pr(sample: list[dict[str, Any]]) -> tuple[float | None, float | None]:
        pairs = [(r["p_yes"] >= t, r["sufficient"]) for q in sample for r in q["rounds"] if r["p_yes"] is not None]
        tp = sum(1 for s, y in pairs if s and y)
        said, actual = sum(1 for s, _ in pairs if s), sum(1 for _, y in pairs if y)
        return (tp / said if said else None), (tp / actual if actual else None)

    precision, recall = pr(rows)
    rng = np.random.default_rng(0)
    boots = [pr([rows[i] for i in rng.integers(0, len(rows), len(rows))]) for _ in range(2000)] if rows else []

    def ci(k: int) -> list[float] | None:
        vals = [float(v) for b in boots if (v := b[k]) is not None]
        return [float(np.quantile(vals, 0.025)), float(np.quantile(vals, 0.975))] if vals else None

    return {"threshold": t, "precision": precision, "precision_ci": ci(0), "recall": recall, "recall_ci": ci(1)}


def report(args: argparse.Namespace, info: dict[str, Any]) -> None:
    rows = [json.loads(line) for line in ROWS.read_text().splitlines()] if ROWS.exists() else []
    train = [r for r in rows if r["split"] == "train"]
    test = [r for r in rows if r["split"] == "test"]
    points = [(x["p_yes"], x["sufficient"]) for q in train for x in q["rounds"] if x["p_yes"] is not None]
    curve = roc(points)
    best = max(
        (at_threshold(train, t) for t, _, _ in curve[1:]),
        key=lambda m: (
            0.0
            if not (m["precision"] and m["recall"])
            else 2 * m["precision"] * m["recall"] / (m["precision"] + m["recall"])
        ),
        default=None,
    )
    chosen = None if best is None else best["threshold"]
    data = {
        "machine": info,
        "spec": SPEC,
        "questions": {"train": len(train), "test": len(test)},
        "sufficient_rounds": {"train": sum(p[1] for p in points), "train_rounds": len(points)},
        "roc_train": curve,
        "auc_train": auc(curve) if points else None,
        "chosen": chosen,
        "train_at_chosen": best,
        "test_at_chosen": None if chosen is None else at_threshold(test, chosen),
        "literal_yes_rate": sum(
            1 for q in rows for x in q["rounds"] if (x["verdict_raw"] or "").strip().upper().startswith("YES")
        )
        / max(sum(len(q["rounds"]) for q in rows), 1),
        "seconds_mean": sum(q["seconds"] for q in rows) / max(len(rows), 1),
    }
    from ctxsel.plotting import pyplot

    plt = pyplot()
    if points and plt is not None:
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
        ax.plot([f for _, f, _ in curve], [t for _, _, t in curve], marker=".")
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":")
        ax.set_xlabel("false positive rate (stops before every fact is gathered)")
        ax.set_ylabel("true positive rate")
        ax.set_title(f"SAGE P(YES), training split (AUC {data['auc_train']:.2f})")
        fig.tight_layout()
        fig.savefig(args.out / "sage_sufficiency.png", dpi=120)

    def pct(m: dict[str, Any] | None, key: str) -> str:
        if m is None or m[key] is None:
            return "-"
        lo_hi = m[f"{key}_ci"]
        return f"{100 * m[key]:.1f}" + ("" if lo_hi is None else f" [{100 * lo_hi[0]:.1f}, {100 * lo_hi[1]:.1f}]")

    lines = [
        header_md("SAGE's sufficiency check: P(YES) against every supporting fact gathered", info),
        f"`{SPEC}` with the bundled default reader on hotpotqa-long; {len(train)} training and {len(test)} test "
        f"questions so far ({len(points)} training rounds, {data['sufficient_rounds']['train']} of them sufficient). "
        f"The reader's literal reply was YES on {100 * data['literal_yes_rate']:.0f}% of all rounds; mean "
        f"{data['seconds_mean']:.0f} s a question.",
        "",
        f"- ROC AUC on the training split: {'-' if data['auc_train'] is None else round(data['auc_train'], 3)} "
        "(plot: sage_sufficiency.png)",
        f"- Threshold chosen on the training split (largest F1): {chosen}",
        f"- Training split at it: precision {pct(best, 'precision')}, recall {pct(best, 'recall')}",
        f"- Test split at it: precision {pct(data['test_at_chosen'], 'precision')}, "
        f"recall {pct(data['test_at_chosen'], 'recall')}",
    ]
    write_report("sage_sufficiency", args.out, "\n".join(lines) + "\n", data)
    print("\n".join(lines[-4:]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--split", choices=("train", "test", "all"), default="all")
    p.add_argument("--limit", type=int, default=0, help="the first N questions of the split (default all)")
    p.add_argument("--llm-threads", type=int, default=2)
    p.add_argument("--report", action="store_true", help="only the report, from the rows so far")
    add_common_args(p)
    args = p.parse_args(argv)
    info = machine_info(setup_threads(args.threads), versions=("llama_cpp",))
    info["llm_threads"] = args.llm_threads
    if not args.report:
        run_questions(args)
    info["loadavg_end"] = loadavg()
    report(args, info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
