"""How often two readers give the same answer to the same selection: the share of identical answers.

    python -m experiments.reader_agreement runs/agree_llama runs/agree_hf

Reads two ``ctxsel eval`` output folders that ran the same methods on the same questions (llama.cpp
and the transformers reader, say; a side may be several folders, comma-separated, their rows merged)
and prints, per method, the questions both answered, the share of identical answers (after trimming
whitespace), the share equal up to case and punctuation, and each reader's SubEM; then the same
share over the questions where both read the same selection (the same chunk ids in the same order),
which is the readers' own agreement where the two runs' rankings differ (another machine's vectors).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from experiments.run_summary import read_rows


def latest(folders: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The latest row of each (example, method) in the runs' results.jsonl (comma-separated folders, the
    later folder winning)."""
    return {
        (str(r["example_id"]), str(r["method"])): r
        for folder in str(folders).split(",")
        for r in read_rows(Path(folder))
    }


def _loose(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def agreement(a: str | Path, b: str | Path) -> list[dict[str, Any]]:
    """Per method: n, identical share, loose share, SubEM of a and of b (rows with an answer in both), and
    over the rows whose selections are the same: their number and identical share."""
    ra, rb = latest(a), latest(b)
    out = []
    for method in dict.fromkeys(m for _, m in ra):
        keys = [k for k in ra if k[1] == method and k in rb and "answer" in ra[k] and "answer" in rb[k]]
        if not keys:
            continue
        same = sum(ra[k]["answer"].strip() == rb[k]["answer"].strip() for k in keys)
        loose = sum(_loose(ra[k]["answer"]) == _loose(rb[k]["answer"]) for k in keys)
        alike = [k for k in keys if ra[k].get("ids") == rb[k].get("ids")]
        same_alike = sum(ra[k]["answer"].strip() == rb[k]["answer"].strip() for k in alike)
        out.append(
            {
                "method": method,
                "n": len(keys),
                "identical": same / len(keys),
                "loose": loose / len(keys),
                "subem_a": sum(float(ra[k].get("subem") or 0) for k in keys) / len(keys),
                "subem_b": sum(float(rb[k].get("subem") or 0) for k in keys) / len(keys),
                "same_selection": len(alike),
                "identical_same_selection": same_alike / len(alike) if alike else None,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.reader_agreement", description=__doc__.split("\n")[0])
    p.add_argument("a", help="one eval output folder, or several comma-separated (e.g. the llama.cpp reader's)")
    p.add_argument("b", help="the other (e.g. the transformers reader's)")
    args = p.parse_args(argv)
    missing = [f for side in (args.a, args.b) for f in side.split(",") if not (Path(f) / "results.jsonl").is_file()]
    if missing:
        print(f"reader_agreement: no results.jsonl in {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = agreement(args.a, args.b)
    total = sum(r["n"] for r in rows)
    print(
        "| method | questions | identical % | same up to case and punctuation % | SubEM a % | SubEM b % "
        "| same selection | identical there % |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        there = r["identical_same_selection"]
        print(
            f"| {r['method']} | {r['n']} | {100 * r['identical']:.1f} | {100 * r['loose']:.1f} | "
            f"{100 * r['subem_a']:.1f} | {100 * r['subem_b']:.1f} | {r['same_selection']} | "
            f"{'-' if there is None else f'{100 * there:.1f}'} |"
        )
    if total:
        same = round(sum(r["identical"] * r["n"] for r in rows))
        print(f"\nidentical answers: {same} of {total} ({100 * same / total:.1f}%)")
        alike = sum(r["same_selection"] for r in rows)
        same_alike = round(sum((r["identical_same_selection"] or 0) * r["same_selection"] for r in rows))
        if alike:
            print(f"where the selection is the same: {same_alike} of {alike} ({100 * same_alike / alike:.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
