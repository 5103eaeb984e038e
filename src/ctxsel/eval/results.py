"""Append-only, resumable result files.

One JSON object per line, flushed and fsynced as soon as it is written, so a
killed run loses at most the line being written. On reopen finished
(example, method) pairs are skipped, and lines that are not a row (torn,
garbage, JSON that is not an object with string ``example_id`` and
``method``) are skipped with one warning that gives their line numbers:
every valid row is kept, wherever the bad lines are. Bad lines at the end
of the file (what a kill leaves) are cut off before appending, so the next
row starts on a line of its own; bad lines between rows stay in the file
(append-only: nothing a person might want to look at is deleted) and are
skipped again, with the warning, by every reader.

A row with an ``error`` is finished only when ``retry_errors=False``;
otherwise (the default) its pair is run again and the new row is appended
after it. The file stays append-only, so it may hold several rows for one
pair: :meth:`ResultLog.latest_rows` gives the last of each, which is what
summaries read.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


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
        good_end = 0  # the byte after the last valid row
        bad: list[int] = []  # line numbers, from 1
        offset = 0
        for number, line in enumerate(data.splitlines(keepends=True), start=1):
            offset += len(line)
            row = _parse_row(line)
            if row is None:
                bad.append(number)
            else:
                self.rows.append(row)
                good_end = offset
        if not bad:
            return
        cut = good_end < len(data)
        log.warning(
            "%s: skipped %d line(s) that are not result rows (line %s)%s; the %d valid row(s) are kept",
            self.path,
            len(bad),
            _ranges(bad),
            " and cut the unfinished end of the file" if cut else "",
            len(self.rows),
        )
        if cut:
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


def _parse_row(line: bytes) -> dict[str, Any] | None:
    """The row on one line, or None for a line that is not one (torn, not JSON, not a row)."""
    if not line.endswith(b"\n"):
        return None  # torn: the writer was killed mid-line
    try:
        row = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not (isinstance(row, dict) and isinstance(row.get("example_id"), str) and isinstance(row.get("method"), str)):
        return None
    return row


def _ranges(numbers: list[int], limit: int = 10) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"`` (the first ``limit`` runs, then how many more lines)."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:limit])
    if len(runs) > limit:
        text += f" and {sum(b - a + 1 for a, b in runs[limit:])} more"
    return text


def write_atomic(path: str | Path, text: str) -> None:
    """Write to a temporary file beside ``path``, then rename over it."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)
