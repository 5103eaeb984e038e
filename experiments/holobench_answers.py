"""The HoloBench-style answer table: structured answers beside free-text ones, each run's judge checked.

Reads finished (or stopped) ``ctxsel eval --reader ... --judge ...`` runs, one folder per set and
answer format, and writes one table: per run and method the answers read, the set-overlap F1
with its 95% bootstrap interval, the share of valid structured replies, context recall and
tokens; the judge's score only for a run whose judge is trusted (Cohen's kappa against the
overlap score >= 0.6, ``ctxsel.eval.stats.judge_agreement``), and below the table each run's
kappa and confusion table. A run stopped before its end counts the answers it has (``n``).

    python -m experiments.holobench_answers --answers --runs runs/FREE_RUN,runs/STRUCTURED_RUN

Reads nothing but the folders; writes benchmarks/results/holobench_answers.md and .json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks._common import (
    BENCH_DIR,
    header_md,
    machine_info,
    md_table,
    setup_threads,
    write_report,
)
from ctxsel.eval.report import summarize
from ctxsel.eval.stats import TRUSTED_KAPPA, judge_agreement
from experiments.run_summary import read_rows


def _pct(v: float | None, ci: list[float] | None = None) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f}" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")


def run_table(folder: Path) -> dict[str, Any]:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    rows = [r for r in read_rows(folder) if not r.get("error")]
    methods = [m for m in config["methods"] if any(r["method"] == m for r in rows)]
    summary = summarize(rows, methods) if rows else {}
    agreement = judge_agreement(rows) if config.get("judge") else None
    return {
        "folder": str(folder),
        "dataset": config.get("dataset"),
        "answer_format": config.get("answer_format") or "free",
        "template": (config.get("reader") or {}).get("template"),
        "judge": config.get("judge"),
        "agreement": agreement,
        "methods": summary,
    }


def markdown(runs: list[dict[str, Any]]) -> str:
    headers = [
        "set",
        "answers",
        "method",
        "n",
        "overlap F1 % [95%]",
        "valid %",
        "judge %",
        "recall %",
        "tokens",
        "reader in",
        "reader out",
    ]
    table = []
    for run in runs:
        trusted = run["agreement"] is not None and run["agreement"]["trusted"]
        for m, e in run["methods"].items():
            table.append(
                [
                    Path(str(run["dataset"])).stem,
                    f"{run['answer_format']} ({run['template']})",
                    m,
                    str(e["n"]),
                    _pct(e.get("overlap_f1"), e.get("overlap_f1_ci95")),
                    _pct(e.get("answer_valid")),
                    _pct(e.get("score"), e.get("score_ci95"))
                    if trusted
                    else ("not trusted" if run["judge"] else "no judge"),
                    _pct(e.get("recall")),
                    f"{e['n_tokens']:,.0f}" if e.get("n_tokens") is not None else "-",
                    f"{e['tokens_in']:,.0f}" if e.get("tokens_in") is not None else "-",
                    f"{e['tokens_out']:,.1f}" if e.get("tokens_out") is not None else "-",
                ]
            )
    md = md_table(headers, table, ["l", "l", "l"] + ["r"] * (len(headers) - 3)) + "\n"
    for run in runs:
        a = run["agreement"]
        if a is None:
            md += f"- `{run['folder']}`: no judged answer.\n"
            continue
        c = a["confusion"]
        kappa = "undefined" if a["kappa"] is None else f"{round(a['kappa'], 2) + 0.0:.2f}"  # no "-0.00"
        verdict = "trusted" if a["trusted"] else f"not trusted (below {TRUSTED_KAPPA})"
        md += (
            f"- `{run['folder']}`: judge `{run['judge']}` over {a['n']} answers, kappa {kappa} against the overlap "
            f"F1: {verdict}; judge credits / overlap credits: both {c['judge_yes_ref_yes']}, judge only "
            f"{c['judge_yes_ref_no']}, overlap only {c['judge_no_ref_yes']}, neither {c['judge_no_ref_no']}.\n"
        )
    return md


def _gold(folder: Path) -> dict[str, list[str]]:
    """The ground truth per example from the run's data set, when it is a JSONL file still on disk."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    path = Path(str(config.get("dataset") or ""))
    out: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.suffix == ".jsonl" and path.is_file() else []:
        if line.strip():
            ex = json.loads(line)
            out[str(ex.get("id"))] = [str(a) for a in ex.get("answers") or []]
    return out


def answers_md(folders: list[Path], width: int = 240) -> str:
    """Every answer's last ``width`` characters (where free text concludes) beside the ground truth, one
    line each: the evidence when a table has few questions."""
    md = "\n## The answers\n\n"
    for folder in folders:
        gold = _gold(folder)
        md += f"`{folder}`:\n\n"
        for r in sorted(read_rows(folder), key=lambda r: (str(r["example_id"]), str(r["method"]))):
            answer = " ".join(str(r.get("answer") or r.get("error") or "").split())
            cut = ("... " if len(answer) > width else "") + answer[-width:]
            f1 = r.get("overlap_f1")
            truth = "; ".join(gold.get(str(r["example_id"]), [])) or "?"
            md += (
                f"- {r['example_id']} {r['method']} (F1 {'-' if f1 is None else f'{100 * f1:.0f}'}): {cut} "
                f"(ground truth: {truth})\n"
            )
        md += "\n"
    return md


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True, help="comma-separated eval output folders")
    p.add_argument("--out", default=str(BENCH_DIR / "results"), help="where the .md and .json go")
    p.add_argument("--answers", action="store_true", help="list every answer under the table")
    args = p.parse_args(argv)
    folders = [Path(f) for f in args.runs.split(",") if f.strip()]
    missing = [str(f) for f in folders if not (f / "config.json").is_file()]
    if missing:
        print(f"error: no eval run (config.json) in {', '.join(missing)}", file=sys.stderr)
        return 2
    info = machine_info(setup_threads(1), ("llama_cpp",))
    runs = [run_table(f) for f in folders]
    notes = [
        "Overlap F1: ctxsel.datasets.holobench.scoring (structured answers: score_items on the parsed items; "
        "free text: score_answer); a structured reply that broke its format scores 0.",
        f"Judge %: the LLM judge's mean score, shown only where its kappa against the overlap F1 is >= {TRUSTED_KAPPA}.",
    ]
    md = header_md("HoloBench-style answers: structured beside free text", info, notes) + "\n" + markdown(runs)
    if args.answers:
        md += answers_md(folders)
    write_report("holobench_answers", Path(args.out), md, {"machine": info, "runs": runs})
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
