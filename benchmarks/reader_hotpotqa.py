"""Every method read by the default local reader on hotpotqa-long: one table from closed-book to oracle.

``ctxsel eval`` runs with ``--reader local`` (the default bundled model) over
the fixed 20-question test split, in groups: the cheap methods on all 20
questions, the expensive ones (LLM-picked, LLM-routed, SAGE, the full
window) on its first N questions, as CPU time allows (``--groups``), and
optionally the cheap ones on all 100 questions (``--all-methods``).
The table has, per method and question set: SubEM, EM, F1 (HotpotQA's
official normalisation), gold-paragraph recall, selected tokens (cl100k),
the reader's own tokens in (and how many were taken from llama.cpp's KV
cache) and out, LLM calls and seconds per question. "full" is the whole
pool cut to the reader's window (the best-ranked chunks that fit, in
document order), so its row says how much was cut.

    OMP_NUM_THREADS=1 python benchmarks/reader_hotpotqa.py [--n-ctx 8192] [--groups core,expensive] [--report-only]

Resumable and cached (runs/reader_hotpotqa_*): a killed run goes on where it
stopped. Writes benchmarks/results/reader_hotpotqa.md and .json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _common import add_common_args, header_md, loadavg, machine_info, setup_threads, write_report

#: name: (questions of the test split, methods, reader window or None for the model's own). Within a group
#: every method reads question 1, then question 2, ...: a run stopped early (``--report-only`` then tables
#: what is done) covers every method. The 8k window keeps "full" at ~12 minutes a question on 2 cores.
GROUPS = {
    "core": (20, "closed-book,oracle,top-k@5,adaptive-k,top-n-tokens@2k", 8192),
    "expensive": (
        20,
        "context-picker,context-picker[constrained=false],self-route,sage,sage[constrained=false],full",
        8192,
    ),
    # One method alone on all 20: enough replies to state its invalid-reply or unreadable-verdict rate and SubEM
    # (their prompts stay far below 8k tokens, so the window does not matter).
    "picker": (20, "context-picker", None),
    "picker-free": (20, "context-picker[constrained=false]", None),
    "sage": (20, "sage", None),
    # The full window and Self-Route (which falls back to it) alone: each question reads up to 8k tokens.
    "full": (20, "full", 8192),
    "self-route": (20, "self-route", 8192),
    # adaptive-k alone, so that its rows can be paired with a partial full group question by question.
    "adaptive-k": (20, "adaptive-k", 8192),
}
#: The group of cheap methods on all 100 questions (``--all-methods``). Its rows are listed beside the 20-question
#: rows, not instead of them: those are the ones to compare with the expensive methods, read on the same questions.
ALL_GROUP = "all 100"
#: (group, method) pairs compared on the questions both have answered (see paired()).
PAIRS = ((("adaptive-k", "adaptive-k"), ("full", "full")),)

COLUMNS = (
    ("score", "SubEM %", "pct"),
    ("em", "EM %", "pct"),
    ("f1", "F1 %", "pct"),
    ("recall", "recall %", "pct"),
    ("n_tokens", "tokens", ",.0f"),
    ("tokens_in", "reader in", ",.0f"),
    ("tokens_reused", "of which reused", ",.0f"),
    ("tokens_out", "reader out", ",.1f"),
    ("llm_calls", "LLM calls", ".2f"),
    ("wall_s", "s / question", ".1f"),
    ("cut", "cut to window %", "pct"),
    ("invalid_share", "invalid replies %", "pct"),
    ("unreadable_verdicts", "unreadable verdicts %", "pct"),
    ("errors", "errors", ".0f"),
)


def _cell(v: object, fmt: str) -> str:
    if v is None:
        return "-"
    return f"{100 * float(v):.1f}" if fmt == "pct" else format(float(v), fmt)  # type: ignore[arg-type]


def finished_rows(methods: str, output: str) -> dict:
    """The summary of whatever rows a (possibly stopped) run has written, per method with its n."""
    from ctxsel.eval.report import summarize
    from ctxsel.eval.results import ResultLog
    from ctxsel.selectors import split_specs

    with ResultLog(Path(output) / "results.jsonl") as log:
        return summarize(log.latest_rows(), split_specs(methods))


def run_eval(
    split: str | None,
    limit: int | None,
    methods: str,
    output: str,
    args: argparse.Namespace,
    n_ctx: int | None = None,
    dataset: str = "hotpotqa-long",
    extra: tuple[str, ...] = (),
) -> dict:
    """``ctxsel eval`` of ``methods`` with the reader (unless ``--report-only``) and its summary; ``extra``: more flags."""
    from ctxsel.cli.main import main as ctxsel

    cmd = [
        "eval",
        "--dataset",
        dataset,
        "--methods",
        methods,
        "--reader",
        args.reader,
        "--output",
        output,
        "--threads",
        str(args.threads),
        "--llm-threads",
        str(args.llm_threads),
        "--backend",
        args.backend,
    ]
    if split:
        cmd += ["--split", split]
    if limit:
        cmd += ["--limit", str(limit)]
    n_ctx = args.n_ctx or n_ctx
    if n_ctx:
        cmd += ["--n-ctx", str(n_ctx)]
    if args.no_progress:
        cmd.append("--no-progress")
    cmd += extra
    if not args.report_only:
        rc = ctxsel(cmd)
        if rc:
            raise SystemExit(f"ctxsel {' '.join(cmd)} failed with exit code {rc}")
    config = Path(output) / "config.json"  # what the run really used (a report-only call may name another window)
    window = json.loads(config.read_text()).get("reader", {}).get("window") if config.is_file() else None
    summary = (
        finished_rows(methods, output)
        if args.report_only
        else json.loads((Path(output) / "summary.json").read_text())["methods"]
    )
    return {"command": "ctxsel " + " ".join(cmd), "questions": limit or "all", "window": window, "summary": summary}


def paired(output: str, a: tuple[str, str], b: tuple[str, str]) -> dict | None:
    """Two methods on the questions both have rows for (their own groups' results.jsonl): mean SubEM,
    EM, F1 and tokens of each, and how many questions. None when either run is missing."""
    from ctxsel.eval.results import ResultLog

    rows = {}
    for group, method in (a, b):
        path = Path(f"{output}_{group}") / "results.jsonl"
        if not path.is_file():
            return None
        with ResultLog(path) as log:
            rows[method] = {
                r["example_id"]: r for r in log.latest_rows() if r["method"] == method and not r.get("error")
            }
    common = sorted(set(rows[a[1]]) & set(rows[b[1]]))
    if not common:
        return None

    def means(m: str) -> dict:
        rs = [rows[m][q] for q in common]
        keys = ("subem", "em", "f1", "n_tokens", "reduction")
        return {k: sum(float(r.get(k) or 0.0) for r in rs) / len(rs) for k in keys}

    return {
        "questions": common,
        a[1]: means(a[1]),
        b[1]: means(b[1]),
        "pool_tokens": rows[b[1]][common[0]].get("full_tokens"),
    }


def previous_runs(path: Path, now: dict) -> dict:
    """The groups of the last report that this call did not run (each keeps its own date and commit)."""
    if not path.is_file():
        return {}
    report = json.loads(path.read_text())
    machine = report.get("machine", {})
    return {
        name: {"date": machine.get("date"), "git": machine.get("git"), **run}
        for name, run in report.get("runs", {}).items()
        if name not in now
    }


def best_rows(runs: dict) -> dict[str, str]:
    """method -> the test-split group whose row has the most questions (later groups win ties: they are newer)."""
    best: dict[str, tuple[int, str]] = {}
    for name, run in runs.items():
        if name == ALL_GROUP:
            continue
        for method, row in run["summary"].items():
            if isinstance(row, dict) and "n" in row and row["n"] >= best.get(method, (0, ""))[0]:
                best[method] = (int(row["n"]), name)
    return {m: name for m, (_, name) in best.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reader", default="local")
    p.add_argument(
        "--n-ctx", type=int, default=None, help="reader window for every group (default: each group's own, see GROUPS)"
    )
    p.add_argument("--llm-threads", type=int, default=1, help="llama.cpp threads per run (1: groups run side by side)")
    p.add_argument(
        "--backend",
        default="onnx",
        help="dense backend for the MiniLM scores (default onnx: fp32, torch's vectors, as every earlier row; "
        "auto would be int8 on a VNNI CPU)",
    )
    p.add_argument("--groups", default=",".join(GROUPS), help=f"which method groups to run ({', '.join(GROUPS)})")
    p.add_argument("--all-methods", default="", help="also run these on all 100 questions")
    p.add_argument("--output", default="runs/reader_hotpotqa")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: table the rows the runs have written so far (n per method)",
    )
    p.add_argument(
        "--keep-previous",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the groups of the previous report that this call does not run (default: on)",
    )
    add_common_args(p)
    args = p.parse_args(argv)
    info = machine_info(setup_threads(args.threads), versions=("llama_cpp",))

    runs = {}
    for name in filter(None, args.groups.split(",")):
        limit, methods, n_ctx = GROUPS[name]
        runs[name] = run_eval("test", limit, methods, f"{args.output}_{name}", args, n_ctx)
    if args.all_methods:
        # the core group's window: its 20 test questions are then served from the response cache
        runs[ALL_GROUP] = run_eval(None, None, args.all_methods, f"{args.output}_all", args, GROUPS["core"][2])
    for run in runs.values():
        run.update(date=info["date"], git=info["git"])
    info["loadavg_end"] = loadavg()
    if args.keep_previous:
        runs = {**previous_runs(args.out / "reader_hotpotqa.json", runs), **runs}

    lines = [
        header_md(
            "hotpotqa-long read by the default local reader",
            info,
            [
                f"Reader: `--reader {args.reader}`, window per group as listed below, "
                f"{args.llm_threads} llama.cpp thread(s), greedy; MiniLM scores; response cache on (a rerun is free)."
            ],
        ),
        "| method | group | questions | " + " | ".join(h for _, h, _ in COLUMNS) + " |",
        "|---|---|---:|" + "|".join("---:" for _ in COLUMNS) + "|",
    ]
    best = best_rows(runs)
    listed = {*best.values(), ALL_GROUP}
    for name, run in runs.items():
        for method, row in run["summary"].items():
            if name != ALL_GROUP and best.get(method) != name:
                continue
            lines.append(
                f"| {method} | {name} | {row['n']} | " + " | ".join(_cell(row.get(k), f) for k, _, f in COLUMNS) + " |"
            )
    lines += [
        "",
        *(
            f"- {name}: `{r['command']}` (reader window {r['window'] or '?'} tokens; "
            f"{r.get('date', '?')[:10]}, git {r.get('git', '?')})"
            for name, r in runs.items()
            if name in listed
        ),
        "",
        "A method that ran in several groups of the 20 test questions is listed once, from the group with the most "
        f"questions (the newest run on a tie); the {ALL_GROUP!r} group's rows, on all 100 questions (80 of them the "
        "training split), are listed beside them. Groups not run by this call are carried over from the previous report with their own date "
        "and commit (`--no-keep-previous` drops them).",
    ]
    pairs = []
    for a, b in PAIRS:
        pair = paired(args.output, a, b)
        if pair is None:
            continue
        pairs.append(pair)
        n, pool = len(pair["questions"]), pair["pool_tokens"] or 0
        ra, rb = pair[a[1]], pair[b[1]]
        lines += [
            "",
            f"**{a[1]} against {b[1]} on the {n} test questions both have answered**: SubEM "
            f"{100 * ra['subem']:.1f} against {100 * rb['subem']:.1f}, EM {100 * ra['em']:.1f} against "
            f"{100 * rb['em']:.1f}, F1 {100 * ra['f1']:.1f} against {100 * rb['f1']:.1f}; {a[1]} selects "
            f"{ra['n_tokens']:,.0f} tokens, {100 * ra['n_tokens'] / pool:.2f}% of the {pool:,}-token pool."
            if pool
            else "",
        ]
    md = "\n".join(lines) + "\n"
    write_report("reader_hotpotqa", args.out, md, {"machine": info, "runs": runs, "paired": pairs})
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
