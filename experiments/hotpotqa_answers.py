"""The hotpotqa-long answer table from CPU eval runs: intervals, paired comparisons, and what is missing.

The whole table (every method on all 100 questions) is hours to days of llama.cpp reading on a
2-core CPU, so it is built from resumable ``ctxsel eval`` runs that may still be going. This script
reads their folders and writes one table: each row's metrics over the questions it has read, each
mean with its 95% bootstrap interval; the paired differences to ``adaptive-k`` and to ``full``
where those rows exist, each over the questions both rows have read; each row's progress; and for
every row of the table that is absent its reason and its cost per question as measured earlier on
this kind of CPU. Fewer
questions than the data set holds are labelled partial, so a stopped run is never read as the
whole result.

    python -m experiments.hotpotqa_answers --runs runs/reader_hotpotqa_100 --hybrid runs/reader_hotpotqa_100_hybrid

Reads nothing but the folders; writes benchmarks/results/hotpotqa_answers.md and .json, a forest plot
of the paired SubEM and F1 differences (.png; ``--plot-only`` redraws it from the .json), and keeps a
copy of each folder's config.json and the per-example numbers of its finished rows (``examples.csv``,
:mod:`experiments.run_summary`: no texts) in benchmarks/results/<name>_runs/<folder>/ (``--keep``).
The copies are committed, so the table is rebuilt from them alone; the run logs (``results.jsonl``)
stay in ``runs/``, where a stopped run resumes from them.
"""

from __future__ import annotations

import argparse
import json
import shutil
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
from experiments.run_summary import read_rows


def _alone(method: str, folder: str) -> str:
    """How a slow row runs on its own: the 100-question config without its compare row, or a GPU."""
    return f"--methods {method} --compare none --output runs/reader_hotpotqa_100_{folder} on the 100-question config, or a GPU"


#: The rows the table must have, in order (issue 46): label -> how it is run.
TABLE: dict[str, str] = {
    "closed-book": "experiments/reader_hotpotqa_100.toml",
    "oracle": "experiments/reader_hotpotqa_100.toml",
    "top-k@5": "experiments/reader_hotpotqa_100.toml",
    "top-n-tokens@1k": "experiments/reader_hotpotqa_100.toml",
    "top-n-tokens@2k": "experiments/reader_hotpotqa_100.toml",
    "adaptive-k": "experiments/reader_hotpotqa_100.toml",
    "adaptive-k on hybrid": "experiments/reader_hotpotqa_100_hybrid.toml",
    "full": _alone("full", "full"),
    "self-route": _alone("self-route", "self_route"),
    "context-picker": _alone("context-picker", "picker"),
    "context-picker trained": "--methods 'context-picker[adapter=PATH]'",
    "sage": _alone("sage", "sage"),
}
HYBRID = "adaptive-k on hybrid"

#: Fewest questions two rows must share to be paired: under it one question moves a SubEM difference by
#: more than 5 points and the interval says little (a run just started reads one or two).
MIN_PAIRED = 10

#: Seconds a question measured earlier with the default reader (8,192-token window) on 2 shared
#: cores (benchmarks/results/reader_hotpotqa.md: the 20 test questions, 1 llama.cpp thread, load
#: average 6-9), for the rows that are too slow for a CPU session; and why each is absent.
EARLIER_S: dict[str, float] = {"full": 464.3, "self-route": 222.6, "context-picker": 245.2, "sage": 324.9}
WHY_NOT: dict[str, str] = {
    "full": "reads the 8,044 best-ranked tokens that fit the window: about 8 minutes a question on one core",
    "self-route": "reads the top 5k tokens (and full context where it declines): about 4 minutes a question",
    "context-picker": "two LLM calls a question (pick, then read): about 4 minutes a question",
    "context-picker trained": "no trained adapter ships with ctxsel (docs/methods/context-picker.md); "
    "the measured adapters were trained on lent GPUs and are on no machine now",
    "sage": "12.45 LLM calls and 24,730 prompt tokens a question: about 5 minutes a question",
}


def finished_rows(folder: Path) -> list[dict[str, Any]]:
    """:func:`experiments.run_summary.read_rows` without the rows that failed."""
    return [r for r in read_rows(folder) if not r.get("error")]


KEPT_README = """# Kept reader runs

Each folder is one `ctxsel eval` run of the hotpotqa-long answer table: its `config.json` and `examples.csv`,
the per-example numbers of its finished rows (the last row per question and method: ids, metrics, tokens,
seconds; no question, chunk or answer text), written by `python -m experiments.hotpotqa_answers` (or
`python -m experiments.run_summary RUN`). The table is rebuilt from these folders alone: `--runs` of that
script reads them as they are. The run logs (`results.jsonl`) stay in each machine's `runs/`, from which a
stopped run resumes; they are not committed.
"""


