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

A full disk (or quota, or read-only mount) while a row is written leaves no
part of it behind (the file is cut back to the row before) and raises
:class:`~ctxsel.errors.DiskFull`, which says so in words with the space left;
the same command run again, once there is room, goes on where it stopped.
So does a full disk while ``config.json`` or a summary is written
(:func:`write_atomic`: no temporary file is left behind).

A row with an ``error`` is finished only when ``retry_errors=False``;
otherwise (the default) its pair is run again and the new row is appended
after it. The file stays append-only, so it may hold several rows for one
pair: :meth:`ResultLog.latest_rows` gives the last of each, which is what
summaries read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from ctxsel.paths import disk_full, is_out_of_room

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
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

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
        """Write ``row`` as one line, on disk before this returns; a full disk leaves no part of it
        (:class:`~ctxsel.errors.DiskFull`)."""
        assert self._fd is not None, "the result log is closed"
        data = memoryview((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(self._fd, data) :]
            os.fsync(self._fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)  # no torn line: the file ends after the last whole row
            if is_out_of_room(e):
                raise disk_full(
                    self.path,
                    e,
                    then=f"the {len(self.rows)} row(s) before it are kept; free some space and run the same command "
                    "again: it goes on where this run stopped",
                ) from e
            raise
        self.rows.append(row)
        self._mark(row)

    def latest_rows(self) -> list[dict[str, Any]]:
        """The last row of each (example, method) pair, in the order pairs first appeared."""
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for r in self.rows:
            latest[(r["example_id"], r["method"])] = r
        return list(latest.values())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

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
    """Write to a temporary file beside ``path``, then rename over it; on a full disk the temporary file
    is removed and :class:`~ctxsel.errors.DiskFull` says so."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if is_out_of_room(e):
            raise disk_full(p, e) from e
        raise
