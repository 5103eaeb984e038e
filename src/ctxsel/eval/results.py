"""Append-only, resumable result files.

One JSON object per line, flushed and fsynced as soon as it is written, so a
killed run loses at most the line being written. On reopen a torn last line
(no trailing newline, or not JSON) is cut off before appending, and finished
(example, method) pairs are skipped.

A row with an ``error`` is finished only when ``retry_errors=False``;
otherwise (the default) its pair is run again and the new row is appended
after it. The file stays append-only, so it may hold several rows for one
pair: :meth:`ResultLog.latest_rows` gives the last of each, which is what
summaries read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class ResultLog:
    def __init__(self, path: str | Path, *, retry_errors: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.retry_errors = retry_errors
        self.rows: list[dict[str, Any]] = []
        if self.path.exists():
            self._recover()
        self._done: set[tuple[str, str]] = set()
        for r in self.rows:
            self._mark(r)
        self._f = self.path.open("a", encoding="utf-8")

    def _mark(self, row: dict[str, Any]) -> None:
        key = (row["example_id"], row["method"])
        if row.get("error") and self.retry_errors:
            self._done.discard(key)  # the latest try failed: run it again
        else:
            self._done.add(key)

    def _recover(self) -> None:
        data = self.path.read_bytes()
        good_end = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                self.rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
            good_end += len(line)
        if good_end < len(data):
            with self.path.open("r+b") as f:
                f.truncate(good_end)

    def done(self, example_id: str, method: str) -> bool:
        return (example_id, method) in self._done

    def append(self, row: dict[str, Any]) -> None:
        self._f.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        self.rows.append(row)
        self._mark(row)

    def latest_rows(self) -> list[dict[str, Any]]:
        """The last row of each (example, method) pair, in the order pairs first appeared."""
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for r in self.rows:
            latest[(r["example_id"], r["method"])] = r
        return list(latest.values())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> ResultLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_atomic(path: str | Path, text: str) -> None:
    """Write to a temporary file beside ``path``, then rename over it."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)
