"""On-disk embedding cache: SQLite (WAL), one row per (model, text hash).

Vectors are stored as raw float32 bytes (never pickles). The key includes
the model id and any prefix the model puts before the text, so a change of
either misses the cache instead of returning stale vectors.

The cache only saves time, so it never fails the scoring it serves:

- a corrupt, truncated or foreign file is moved aside to
  ``<path>.corrupt-<time>-<pid>`` and rebuilt empty, with a warning, when it
  is opened or when a query meets the damage later (the same code as the LLM
  response cache: ``ctxsel.sqlite_store``);
- a cache that cannot be used at all (its folder is a file or unwritable,
  the file cannot be opened) is a warning, and the scorer runs without it
  (it still keeps the vectors of the texts it has seen in memory). Without a
  path, an unwritable or missing cache folder (or HOME) is the one warning of
  ``ctxsel.paths.writable_cache_dir``, not a second one here;
- a failed read is a miss and a failed write is skipped, each with one
  warning per cache object, so a run that cannot write its vectors still
  returns the right scores. A full disk (or quota, or read-only mount) stops
  the writes for good; in the default cache folder it is the one warning of
  ``ctxsel.paths.out_of_room`` (the folder and the space left), after which
  every cache of the process keeps to memory;
- another process that holds the file's lock longer than
  ``CTXSEL_CACHE_LOCK_TIMEOUT`` seconds (``ctxsel.sqlite_store``: a warning
  when the wait gets long) makes the cache step aside: the scorer goes on
  without it, with a warning, and does not wait again;
- a row whose bytes do not match its dimension, or whose values are not
  finite, is a miss (and is overwritten by the next write of that text).
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ctxsel.paths import default_cache_dir, is_out_of_room, out_of_room, room_reason, writable_cache_dir
from ctxsel.sqlite_store import LockTimeout, SQLiteStore

log = logging.getLogger("ctxsel.scoring")

_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS emb (key TEXT PRIMARY KEY, dim INTEGER NOT NULL, vec BLOB NOT NULL)",
    # each text's length in the model's tokens, for the window check of a process that embeds nothing
    "CREATE TABLE IF NOT EXISTS lens (key TEXT PRIMARY KEY, n INTEGER NOT NULL)",
]


__all__ = ["EmbeddingCache", "default_cache_dir", "text_key"]


def text_key(model_id: str, text: str) -> str:
    return hashlib.sha256(model_id.encode() + b"\0" + text.encode("utf-8", "surrogatepass")).hexdigest()


class EmbeddingCache:
    """Vectors by key (:func:`text_key`), safe across threads and processes.

    ``quick_check`` checks the whole file's structure when it is opened
    (``PRAGMA quick_check``, which reads the whole file: docs/reliability.md has its cost); damage met later is
    rebuilt all the same. ``usable`` is False when the cache could not be
    opened; it then reads as empty and writes nothing.
    """

    def __init__(self, path: str | Path | None = None, *, quick_check: bool = True) -> None:
        folder = None if path else writable_cache_dir()
        # ":memory:" when the cache folder cannot be written: nothing on disk, and the warning was given
        # (once a process); the scorer keeps the vectors in memory all the same
        self.path = Path(path).expanduser() if path else folder / "embeddings.sqlite" if folder else Path(":memory:")
        self.quick_check = quick_check
        self._warned: set[str] = set()
        self._db: SQLiteStore | None = None
        self._in_cache_dir = not path  # the default file: a full disk there is paths' one warning
        self._no_room = False  # a write met a full disk: no more writes
        if not path and folder is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = SQLiteStore(
                self.path,
                schema=_SCHEMA,
                label="embedding cache",
                lost="Cached vectors are lost; they will be computed again.",
                log=log,
                quick_check=quick_check,
            )
        except LockTimeout as e:
            self._step_aside(e)
        except (OSError, sqlite3.Error) as e:
            if is_out_of_room(e) and self._in_cache_dir and out_of_room(self.path.parent, e):
                return  # warned once for the whole cache folder
            self._warn_once(
                "open",
                "embedding cache %s cannot be used (%s); scoring goes on without it (same scores, every text is "
                "embedded again). Make its folder writable or set CTXSEL_CACHE_DIR to a writable folder.",
                self.path,
                room_reason(e, self.path.parent) if is_out_of_room(e) else e,
            )

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.path)!r})"

    @property
    def usable(self) -> bool:
        return self._db is not None

    def _warn_once(self, what: str, msg: str, *args: object) -> None:
        """Warn about each kind of failure once per cache object (a per-batch write would repeat it)."""
        if what not in self._warned:
            self._warned.add(what)
            log.warning(msg, *args)

    def _step_aside(self, e: LockTimeout) -> None:
        """Another process held the lock for the whole timeout: go on without the file (no second wait)."""
        self._db = None
        self._warn_once(
            "locked",
            "%s; scoring goes on without the embedding cache (same scores, its texts are embedded again)",
            e,
        )

    def _rows(self, columns: str, table: str, keys: Sequence[str]) -> list[Any]:
        """``SELECT key, columns FROM table`` for ``keys``, 500 at a time; a failed read reads as no rows."""
        rows: list[Any] = []
        if self._db is None:
            return rows
        try:
            for start in range(0, len(keys), 500):
                part = list(keys[start : start + 500])
                q = f"SELECT key, {columns} FROM {table} WHERE key IN ({','.join('?' * len(part))})"
                rows += self._db.run("read", partial(_fetch, q, part))
        except LockTimeout as e:
            self._step_aside(e)
        except sqlite3.Error as e:
            self._warn_once("read", "embedding cache %s: read failed (%s); its texts are embedded again", self.path, e)
        return rows

    def _put(self, statement: str, rows: list[tuple[Any, ...]], lost: str) -> None:
        """Run ``statement`` over ``rows`` in one transaction; a failed write is a warning naming what is
        ``lost``, never an error."""
        if self._db is None or self._no_room or not rows:
            return

        def write(con: sqlite3.Connection) -> None:
            with con:  # isolation_level=None: an explicit transaction, so a batch is all or nothing
                con.execute("BEGIN")
                con.executemany(statement, rows)

        try:
            self._db.run("write", write)
        except LockTimeout as e:
            self._step_aside(e)
        except (sqlite3.Error, OSError) as e:
            if not is_out_of_room(e):
                self._warn_once("write", "embedding cache %s: write failed (%s); %s", self.path, e, lost)
                return
            self._no_room = True
            if not (self._in_cache_dir and out_of_room(self.path.parent, e)):
                self._warn_once(
                    "write", "embedding cache %s: write failed (%s); %s", self.path, room_reason(e, self.path), lost
                )

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The vectors the cache has for ``keys``; a damaged row, or a read that fails, is a miss."""
        out: dict[str, np.ndarray] = {}
        for key, dim, blob in self._rows("dim, vec", "emb", keys):
            vec = np.frombuffer(blob, dtype=np.float32)
            if vec.shape[0] == dim and np.isfinite(vec).all():  # a torn or garbled row is a miss
                out[key] = vec
        return out

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        """Store vectors (one transaction); a failed write is a warning, never an error."""
        rows = [(k, int(v.shape[0]), np.ascontiguousarray(v, dtype=np.float32).tobytes()) for k, v in items.items()]
        self._put(
            "INSERT OR REPLACE INTO emb (key, dim, vec) VALUES (?, ?, ?)",
            rows,
            "vectors are not being cached (the scores are unaffected)",
        )

    def get_lengths(self, keys: Sequence[str]) -> dict[str, int]:
        """The token counts the cache has for ``keys``; a failed read is a miss."""
        return {k: n for k, n in self._rows("n", "lens", keys) if isinstance(n, int) and n >= 0}

    def put_lengths(self, items: dict[str, int]) -> None:
        """Store token counts (one transaction); a failed write is a warning, never an error."""
        rows = list(items.items())
        self._put("INSERT OR REPLACE INTO lens (key, n) VALUES (?, ?)", rows, "token counts are not being cached")

    def __len__(self) -> int:
        if self._db is None:
            return 0
        return int(self._db.run("count", lambda c: c.execute("SELECT COUNT(*) FROM emb").fetchone()[0]))

    def close(self) -> None:
        """Close this thread's connection."""
        if self._db is not None:
            self._db.close()


def _fetch(query: str, params: list[str], con: sqlite3.Connection) -> list[Any]:
    return con.execute(query, params).fetchall()
