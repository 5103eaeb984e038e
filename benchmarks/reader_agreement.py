"""How often two readers give the same answer to the same selection: the share of identical answers.

    python -m benchmarks.reader_agreement runs/agree_llama runs/agree_hf

Reads two ``ctxsel eval`` output folders that ran the same methods on the same questions (llama.cpp
and the transformers reader, say) and prints, per method, the questions both answered, the share of
identical answers (after trimming whitespace), the share equal up to case and punctuation, and each
reader's SubEM.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any


def latest(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The latest row of each (example, method) in a run's results.jsonl."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for line in (folder / "results.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            rows[(str(r["example_id"]), str(r["method"]))] = r
    return rows


def _loose(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def agreement(a: Path, b: Path) -> list[dict[str, Any]]:
    """Per method: n, identical share, loose share, SubEM of a and of b (rows with an answer in both)."""
    ra, rb = latest(a), latest(b)
    out = []
    for method in dict.fromkeys(m for _, m in ra):
        keys = [k for k in ra if k[1] == method and k in rb and "answer" in ra[k] and "answer" in rb[k]]
        if not keys:
            continue
        same = sum(ra[k]["answer"].strip() == rb[k]["answer"].strip() for k in keys)
        loose = sum(_loose(ra[k]["answer"]) == _loose(rb[k]["answer"]) for k in keys)
        out.append(
            {
                "method": method,
                "n": len(keys),
                "identical": same / len(keys),
                "loose": loose / len(keys),
                "subem_a": sum(float(ra[k].get("subem") or 0) for k in keys) / len(keys),
                "subem_b": sum(float(rb[k].get("subem") or 0) for k in keys) / len(keys),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.reader_agreement", description=__doc__.split("\n")[0])
    p.add_argument("a", type=Path, help="one eval output folder (e.g. the llama.cpp reader's)")
    p.add_argument("b", type=Path, help="the other (e.g. the transformers reader's)")
    args = p.parse_args(argv)
    rows = agreement(args.a, args.b)
    total = sum(r["n"] for r in rows)
    print("| method | questions | identical % | same up to case and punctuation % | SubEM a % | SubEM b % |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['method']} | {r['n']} | {100 * r['identical']:.1f} | {100 * r['loose']:.1f} | "
            f"{100 * r['subem_a']:.1f} | {100 * r['subem_b']:.1f} |"
        )
    if total:
        same = sum(r["identical"] * r["n"] for r in rows) / total
        print(f"\nidentical answers: {round(same * total)} of {total} ({100 * same:.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
