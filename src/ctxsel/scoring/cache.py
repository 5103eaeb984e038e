"""On-disk embedding cache: SQLite (WAL), one row per (model, text hash).

Vectors are stored as raw float32 bytes (never pickles). The key includes
the model id and any prefix the model puts before the text, so a change of
either misses the cache instead of returning stale vectors.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ctxsel.paths import default_cache_dir


def text_key(model_id: str, text: str) -> str:
    return hashlib.sha256(model_id.encode() + b"\0" + text.encode("utf-8", "surrogatepass")).hexdigest()


class EmbeddingCache:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else default_cache_dir() / "embeddings.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._conn() as con:
            con.execute(
                "CREATE TABLE IF NOT EXISTS emb (key TEXT PRIMARY KEY, dim INTEGER NOT NULL, vec BLOB NOT NULL)"
            )

    # Picklable (Ray workers, multiprocessing): the path travels, connections are per process.
    def __getstate__(self) -> dict[str, object]:
        return {"path": str(self.path)}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(str(state["path"]))  # type: ignore[misc]

    def _conn(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, timeout=60)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")
            self._local.con = con
        return con

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        con = self._conn()
        for start in range(0, len(keys), 500):
            part = list(keys[start : start + 500])
            q = f"SELECT key, dim, vec FROM emb WHERE key IN ({','.join('?' * len(part))})"
            for key, dim, blob in con.execute(q, part):
                vec = np.frombuffer(blob, dtype=np.float32)
                if vec.shape[0] == dim:  # a torn row is treated as a miss
                    out[key] = vec
        return out

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        con = self._conn()
        with con:
            con.executemany(
                "INSERT OR REPLACE INTO emb (key, dim, vec) VALUES (?, ?, ?)",
                [(k, int(v.shape[0]), np.ascontiguousarray(v, dtype=np.float32).tobytes()) for k, v in items.items()],
            )

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM emb").fetchone()[0])
