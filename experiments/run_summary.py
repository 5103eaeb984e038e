"""A run's per-example numbers without its texts: what the paired statistics and the committed tables read.

    python -m experiments.run_summary runs/NAME [runs/OTHER ...]    # writes runs/NAME/examples.csv

An eval run's ``results.jsonl`` is its log: every answer, trace, rationale, explanation and chunk id
list, megabytes for a long table. Logs stay in ``runs/`` and are never committed (``.gitignore``);
what a results folder keeps is ``examples.csv``, the last row per (example, method) with only its
numbers and labels: the example id, the method, every metric the row has (``recall``, ``n_tokens``,
``subem``, ``f1``, ``wall_s``, ...; a selector's ``extra_metrics`` as ``extra_metrics.NAME``
columns), the labels ``kind``, ``route`` and ``error``, and ``answer_words``, the answer's length in
words. No question, chunk, prompt, reply or answer text.

Each metric cell is its JSON value (``0.5``, ``134``, ``null``), so a row read back has the same
numbers as the log's, and an empty cell means the row has no such key; a table rebuilt from the
summaries is the table of the logs. :func:`read_rows` reads a folder either way: its
``results.jsonl`` where the folder has one, else its ``examples.csv``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: The file a results folder keeps in place of its run log.
SUMMARY = "examples.csv"
LOG = "results.jsonl"
#: Columns kept as plain strings (the rest hold JSON values).
IDS = ("example_id", "method")
LABELS = ("kind", "route", "error")
EXTRA = "extra_metrics."


def _scalar(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, str))


def compact(row: Mapping[str, Any]) -> dict[str, Any]:
    """One log row's numbers and labels, flattened (``extra_metrics.NAME``), texts and lists dropped."""
    out: dict[str, Any] = {k: str(row[k]) for k in IDS}
    for k, v in row.items():
        if k in IDS:
            continue
        if k in LABELS and (v is None or isinstance(v, str)):
            out[k] = v
        elif k == "extra_metrics" and isinstance(v, Mapping):
            out.update({EXTRA + name: x for name, x in v.items() if _scalar(x)})
        elif _scalar(v) and k not in LABELS:
            out[k] = v
    if isinstance(row.get("answer"), str):
        out["answer_words"] = len(row["answer"].split())
    return out


def to_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """The rows (a log's, or a summary's read back: :func:`compact` keeps what it kept) as ``examples.csv``."""
    flat = [compact(r) for r in rows]
    columns = list(dict.fromkeys(k for r in flat for k in r))
    columns = [*IDS, *(c for c in columns if c not in IDS and not c.startswith(EXTRA))]
    columns += [c for c in dict.fromkeys(k for r in flat for k in r) if c.startswith(EXTRA)]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in flat:
        cells = []
        for c in columns:
            if c not in r:
                cells.append("")
            elif c in IDS or (c in LABELS and isinstance(r[c], str)):
                cells.append(str(r[c]))
            else:
                cells.append(json.dumps(r[c]))
        w.writerow(cells)
    return buf.getvalue()


def from_csv(text: str) -> list[dict[str, Any]]:
    """``examples.csv`` text back as rows: metrics as numbers, ``extra_metrics`` nested again."""
    out = []
    for cells in csv.DictReader(io.StringIO(text)):
        row: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for c, v in cells.items():
            if v == "" and c not in IDS:
                continue
            if c in IDS:
                row[c] = v
            elif c in LABELS:
                row[c] = None if v == "null" else v
            elif c.startswith(EXTRA):
                extra[c[len(EXTRA) :]] = json.loads(v)
            else:
                row[c] = json.loads(v)
        if extra:
            row["extra_metrics"] = extra
        out.append(row)
    return out


def log_rows(path: Path) -> list[dict[str, Any]]:
    """The last row per (example, method) of a run log (a resumed run or a rescore appends)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            rows[str(r["example_id"]), str(r["method"])] = r
    return list(rows.values())


def read_rows(folder: Path) -> list[dict[str, Any]]:
    """A run folder's rows, the last per (example, method): from its log where it has one, else from its
    kept summary; none where it has neither (a run not started yet)."""
    if (folder / LOG).is_file():
        return log_rows(folder / LOG)
    if (folder / SUMMARY).is_file():
        return from_csv((folder / SUMMARY).read_text(encoding="utf-8"))
    return []


def write_summary(folder: Path, rows: Iterable[Mapping[str, Any]] | None = None, dest: Path | None = None) -> Path:
    """Write ``examples.csv`` of ``rows`` (default: the folder's own) into ``dest`` (default: the folder)."""
    target = (dest or folder) / SUMMARY
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(to_csv(read_rows(folder) if rows is None else rows), encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.run_summary", description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="eval output folders, each with a results.jsonl")
    p.add_argument("--out", default=None, help="write each summary to OUT/<folder name>/ instead of the folder")
    args = p.parse_args(argv)
    missing = [f for f in args.runs if not (Path(f) / LOG).is_file()]
    if missing:
        print(f"run_summary: no {LOG} in {', '.join(missing)}", file=sys.stderr)
        return 2
    for f in map(Path, args.runs):
        target = write_summary(f, dest=Path(args.out) / f.name if args.out else None)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
