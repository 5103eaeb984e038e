"""One SQLite file shared by threads and processes that rebuilds itself when it is corrupt.

Both on-disk caches (LLM replies, embeddings) hold only what can be computed
again, so a damaged file must cost time, never a failed run. This module is
the part they share:

- each process (and thread) uses its own connection; WAL mode and a busy
  timeout let many processes read and write at once, and writes that still
  meet ``database is locked`` are retried until ``timeout``;
- waiting for another process's lock is bounded: ``timeout`` defaults to
  ``CTXSEL_CACHE_LOCK_TIMEOUT`` (seconds, :data:`DEFAULT_LOCK_TIMEOUT` when
  unset); a wait that lasts past :func:`warn_after` is a warning that says
  who is waited for and for how long at most, and one that lasts the whole
  timeout raises :class:`LockTimeout` (an ``sqlite3.OperationalError``), on
  which each cache goes on without its file;
- a corrupt or truncated file (or one that is not SQLite at all) is detected
  when opened (``PRAGMA quick_check``) or when a query fails with a
  corruption error (SQLITE_CORRUPT, SQLITE_NOTADB), moved aside to
  ``<path>.corrupt-<time>-<pid>`` (with its ``-wal`` and ``-shm``) and
  replaced by an empty file, with a warning; the bad file is kept for
  whoever wants to look at it;
- a ``<path>.lock`` file beside it serialises that check across processes.
  Other processes that still hold the old file open keep using the
  moved-aside copy until they reopen it (their entries are lost, never wrong).

Errors that are not corruption (an unwritable folder, a full disk) are
raised as ``sqlite3.Error``: each cache decides what they mean for it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ctxsel.errors import LockTimeout, StoreCorrupt

T = TypeVar("T")

_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_CORRUPT, _SQLITE_NOTADB = 5, 6, 11, 26

#: how many seconds a cache waits for another process's lock before it goes on without its file
LOCK_TIMEOUT_VAR = "CTXSEL_CACHE_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 20.0
#: SQLite's own busy wait, one slice at a time, so that a long wait can be reported while it lasts
_BUSY_SLICE = 0.25
#: a wait for a lock longer than this (or half the timeout, if shorter) is a warning while it lasts
WARN_AFTER = 5.0

_log = logging.getLogger("ctxsel.cache")
_bad_values: set[str] = set()


def lock_timeout() -> float:
    """``CTXSEL_CACHE_LOCK_TIMEOUT`` in seconds (> 0), else :data:`DEFAULT_LOCK_TIMEOUT`; a value that
    is not a positive number is a warning (once) and the default."""
    text = os.environ.get(LOCK_TIMEOUT_VAR, "").strip()
    if not text:
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        if text not in _bad_values:
            _bad_values.add(text)
            _log.warning(
                "%s=%r is not a number of seconds > 0; the caches wait %g s for another process's lock",
                LOCK_TIMEOUT_VAR,
                text,
                DEFAULT_LOCK_TIMEOUT,
            )
        return DEFAULT_LOCK_TIMEOUT
    return value


def warn_after(timeout: float) -> float:
    """After how long a wait for a lock is a warning: :data:`WARN_AFTER`, or half the timeout if shorter."""
    return min(WARN_AFTER, timeout / 2)


def _errcode(e: BaseException) -> int | None:
    code = getattr(e, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def is_locked(e: BaseException) -> bool:
    """Whether ``e`` is SQLite's 'database is locked / busy' (worth retrying)."""
    code = _errcode(e)
    if code is not None:
        return code in (_SQLITE_BUSY, _SQLITE_LOCKED)
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


def is_corrupt(e: BaseException) -> bool:
    """Whether ``e`` says the file is damaged or not a database (worth rebuilding)."""
    if not isinstance(e, sqlite3.DatabaseError):
        return False
    code = _errcode(e)
    if code is not None:
        return code in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    msg = str(e).lower()
    return "malformed" in msg or "not a database" in msg or "corrupt" in msg


