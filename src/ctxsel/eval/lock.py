"""One run at a time per output folder.

Two ``ctxsel eval`` runs writing into one folder would interleave their
rows and race on the reports and plots. ``OutputLock(folder)`` takes an
exclusive ``flock`` on ``folder/.ctxsel-eval.lock`` without waiting: a
second run fails at once with :class:`OutputFolderBusy`, whose message
names the holder's pid (written into the lock file). The kernel drops the
lock when its holder exits, however it exits (kill -9 included), so a lock
left by a dead run is simply taken over; the stale pid in the file is
overwritten. Platforms without ``fcntl`` (Windows) run without the lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from ctxsel.errors import OutputFolderBusy
from ctxsel.paths import disk_full, is_out_of_room

log = logging.getLogger(__name__)

LOCK_NAME = ".ctxsel-eval.lock"


class OutputLock:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            log.warning("no file locking on this platform: nothing stops a second run into %s", self.folder)
            return
        fh = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fh)
            fh.close()
            raise OutputFolderBusy(
                f"output folder {self.folder} is in use by another run ({holder}); wait for it to finish, "
                "or pass another --output"
            ) from None
        fh.seek(0)
        fh.truncate()
        try:
            fh.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            fh.flush()
        except OSError as e:  # a full disk: nothing can be written here, the results least of all
            with contextlib.suppress(OSError):
                fh.close()  # drops the lock (the unwritten line is dropped with it)
            if is_out_of_room(e):
                raise disk_full(self.path, e) from e
            raise
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            self._fh.seek(0)
            self._fh.truncate()  # no stale pid left for a reader to misreport
            self._fh.close()  # closing drops the flock
            self._fh = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def _read_holder(fh: IO[str]) -> str:
    """What the holder wrote into the lock file (it writes just after locking: look again briefly)."""
    for _ in range(20):
        fh.seek(0)
        text = fh.read().strip()
        if text:
            return text
        time.sleep(0.01)
    return "pid unknown: it has not written the lock file yet"
