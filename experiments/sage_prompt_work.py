"""SAGE's prompt work: the paper's loop as written against the loop without its dead last verdict.

Algorithm 1 asks the sufficiency verdict after every round, the last one
included, although after round ``iter_max`` the loop ends whatever the verdict
says; that verdict and the ``n_perturb`` perturbed answers behind its
importance read the largest evidence of the question and cannot change the
answer. ``sage[final_verdict=true]`` asks them (what SAGE did before
2026-11-27); the default skips them. This script runs both on each question
of the hotpotqa-long test split with the default reader, from the same
llama.cpp state (its prefix forgotten before every run), and reports per
question the prompt tokens llama.cpp evaluated (``tokens_in -
tokens_reused``), calls and seconds, and whether the clean path came out the
same: the keys and verdict of every round both asked, the gathered sentences
and the answer.

``--ablation`` runs ``sage[n_perturb=0]`` instead (no importance: the
paper's "w/o importance" ablation, which changes the method) and compares it
with the short loop of the main run's JSON, question by question.

    OMP_NUM_THREADS=1 python -m experiments.sage_prompt_work --llm-threads 2
    OMP_NUM_THREADS=1 python -m experiments.sage_prompt_work --llm-threads 2 --ablation

Writes benchmarks/results/sage_prompt_work.md and .json (with ``--ablation``:
sage_prompt_work_ablation.md and .json).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from benchmarks._common import add_common_args, header_md, loadavg, machine_info, setup_threads, write_report

#: What the issue measured with the bundled base model (Gemma 3 270M), hotpotqa-long, first 20 questions.
ISSUE_BASELINE = {"tokens_in": 28_351, "calls": 12.45, "seconds": 151.8}
VARIANTS = {"literal": "sage[final_verdict=true]", "short": "sage", "no-importance": "sage[n_perturb=0]"}


def clean_path(sel: Any) -> dict[str, Any]:
    """What the literal and the short loop must agree on: every round's keys and (where both ask
    it) verdict, the gathered sentences, the answer."""
    rounds = [s for s in sel.trace if s.get("step") == "round"]
    return {
        "keys": [r["keys"] for r in rounds],
        "verdicts": [r.get("sufficient") for r in rounds],
        "ids": list(sel.ids),
        "answer": sel.answer.text,
    }


def mean(runs: list[dict[str, Any]], key: str) -> float:
    """The mean of ``key`` over one loop's per-question records."""
    return float(sum(x[key] for x in runs) / max(len(runs), 1))