class SQLiteStore:
    """``path`` opened (and created with ``schema``, a list of statements) for a cache.

    ``label`` names the cache in messages ("embedding cache"); ``lost`` says
    in the warning what a rebuild costs the user; ``log`` is the logger the
    warnings go to. ``run(op, fn)`` runs ``fn(connection)`` with the retries
    and the rebuild described in the module docstring.
    """

    def __init__(
        self,
        path: Path,
        *,
        schema: Sequence[str],
        label: str,
        lost: str,
        log: logging.Logger,
        timeout: float | None = None,
        quick_check: bool = True,
    ) -> None:
        self.path = Path(path)
        self.schema = tuple(schema)
        self.label = label
        self.lost = lost
        self.log = log
        self.timeout = lock_timeout() if timeout is None else float(timeout)
        self._waited_warning = False
        self._local = threading.local()
        self._lock = threading.Lock()  # serialises recovery within this process
        self._generation = 0
        self._open(check=quick_check)

    # -- pickling: a store handed to a subprocess opens its own connection (and skips the check) --

    def __getstate__(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "schema": self.schema,
            "label": self.label,
            "lost": self.lost,
            "log": self.log.name,
            "timeout": self.timeout,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({**state, "log": logging.getLogger(state["log"])})
        self._waited_warning = False
        self._local = threading.local()
        self._lock = threading.Lock()
        self._generation = 0

    # -- connections --------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        busy = min(self.timeout, _BUSY_SLICE)  # SQLite waits a slice; _retry_locked waits the rest and says so
        con = sqlite3.connect(self.path, timeout=busy, isolation_level=None, check_same_thread=True)
        try:
            con.execute(f"PRAGMA busy_timeout={int(busy * 1000)}")
            self._retry_locked(lambda: con.execute("PRAGMA journal_mode=WAL").fetchone())
            con.execute("PRAGMA synchronous=NORMAL")
            for statement in self.schema:  # cheap when present; a file rebuilt by another process gets it
                self._retry_locked(lambda s=statement: con.execute(s))  # type: ignore[misc]
        except BaseException:
            con.close()
            raise
        return con

    def conn(self) -> sqlite3.Connection:
        """This thread's connection to the current file (reopened after a rebuild or a fork)."""
        con = getattr(self._local, "con", None)
        if (
            con is None
            or getattr(self._local, "pid", None) != os.getpid()
            or getattr(self._local, "generation", None) != self._generation
        ):
            if con is not None and getattr(self._local, "pid", None) == os.getpid():
                with contextlib.suppress(sqlite3.Error):
                    con.close()  # a connection to a file since moved aside
            con = self._connect()
            self._local.con = con
            self._local.pid = os.getpid()
            self._local.generation = self._generation
        return con

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        con = getattr(self._local, "con", None)
        self._local.con = None
        if con is not None and getattr(self._local, "pid", None) == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                con.close()

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """An exclusive lock across processes for opening, checking and rebuilding the file, waited for
        at most ``timeout`` (then :class:`LockTimeout`)."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: the in-process lock only
            with self._lock:
                yield
            return
        lock_path = str(self.path) + ".lock"
        with self._lock, open(lock_path, "a+b") as fh:
            start = time.monotonic()
            delay = 0.01
            while True:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    self._waiting(start, f"its lock file {lock_path}")
                    time.sleep(delay)
                    delay = min(delay * 2, 0.1)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def _waiting(self, start: float, what: str, cause: BaseException | None = None) -> None:
        """A wait for another process's lock, ``start`` being when it began: a warning (once per store)
        once it lasts past :func:`warn_after`, :class:`LockTimeout` once it lasts ``timeout``."""
        waited = time.monotonic() - start
        if waited >= self.timeout:
            raise LockTimeout(
                f"the {self.label} {self.path} is locked by another process ({what}) for longer than "
                f"{self.timeout:g} s ({LOCK_TIMEOUT_VAR})"
            ) from cause
        if waited >= warn_after(self.timeout) and not self._waited_warning:
            self._waited_warning = True
            self.log.warning(
                "%s %s: waiting for another process that holds %s; going on without the cache after %g s "
                "(set %s to change how long)",
                self.label,
                self.path,
                what,
                self.timeout,
                LOCK_TIMEOUT_VAR,
            )

    # -- checking and rebuilding --------------------------------------------

    def _open(self, check: bool) -> None:
        with self._file_lock():
            self.close()
            try:
                self._check(check)
                return
            except StoreCorrupt as e:
                reason = str(e)
            except sqlite3.DatabaseError as e:
                if not is_corrupt(e):
                    raise type(e)(
                        f"cannot open the {self.label} {self.path}: {e}; check that the file and its folder are "
                        "writable, or pass another path"
                    ) from e
                reason = str(e)
            self._rebuild(reason)

    def _check(self, check: bool) -> None:
        con = self.conn()
        if check:
            rows = con.execute("PRAGMA quick_check").fetchall()
            if not rows or rows[0][0] != "ok":
                raise StoreCorrupt("quick_check: " + "; ".join(str(r[0]) for r in rows[:3]))

    def _rebuild(self, reason: str) -> None:
        """Move the bad file aside and start an empty one (the caller holds the file lock)."""
        self.close()
        self._generation += 1  # every thread of this process reconnects to the new file
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        bad = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            src = self.path.with_name(self.path.name + suffix)
            if src.exists():
                os.replace(src, bad.with_name(bad.name + suffix))
        self.log.warning(
            "%s %s is corrupt (%s); moved it aside to %s and started an empty cache. %s",
            self.label,
            self.path,
            reason,
            bad,
            self.lost,
        )
        self._check(check=False)

    def _recover(self) -> None:
        """Rebuild after corruption met mid-run, unless another process already did."""
        with self._file_lock():
            self.close()
            try:
                self._check(check=True)
                return  # the file at self.path is healthy now (someone else rebuilt it)
            except (StoreCorrupt, sqlite3.DatabaseError) as e:
                if isinstance(e, sqlite3.DatabaseError) and not is_corrupt(e):
                    raise
                reason = str(e)
            self._rebuild(reason)

    # -- queries ------------------------------------------------------------

    def _retry_locked(self, fn: Callable[[], T]) -> T:
        """Run ``fn``; on 'database is locked' retry with backoff until ``timeout`` has passed (a warning
        once the wait is long, then :class:`LockTimeout`)."""
        start = time.monotonic()
        delay = 0.01
        while True:
            try:
                return fn()
            except LockTimeout:
                raise
            except sqlite3.OperationalError as e:
                if not is_locked(e):
                    raise
                self._waiting(start, "a write lock on the database", cause=e)
                time.sleep(delay)
                delay = min(delay * 2, 0.25)

    def run(self, op: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)``, retried while locked; after a corruption error the file is rebuilt
        and ``fn`` runs once more on the empty one. Other errors propagate."""
        try:
            return self._retry_locked(lambda: fn(self.conn()))
        except sqlite3.DatabaseError as e:
            if not is_corrupt(e):
                raise
            self.log.warning("%s %s: %s failed (%s); rebuilding", self.label, self.path, op, e)
        self._recover()
        return self._retry_locked(lambda: fn(self.conn()))


class MemoryStore:
    """:class:`SQLiteStore`'s ``run`` and ``close`` over one in-memory database, for a cache whose
    folder cannot be written: same queries, nothing on disk, lost when the process ends. One
    connection, used by one thread at a time; a copy sent to another process starts empty."""

    path = Path(":memory:")

    def __init__(self, *, schema: Sequence[str]) -> None:
        self.schema = tuple(schema)
        self._lock = threading.Lock()
        self._con = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        for statement in self.schema:
            self._con.execute(statement)

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(schema=state["schema"])  # type: ignore[misc]

    def run(self, op: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            return fn(self._con)

    def close(self) -> None:
        """Nothing to do: the one connection lives as long as the store (closing it would lose the data)."""


__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "LOCK_TIMEOUT_VAR",
    "LockTimeout",
    "MemoryStore",
    "SQLiteStore",
    "is_corrupt",
    "is_locked",
    "lock_timeout",
    "warn_after",
]
