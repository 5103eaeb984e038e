"""SAGE's sufficiency check as a calibrated decision: the reader's probability of YES against whether the
evidence it judges holds every supporting fact, on hotpotqa-long.

    OMP_NUM_THREADS=1 python -m experiments.sage_sufficiency --llm-threads 2 [--limit N] [--split train|test|all]

(``--limit N``: the first N questions of each split; the splits are interleaved in proportion.)
    python -m experiments.sage_sufficiency --report      # the tables and the ROC plot from the rows so far

A full SAGE run costs minutes a question on two CPU cores, so the check is measured on its own
(``SAGE.judge``: Algorithm 2's importance, then Prompt 2, exactly as a round asks them) on two
evidence sets built per question: the sentences that hold its supporting facts (HotpotQA
``supporting_facts``) with ``DISTRACTORS`` sentences that SAGE's keyword retrieval ranks first for the
question's own words, and the same set with the sentences of one fact, drawn at random, left out.
A set is *sufficient* when every supporting fact is in it (its text within the set's sentences of
its paragraph, joined in document order), so the first set is sufficient and the second is not,
unless the fact is stated twice. The bundled default reader runs on llama.cpp.

The threshold is chosen on the training split: the P(YES) that maximises F1 of "sufficient" (a stop
too early loses a fact; one too late costs a round), reported with the ROC (and its AUC) on the
training split and precision and recall at that threshold on the test split, 95% bootstrap intervals
over questions. The sets are half sufficient by construction, so precision here is at a base rate of
one half, not at SAGE's own rounds'. Rows (one a check) are appended to
``benchmarks/results/sage_sufficiency_examples.csv`` as they come, so a stopped run goes on where it
stopped, on this machine or another. Writes benchmarks/results/sage_sufficiency.{md,json,png}.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

from benchmarks._common import add_common_args, header_md, loadavg, machine_info, setup_threads, write_report

ROWS = Path("benchmarks/results/sage_sufficiency_examples.csv")  # committed: a run goes on across machines
FIELDS = [
    "id",
    "split",
    "p_yes",
    "verdict_raw",
    "importance",
    "facts",
    "facts_gathered",
    "sufficient",
    "sentences",
    "prompt_tokens",
    "seconds",
]


def read_rows() -> list[dict[str, Any]]:
    """The questions measured so far, each with its checks (``rounds``), from :data:`ROWS`."""
    import csv

    if not ROWS.exists():
        return []
    by_id: dict[str, dict[str, Any]] = {}
    with ROWS.open(encoding="utf-8", newline="") as f:
        for r in csv.DictReader(f):
            row = by_id.setdefault(r["id"], {"id": r["id"], "split": r["split"], "rounds": []})
            row["rounds"].append(
                {
                    "p_yes": float(r["p_yes"]) if r["p_yes"] else None,
                    "verdict_raw": r["verdict_raw"],
                    "importance": float(r["importance"]) if r["importance"] else None,
                    "facts": int(r["facts"]),
                    "facts_gathered": int(r["facts_gathered"]),
                    "sufficient": r["sufficient"] == "True",
                    "sentences": int(r["sentences"]),
                    "prompt_tokens": int(r["prompt_tokens"]),
                    "seconds": float(r["seconds"]),
                }
            )
    return list(by_id.values())


def append_row(row: dict[str, Any]) -> None:
    import csv

    new = not ROWS.exists()
    with ROWS.open("a", encoding="utf-8", newline="") as f:
        out = csv.DictWriter(f, FIELDS)
        if new:
            out.writeheader()
        for check in row["rounds"]:
            out.writerow({"id": row["id"], "split": row["split"], **check})


SPEC = "sage[sufficient_at=0.5]"  # any threshold: it makes the check read P(YES), which is what is recorded
DISTRACTORS = 8


def fact_sentences(vertices: list[Any], title: str, fact: str) -> list[str]:
    """The sentence ids of paragraph ``title`` that a supporting fact's text spans."""
    return [v.id for v in vertices if v.meta["parent"] == title and (v.text in fact or fact in v.text)]


