"""Every method read by the default local reader on two HoloBench-style sets, scored by the LLM judge.

The sets are the recall table's (``benchmarks/holobench_table.py``: seed 0,
100k-token contexts, 30 queries, uniform merge, relevance = the rows a
query reads) at 5k and 10k tokens of relevant information; the first
``--limit`` (10) queries of each are read. Reader and judge are the default
bundled model (``--reader local --judge local``). The judge labels each
ground-truth item Exact / Partial / No Match, as in the Adaptive-k paper
(App. A.1.3), under a JSON-schema grammar. A reply it cannot read falls
back to the set-overlap F1, so the table gives the judge's valid-reply rate.

Columns per method: judge score, judge valid %, set-overlap F1, context
recall, selected tokens (cl100k), the reader's tokens in (reused from
llama.cpp's KV cache) and out, LLM calls of the method and the reader (the
judge's are not counted), seconds per question (selection and reading, not
judging), and the share of selections cut to the reader's window.

    OMP_NUM_THREADS=1 python benchmarks/reader_holobench.py [--sets 5k,10k] [--groups core,llm,sage] [--report-only]

Each (set, group) is one resumable ``ctxsel eval`` run in
``runs/reader_holobench_SET_GROUP`` with the response cache on. Two calls
side by side, one set each with one llama.cpp thread, keep both cores busy.
Writes benchmarks/results/reader_holobench.md and .json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _common import add_common_args, header_md, loadavg, machine_info, setup_threads, write_report
from reader_hotpotqa import COLUMNS as HOTPOTQA_COLUMNS
from reader_hotpotqa import _cell, previous_runs, run_eval

#: name: methods. "full" is the best-ranked sentences that fit the window, in document order; adaptive-k's
#: selection (10-13k tokens on these sets) is cut to the same window.
GROUPS = {
    "core": "closed-book,top-k@5,top-n-tokens@2k,oracle,adaptive-k,full",
    "llm": "context-picker,self-route",
    "sage": "sage",
}
SETS = {"5k": 5000, "10k": 10000}
WINDOW = 8192  # the hotpotqa-long table's window: "full" and the oracle at 10k are cut to it

#: reader_hotpotqa's columns with the judge's score, its valid-reply rate and the set overlap in place of
#: SubEM / EM / F1.
COLUMNS = (
    ("score", "judge score %", "pct"),
    ("judge_valid", "judge valid %", "pct"),
    ("overlap_f1", "overlap F1 %", "pct"),
    *HOTPOTQA_COLUMNS[3:],
)


def make_sets(work: Path, names: list[str]) -> dict[str, tuple[str, str]]:
    """name -> (JSONL path, sha256) of each set, written once (the generator is deterministic)."""
    from ctxsel.datasets.holobench import make_examples, write_jsonl

    work.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in names:
        path = work / f"info{name}.jsonl"
        digest = write_jsonl(make_examples(SETS[name], size=100_000, seed=0, n_queries=30).examples, path)
        out[name] = (str(path), digest)
    return out


def judge_check(output: str) -> dict[str, int]:
    """How the LLM judge's scores sit beside the set overlap of the same answers, over the rows it judged:
    ``credited_none``: judge score > 0 where the answer lists none of the ground-truth items (overlap recall 0);
    ``missed_all``: judge score < 1 where the answer lists all of them (overlap recall 1);
    ``empty``: answers with nothing but the template's labels, scored 0 without the judge."""
    from ctxsel.eval.results import ResultLog
    from ctxsel.judge import is_empty_answer

    path = Path(output) / "results.jsonl"
    if not path.is_file():
        return {}
    with ResultLog(path) as log:
        rows = log.latest_rows()
    judged = [r for r in rows if r.get("kind") == "llm-judge"]
    return {
        "judged": len(judged),
        "credited_none": sum(1 for r in judged if r["overlap_recall"] == 0 and r["score"] > 0),
        "missed_all": sum(1 for r in judged if r["overlap_recall"] == 1 and r["score"] < 1),
        "empty": sum(1 for r in rows if r.get("kind", "").startswith("llm-judge") and is_empty_answer(r["answer"])),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reader", default="local")
    p.add_argument("--judge", default="local")
    p.add_argument("--n-ctx", type=int, default=WINDOW, help=f"reader window (default {WINDOW})")
    p.add_argument("--llm-threads", type=int, default=1, help="llama.cpp threads per run")
    p.add_argument("--backend", default="onnx", help="dense backend for the MiniLM scores (default onnx: fp32)")
    p.add_argument("--sets", default=",".join(SETS), help=f"which sets ({', '.join(SETS)})")
    p.add_argument("--groups", default=",".join(GROUPS), help=f"which method groups ({', '.join(GROUPS)})")
    p.add_argument("--limit", type=int, default=10, help="queries read per set (the first N of 30)")
    p.add_argument("--work-dir", default="runs/reader_holobench", help="where the sets are written")
    p.add_argument("--output", default="runs/reader_holobench", help="eval folders: OUTPUT_SET_GROUP")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--report-only", action="store_true", help="run nothing: table what the runs have written")
    add_common_args(p)
    args = p.parse_args(argv)
    info = machine_info(setup_threads(args.threads), versions=("llama_cpp",))

    sets = make_sets(Path(args.work_dir), [s for s in args.sets.split(",") if s])
    runs = {}
    for set_name, (path, digest) in sets.items():
        for group in filter(None, args.groups.split(",")):
            out = f"{args.output}_{set_name}_{group}"
            run = run_eval(None, args.limit, GROUPS[group], out, args, dataset=path, extra=("--judge", args.judge))
            runs[f"{set_name} {group}"] = {**run, "set": set_name, "sha256": digest, "judge_check": judge_check(out)}
    for run in runs.values():
        run.update(date=info["date"], git=info["git"])
    info["loadavg_end"] = loadavg()
    runs = {**previous_runs(args.out / "reader_holobench.json", runs), **runs}

    lines = [
        header_md(
            "HoloBench-style aggregation QA read by the default local reader, scored by the LLM judge",
            info,
            [
                f"Reader and judge: `--reader {args.reader} --judge {args.judge}`, greedy, window per run as "
                "listed below; MiniLM scores (fp32); response cache on (a rerun is free).",
                "Judge score = mean over ground-truth items of Exact 1 / Partial 0.5 / No Match 0, or the "
                "set-overlap F1 where the judge's reply was invalid; judge LLM calls are not in 'LLM calls'.",
            ],
        )
    ]
    for set_name in SETS:
        mine = {k: r for k, r in runs.items() if r.get("set") == set_name}
        if not mine:
            continue
        lines += [
            "",
            f"## {set_name} tokens of relevant information in 100k-token contexts",
            "",
            "| method | questions | " + " | ".join(h for _, h, _ in COLUMNS) + " |",
            "|---|---:|" + "|".join("---:" for _ in COLUMNS) + "|",
        ]
        for run in mine.values():
            for method, row in run["summary"].items():
                cells = " | ".join(_cell(row.get(k), f) for k, _, f in COLUMNS)
                lines.append(f"| {method} | {row['n']} | {cells} |")
        checks = [r.get("judge_check") or {} for r in mine.values()]
        judged = sum(c.get("judged", 0) for c in checks)
        lines += [""] + [
            f"- {name}: `{r['command']}` (window {r['window'] or '?'} tokens; set sha256 {r['sha256'][:16]}; "
            f"{r.get('date', '?')[:10]}, git {r.get('git', '?')})"
            for name, r in mine.items()
        ]
        if judged:
            lines.append(
                f"- The judge beside the set overlap, over its {judged} valid replies: it gave credit to "
                f"{sum(c['credited_none'] for c in checks)} answers that list none of the ground-truth items, "
                f"and less than full marks to {sum(c['missed_all'] for c in checks)} that list all of them. "
                f"{sum(c.get('empty', 0) for c in checks)} answers were empty (nothing but the template's "
                "labels) and scored 0 without the judge."
            )
    md = "\n".join(lines) + "\n"
    write_report("reader_holobench", args.out, md, {"machine": info, "runs": runs})
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