def keep_runs(folders: list[Path], dest: Path) -> list[Path]:
    """Copy each run folder's config.json and the per-example summary of its finished rows
    (``examples.csv``, :mod:`experiments.run_summary`) into ``dest/<folder name>/``: what the table is
    rebuilt from, small enough to commit. A folder already inside ``dest`` (a table rebuilt from the
    copies) is left as it is."""
    from experiments.run_summary import write_summary

    names = [f.name for f in folders]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"two run folders share the name {twice[0]!r}: their kept copies would collide")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "README.md").write_text(KEPT_README, encoding="utf-8")
    kept = []
    for folder in folders:
        target = dest / folder.name
        kept.append(target)
        if target.resolve() == folder.resolve():
            continue
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "config.json", target / "config.json")
        write_summary(folder, finished_rows(folder), dest=target)
    return kept


def collect(runs: list[Path], hybrid: Path | None) -> list[dict[str, Any]]:
    """Every finished row of the runs, labelled as the table names them (the hybrid run's adaptive-k
    becomes ``adaptive-k on hybrid``); a label read from two folders keeps the later folder's row."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for folder in runs:
        for r in finished_rows(folder):
            if r["method"] in TABLE and r["method"] != HYBRID:
                out[str(r["example_id"]), r["method"]] = r
    if hybrid is not None:
        for r in finished_rows(hybrid):
            if r["method"] == "adaptive-k":
                out[str(r["example_id"]), HYBRID] = dict(r, method=HYBRID)
    return list(out.values())


def build(rows: list[dict[str, Any]], questions: int, seed: int = 0, min_paired: int = MIN_PAIRED) -> dict[str, Any]:
    """Each present row over the questions it has read, the paired comparisons over the questions both
    rows of a pair have read (pairs sharing fewer than ``min_paired`` are listed in ``unpaired``, not
    compared), progress and gaps. A slow row (top-n-tokens@2k reads ten times what oracle does) then
    holds back only its own comparisons, not the whole table."""
    from ctxsel.eval.report import summarize
    from ctxsel.eval.stats import compare

    done = {m: {str(r["example_id"]) for r in rows if r["method"] == m} for m in TABLE}
    present = [m for m in TABLE if done[m]]
    summary = summarize(rows, present, ci="bootstrap", seed=seed) if present else {}
    comparisons, unpaired = [], []
    for against in ("adaptive-k", "full"):
        for m in (m for m in present if against in present and m != against):
            both = done[m] & done[against]
            if len(both) < min_paired:
                unpaired.append({"a": m, "b": against, "n": len(both)})
                continue
            pair = [r for r in rows if r["method"] in (m, against) and str(r["example_id"]) in both]
            comparisons += compare(pair, [m, against], against, seed=seed)
    seconds = {m: sum(float(r.get("wall_s") or 0.0) for r in rows if r["method"] == m) / len(done[m]) for m in present}
    missing = {
        m: {
            "why": WHY_NOT.get(m, "not run yet: resume its config"),
            "config": TABLE[m],
            "earlier_s_per_question": EARLIER_S.get(m),
            "hours_for_all": None if m not in EARLIER_S else round(EARLIER_S[m] * questions / 3600, 1),
        }
        for m in TABLE
        if m not in present
    }
    return {
        "questions": questions,
        "n": {m: len(done[m]) for m in present},
        "partial": any(len(done[m]) < questions for m in present) or not present,
        "progress": {m: len(done[m]) for m in TABLE},
        "seconds_per_question": seconds,
        "methods": summary,
        "comparisons": comparisons,
        "min_paired": min_paired,
        "unpaired": unpaired,
        "missing": missing,
    }


def _pct(e: dict[str, Any], key: str) -> str:
    v, ci = e.get(key), e.get(f"{key}_ci95")
    if v is None:
        return "-"
    return f"{100 * v:.1f}" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")


def markdown(table: dict[str, Any]) -> str:
    from ctxsel.eval.report import comparisons_table

    q, ns = table["questions"], table["n"].values()
    md = (
        f"**PARTIAL: the rows have read {min(ns, default=0)} to {max(ns, default=0)} of {q} questions** (a run "
        "is still going or was stopped). Not the 100-question result. Each row is over the questions it "
        "has read, so two rows' means can be over different questions: compare rows by the paired "
        "differences below, each over the questions both rows have read (their n).\n\n"
        if table["partial"]
        else f"All {q} questions.\n\n"
    )
    headers = ["method", "questions read", "SubEM % [95%]", "EM %", "F1 %", "recall %", "tokens", "s / question"]
    body = [
        [
            m,
            f"{e['n']} / {q}",
            _pct(e, "subem"),
            _pct(e, "em"),
            _pct(e, "f1"),
            _pct(e, "recall"),
            f"{e['n_tokens']:,.0f}" if e.get("n_tokens") is not None else "-",
            f"{table['seconds_per_question'][m]:.1f}",
        ]
        for m, e in table["methods"].items()
    ]
    md += md_table(headers, body, ["l"] + ["r"] * (len(headers) - 1)) + "\n"
    for against in ("adaptive-k", "full"):
        mine = [c for c in table["comparisons"] if c["b"] == against and c["metric"] in ("subem", "em", "f1")]
        md += f"\n## Paired against `{against}` (a - b; real where the interval excludes 0 and p < 0.05)\n\n"
        if mine:
            md += comparisons_table(mine)
        elif against not in table["methods"]:
            md += f"No `{against}` row yet.\n"
        few = [f"`{u['a']}` ({u['n']})" for u in table["unpaired"] if u["b"] == against]
        if few:
            md += f"\nNot paired yet, fewer than {table['min_paired']} questions shared with `{against}`: {', '.join(few)}.\n"
    if table["missing"]:
        md += "\n## Rows not in this table\n\n"
        rows = [
            [
                m,
                v["why"],
                "-" if v["earlier_s_per_question"] is None else f"{v['earlier_s_per_question']:.0f}",
                "-" if v["hours_for_all"] is None else f"{v['hours_for_all']:.1f}",
                v["config"],
            ]
            for m, v in table["missing"].items()
        ]
        md += md_table(
            ["row", "why not", "s / question (earlier)", f"hours for {q}", "how to run it"],
            rows,
            ["l", "l", "r", "r", "l"],
        )
    return md + "\n"


def plot(path: Path, table: dict[str, Any]) -> None:
    """The paired SubEM and F1 differences, against adaptive-k then full, as a forest plot."""
    from ctxsel.eval.report import plot_comparisons

    plot_comparisons(path, table["comparisons"], ["subem", "f1"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default=None, help="comma-separated eval output folders (dense ranking)")
    p.add_argument("--hybrid", default=None, help="an eval folder whose adaptive-k row ran on --scorer hybrid")
    p.add_argument("--questions", type=int, default=100, help="questions in the full table (default 100)")
    p.add_argument("--out", default=str(BENCH_DIR / "results"), help="where the .md and .json go")
    p.add_argument("--name", default="hotpotqa_answers", help="report name (default hotpotqa_answers)")
    p.add_argument(
        "--keep",
        default=None,
        help="where each run's config.json and per-example summary (examples.csv) are written, to commit "
        "(default OUT/NAME_runs; 'none' keeps nothing)",
    )
    p.add_argument("--plot-only", action="store_true", help="only redraw NAME.png from OUT/NAME.json (no runs)")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.plot_only:
        table_json = out / f"{args.name}.json"
        if not table_json.is_file():
            print(f"error: no table {table_json} to plot", file=sys.stderr)
            return 2
        plot(out / f"{args.name}.png", json.loads(table_json.read_text(encoding="utf-8")))
        return 0
    if not args.runs:
        print("error: --runs is required (or --plot-only)", file=sys.stderr)
        return 2
    folders = [Path(f) for f in args.runs.split(",") if f.strip()] + ([Path(args.hybrid)] if args.hybrid else [])
    missing = [str(f) for f in folders if not (f / "config.json").is_file()]
    if missing:
        print(f"error: no eval run (config.json) in {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.questions < 1:
        print("error: --questions must be at least 1", file=sys.stderr)
        return 2
    if args.keep != "none":
        try:
            keep_runs(folders, Path(args.keep or out / f"{args.name}_runs"))
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    info = machine_info(setup_threads(1), ("llama_cpp",))
    rows = collect(folders[: len(folders) - bool(args.hybrid)], Path(args.hybrid) if args.hybrid else None)
    table = build(rows, args.questions)
    configs = {str(f): json.loads((f / "config.json").read_text(encoding="utf-8")) for f in folders}
    notes = [
        "Reader: the runs' config.json (the default local reader, llama.cpp, 8,192-token window); "
        "s / question: each row's mean wall seconds in these runs, measured under whatever load they met.",
        "Brackets: 95% bootstrap interval over the questions (2,000 resamples, seed 0); paired tests: exact "
        "McNemar on SubEM / EM, paired bootstrap on F1.",
    ]
    md = header_md("hotpotqa-long answers read by the default reader", info, notes) + "\n" + markdown(table)
    write_report(args.name, out, md, {"machine": info, "configs": configs, **table})
    plot(out / f"{args.name}.png", table)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