def holds(vertices: list[Any], ids: set[str], facts: list[tuple[str, str]]) -> int:
    """How many of ``facts`` the sentences ``ids`` hold (each paragraph's kept sentences, joined in order)."""
    joined: dict[str, str] = {}
    for v in vertices:  # in document order
        if v.id in ids:
            joined[v.meta["parent"]] = (joined.get(v.meta["parent"], "") + " " + v.text).strip()
    return sum(1 for title, fact in facts if fact in joined.get(title, ""))


def evidence_sets(question: str, chunks: list[Any], facts: list[tuple[str, str]], rng: random.Random) -> list[set[str]]:
    """Every fact's sentences with the distractors, and the same less one fact's sentences ([] when a
    fact's sentences cannot be found)."""
    from ctxsel.selectors.sage.graph import SentenceGraph

    graph = SentenceGraph(chunks)
    per_fact = [fact_sentences(graph.vertices, t, f) for t, f in facts]
    if not facts or not all(per_fact):
        return []
    gold = {s for ids in per_fact for s in ids}
    hits, _ = graph.retrieve([question], 4 * DISTRACTORS)
    distractors = [graph.vertices[i].id for i in hits if graph.vertices[i].id not in gold][:DISTRACTORS]
    dropped = set(per_fact[rng.randrange(len(per_fact))])
    return [gold | set(distractors), (gold - dropped) | set(distractors)]


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
    parts = list(splits.values()) if args.split == "all" else [splits[args.split]]
    parts = [part[: args.limit] if args.limit else part for part in parts]
    # the splits interleaved in proportion, so that a stopped run has measured both
    todo = [
        e
        for _, _, e in sorted(
            ((i / len(p), k, e) for k, p in enumerate(parts) for i, e in enumerate(p)), key=lambda t: t[:2]
        )
    ]
    done = {row["id"] for row in read_rows()}
    gold = gold_sentences()
    sage = get_selector(SPEC, llm=LocalLlamaClient(n_threads=args.llm_threads))
    ROWS.parent.mkdir(parents=True, exist_ok=True)
    split_of = {e.id: name for name, part in splits.items() for e in part}
    for ex in tqdm([e for e in todo if e.id not in done], desc="questions", unit="q"):
        facts = gold[index[ex.id]]
        vertices = sentence_vertices(ex.chunks)
        order = {v.id: i for i, v in enumerate(vertices)}
        rounds = []
        for ids in evidence_sets(ex.question, list(ex.chunks), facts, random.Random(ex.id)):
            t0 = time.perf_counter()
            step = sage.judge(ex.question, ex.chunks, sorted(ids, key=order.__getitem__))
            kept = holds(vertices, ids, facts)
            rounds.append(
                {
                    "p_yes": step.get("p_sufficient"),
                    "verdict_raw": step.get("verdict_raw"),
                    "importance": step.get("importance"),
                    "facts": len(facts),
                    "facts_gathered": kept,
                    "sufficient": kept == len(facts),
                    "sentences": len(ids),
                    "prompt_tokens": step["prompt_tokens"],
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            )
        row = {"id": ex.id, "split": split_of[ex.id], "rounds": rounds}
        append_row(row)


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
    rows = read_rows()
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
        "seconds_mean": sum(x["seconds"] for q in rows for x in q["rounds"])
        / max(sum(len(q["rounds"]) for q in rows), 1),
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
        f"SAGE's check (`{SPEC}`, `SAGE.judge`) with the bundled default reader on hotpotqa-long; "
        f"{len(train)} training and {len(test)} test questions so far, two evidence sets each (every supporting "
        f"fact with {DISTRACTORS} retrieved distractors, and the same less one fact): {len(points)} training sets, "
        f"{data['sufficient_rounds']['train']} of them sufficient. The reader's literal reply was YES on "
        f"{100 * data['literal_yes_rate']:.0f}% of all sets; mean {data['seconds_mean']:.0f} s a check.",
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
    p.add_argument("--limit", type=int, default=0, help="the first N questions of each split (default all)")
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