def same_path(literal: dict[str, Any], short: dict[str, Any]) -> bool:
    n = len(short["verdicts"])  # the short loop's last round asks no verdict
    return bool(
        literal["keys"] == short["keys"]
        and literal["verdicts"][: n - 1] == short["verdicts"][: n - 1]
        and literal["ids"] == short["ids"]
        and literal["answer"] == short["answer"]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=int, default=20, help="the first N test questions (default all 20)")
    p.add_argument("--llm-threads", type=int, default=1)
    p.add_argument("--ablation", action="store_true", help="run sage[n_perturb=0] against the main run's JSON")
    add_common_args(p)
    args = p.parse_args(argv)
    info = machine_info(setup_threads(args.threads), versions=("llama_cpp",))
    info["llm_threads"] = args.llm_threads

    from tqdm.auto import tqdm

    from ctxsel.datasets import load_dataset
    from ctxsel.datasets.splits import split_examples
    from ctxsel.llm.local import LocalLlamaClient
    from ctxsel.metrics import substring_exact_match as subem
    from ctxsel.selectors import get_selector

    test = split_examples(load_dataset("hotpotqa-long"), "test")[: args.limit]
    client = LocalLlamaClient(n_threads=args.llm_threads)
    variants = ["no-importance"] if args.ablation else ["literal", "short"]
    selectors = {k: get_selector(VARIANTS[k], llm=client) for k in variants}
    rows = []
    for i, ex in enumerate(tqdm(test, desc="questions", unit="q")):
        row: dict[str, Any] = {"id": ex.id, "question": ex.question}
        order = variants if i % 2 == 0 else variants[::-1]  # neither always runs first
        for name in order:
            client.forget()
            t0 = time.perf_counter()
            sel = selectors[name].select(ex.question, ex.chunks)
            u = sel.usage
            row[name] = {
                "calls": u.calls,
                "tokens_in": u.tokens_in,
                "tokens_reused": u.tokens_reused,
                "evaluated": u.tokens_processed,
                "round_tokens": [s.get("prompt_tokens") for s in sel.trace if s.get("step") == "round"],
                "seconds": round(time.perf_counter() - t0, 1),
                "subem": subem(sel.answer.text if sel.answer is not None else "", ex.answers),
                "path": clean_path(sel),
            }
        if not args.ablation:
            row["same"] = same_path(row["literal"]["path"], row["short"]["path"])
        rows.append(row)
    if args.ablation:
        return ablation_report(args, info, client, rows)

    summary: dict[str, Any] = {
        name: {
            k: mean([r[name] for r in rows], k)
            for k in ("calls", "tokens_in", "tokens_reused", "evaluated", "seconds", "subem")
        }
        for name in variants
    }
    summary["ratio_evaluated"] = summary["literal"]["evaluated"] / summary["short"]["evaluated"]
    summary["ratio_seconds"] = summary["literal"]["seconds"] / summary["short"]["seconds"]
    summary["ratio_vs_issue"] = ISSUE_BASELINE["tokens_in"] / summary["short"]["evaluated"]
    summary["same"] = sum(r["same"] for r in rows)
    info["loadavg_end"] = loadavg()

    lines = [
        header_md("SAGE's prompt work: the literal loop against the loop without its last verdict", info),
        f"hotpotqa-long test split, first {len(rows)} questions; the default reader "
        f"({client.model_id}, {args.llm_threads} llama.cpp thread(s), window {client.n_ctx:,}); constrained "
        "replies; the two runs of a question alternate which goes first and start from a forgotten prefix.",
        "",
        "| question | literal: calls | evaluated | s | short: calls | evaluated | s | ratio | "
        "clean path the same | SubEM literal / short |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        a, b = r["literal"], r["short"]
        lines.append(
            f"| {r['id']} | {a['calls']} | {a['evaluated']:,} | {a['seconds']:.0f} | {b['calls']} | "
            f"{b['evaluated']:,} | {b['seconds']:.0f} | {a['evaluated'] / max(b['evaluated'], 1):.2f}x | "
            f"{'yes' if r['same'] else 'NO'} | {a['subem']:.0f} / {b['subem']:.0f} |"
        )
    la, sh = summary["literal"], summary["short"]
    lines += [
        f"| **mean** | {la['calls']:.2f} | {la['evaluated']:,.0f} | {la['seconds']:.0f} | {sh['calls']:.2f} | "
        f"{sh['evaluated']:,.0f} | {sh['seconds']:.0f} | **{summary['ratio_evaluated']:.2f}x** | "
        f"{summary['same']} of {len(rows)} | {100 * la['subem']:.0f}% / {100 * sh['subem']:.0f}% |",
        "",
        "Evaluated: the prompt tokens llama.cpp computed (`tokens_in - tokens_reused`, all calls of the "
        f"question). Prompt tokens sent: literal {la['tokens_in']:,.0f}, short {sh['tokens_in']:,.0f} a "
        f"question. Seconds: literal / short = {summary['ratio_seconds']:.2f}x in this run.",
        "",
        f"Against the issue's measurement (Gemma 3 270M, {ISSUE_BASELINE['tokens_in']:,} prompt tokens and "
        f"{ISSUE_BASELINE['calls']} calls a question, on the first 20 questions rather than these) the short "
        f"loop evaluates {summary['ratio_vs_issue']:.2f}x fewer tokens; the goal was 5x.",
    ]
    write_report(
        "sage_prompt_work", args.out, "\n".join(lines) + "\n", {"machine": info, "summary": summary, "rows": rows}
    )
    print("\n".join(lines[-8:]))
    return 0


def ablation_report(args: argparse.Namespace, info: dict[str, Any], client: Any, rows: list[dict[str, Any]]) -> int:
    """sage[n_perturb=0] beside the main run's two loops, matched by question."""
    main_run = json.loads((args.out / "sage_prompt_work.json").read_text())
    before = {r["id"]: r for r in main_run["rows"]}
    rows = [r for r in rows if r["id"] in before]
    lines = [
        header_md("SAGE without importance (n_perturb=0) beside the main run's loops", info),
        f"hotpotqa-long test split, {len(rows)} questions; {client.model_id}, {args.llm_threads} llama.cpp "
        "thread(s); the literal and short loops' numbers come from sage_prompt_work.json (seconds from "
        "another run, so compare them loosely).",
        "",
        "| question | evaluated: literal / short / no importance | calls | s | verdicts short / no importance | "
        "answer as the short loop's | SubEM short / no importance |",
        "|---|---|---:|---:|---|---|---|",
    ]
    same = 0
    for r in rows:
        a, b, c = before[r["id"]]["literal"], before[r["id"]]["short"], r["no-importance"]
        same += c["path"]["answer"] == b["path"]["answer"]
        lines.append(
            f"| {r['id']} | {a['evaluated']:,} / {b['evaluated']:,} / {c['evaluated']:,} | {c['calls']} | "
            f"{c['seconds']:.0f} | {b['path']['verdicts']} / {c['path']['verdicts']} | "
            f"{'yes' if c['path']['answer'] == b['path']['answer'] else 'NO'} | {b['subem']:.0f} / {c['subem']:.0f} |"
        )

    lit, short = [before[r["id"]]["literal"] for r in rows], [before[r["id"]]["short"] for r in rows]
    abl = [r["no-importance"] for r in rows]
    summary = {
        "literal_evaluated": mean(lit, "evaluated"),
        "short_evaluated": mean(short, "evaluated"),
        "ablation_evaluated": mean(abl, "evaluated"),
        "ablation_calls": mean(abl, "calls"),
        "ablation_subem": mean(abl, "subem"),
        "short_subem": mean(short, "subem"),
        "same_answer_as_short": same,
    }
    lines += [
        "",
        f"Mean evaluated prompt tokens: literal {summary['literal_evaluated']:,.0f}, short "
        f"{summary['short_evaluated']:,.0f}, no importance {summary['ablation_evaluated']:,.0f} "
        f"({summary['literal_evaluated'] / summary['ablation_evaluated']:.2f}x fewer than the literal loop, "
        f"{ISSUE_BASELINE['tokens_in'] / summary['ablation_evaluated']:.2f}x fewer than the issue's "
        f"{ISSUE_BASELINE['tokens_in']:,}); {summary['ablation_calls']:.2f} calls; the same answer as the short "
        f"loop on {same} of {len(rows)}; SubEM {100 * summary['short_subem']:.0f}% (short) and "
        f"{100 * summary['ablation_subem']:.0f}% (no importance).",
    ]
    write_report(
        "sage_prompt_work_ablation",
        args.out,
        "\n".join(lines) + "\n",
        {"machine": info, "summary": summary, "rows": rows},
    )
    print(lines[-1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
