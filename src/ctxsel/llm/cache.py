"""An on-disk LLM response cache (SQLite, WAL) and a client wrapper that uses it.

    cache = ResponseCache("~/.cache/ctxsel/llm.sqlite")
    client = CachedClient(OpenAICompatClient(url, model), cache, template_version="self-route-v2")
    client.complete(prompt)        # calls the model, stores the reply
    client.complete(prompt)        # same key: returned from the cache, .cached is True

The key is the sha256 of a canonical JSON document holding everything that
changes the reply: the model id (and the client's ``cache_identity()``, e.g.
chat vs completions mode), the full prompt or message list, every generation
parameter (``max_tokens``, ``temperature``, ``stop``, ``seed`` and any extra
ones), the reply format asked for (``reply_format``) and the prompt
template's version. Change any of them and the lookup
misses; nothing stale is ever returned. Values are JSON (the Completion, with
the server's raw reply unless ``store_raw=False``), never pickles.

Sampling (``temperature > 0``) bypasses the cache unless
``cache_sampling=True``: a cached sample would silently turn repeated draws
into one draw.

Safety (shared with the embedding cache, see ``ctxsel.sqlite_store``):
each process (and thread) uses its own connection; WAL mode and a busy
timeout let many processes read and write at once, and writes that still
meet ``database is locked`` are retried. A corrupt or truncated file (or one
that is not SQLite at all) is detected when opened (``PRAGMA quick_check``)
or when a query fails with a corruption error, moved aside to
``<path>.corrupt-<timestamp>`` and replaced by an empty cache, with a
warning; a cache problem never fails the model call it serves. Without a
path, a cache folder (or HOME) that cannot be written gives an in-memory
cache for the process (``path`` is ``:memory:``) after the one warning of
``ctxsel.paths.writable_cache_dir``.

A disk that fills up (or turns read-only) under the cache, or another process
that holds its lock longer than ``CTXSEL_CACHE_LOCK_TIMEOUT`` seconds, does
not fail the call either: from then on replies are kept in memory as well
(``in_memory``), with one warning (for the default file, ``ctxsel.paths``'
one warning naming the folder and the space left). After a full disk the
file is still read; after a lock held too long it is not waited for again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxsel.errors import InputTypeError
from ctxsel.llm.base import Completion, LLMClient, Prompt, complete_many, normalize_prompt
from ctxsel.paths import default_cache_dir, is_out_of_room, out_of_room, room_reason, writable_cache_dir
from ctxsel.sqlite_store import LockTimeout, MemoryStore, SQLiteStore, lock_timeout

if TYPE_CHECKING:  # pragma: no cover
    from ctxsel.llm.constrain import ReplyFormat

log = logging.getLogger("ctxsel.llm")

#: Bump when the key document's layout changes (old entries then simply miss).
KEY_SCHEMA = 1


FILE_NAME = "llm_responses.sqlite"
_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS responses ("
    " key TEXT PRIMARY KEY, model_id TEXT NOT NULL, value TEXT NOT NULL, created REAL NOT NULL)"
]


def default_cache_path() -> Path:
    """``$CTXSEL_CACHE_DIR/llm_responses.sqlite`` (else ``$XDG_CACHE_HOME/ctxsel``, else ``~/.cache/ctxsel``)."""
    return default_cache_dir() / FILE_NAME


def cache_key(
    model_id: str,
    prompt: Prompt,
    *,
    max_tokens: int = 256,
    temperature: float = 0.0,
    stop: list[str] | None = None,
    seed: int | None = None,
    template_version: str = "",
    identity: dict[str, Any] | None = None,
    reply_format: ReplyFormat | None = None,
    **extra: Any,
) -> str:
    """The sha256 hex key of one request: model, prompt, every parameter, the template version
    and the reply format (its name and schema hash; absent from the key when there is none)."""
    doc: dict[str, Any] = {
        "schema": KEY_SCHEMA,
        "model_id": model_id,
        "identity": identity or {},
        "template_version": template_version,
        "prompt": normalize_prompt(prompt),
        "params": {
            "max_tokens": int(max_tokens),
            "temperature": float(temperature),
            "stop": list(stop) if stop else None,
            "seed": None if seed is None else int(seed),
            "extra": extra,
        },
    }
    if reply_format is not None:
        doc["reply_format"] = reply_format.key
    try:
        canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InputTypeError(
            f"cannot build a cache key: a prompt or parameter is not JSON-serialisable ({e}); "
            "pass plain str/int/float/bool/list/dict values"
        ) from e
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


class ResponseCache:
    """LLM replies on disk, keyed by :func:`cache_key`. Safe across threads and processes.

    ``timeout`` bounds how long a write waits for another process's lock
    (SQLite busy timeout, then retries; default ``CTXSEL_CACHE_LOCK_TIMEOUT``). ``quick_check`` runs ``PRAGMA
    quick_check`` when the file is opened (cost grows with the file; turn it
    off for very large caches -- corruption met later is still handled).
    The file handling (connections, locks, rebuilding a corrupt file) is
    :class:`ctxsel.sqlite_store.SQLiteStore`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        timeout: float | None = None,
        store_raw: bool = True,
        quick_check: bool = True,
    ) -> None:
        self.timeout = lock_timeout() if timeout is None else float(timeout)
        self.store_raw = store_raw
        self.quick_check = quick_check
        self._db: SQLiteStore | MemoryStore
        #: replies kept in memory once the file could not take them (a full disk, a lock held too long)
        self._spill: MemoryStore | None = None
        self._in_cache_dir = path is None
        if path is None:
            folder = writable_cache_dir()
            if folder is None:  # already warned, once a process
                self.path = MemoryStore.path
                self._db = MemoryStore(schema=_SCHEMA)
                return
            self.path = folder / FILE_NAME
        else:
            self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OSError(
                f"cannot create the LLM cache directory {self.path.parent}: {e}; "
                "pass ResponseCache(path=...) in a writable place or set CTXSEL_CACHE_DIR"
            ) from e
        try:
            self._db = SQLiteStore(
                self.path,
                schema=_SCHEMA,
                label="LLM response cache",
                lost="Cached replies are lost; they will be fetched again from the model.",
                log=log,
                timeout=self.timeout,
                quick_check=quick_check,
            )
        except (OSError, sqlite3.Error) as e:
            if path is not None:
                raise  # the caller named this file: tell them it cannot be used
            if not (is_out_of_room(e) and out_of_room(self.path.parent, e)):  # else: warned once, for the folder
                log.warning(
                    "LLM response cache %s cannot be used (%s); replies are cached in memory for this process. "
                    "Make it writable or set CTXSEL_CACHE_DIR to a writable folder.",
                    self.path,
                    room_reason(e, self.path.parent) if is_out_of_room(e) else e,
                )
            self.path = MemoryStore.path
            self._db = MemoryStore(schema=_SCHEMA)

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        self._db.close()

    @property
    def in_memory(self) -> bool:
        """Whether replies are (also) kept in memory: no file could be used, or it stopped taking them."""
        return self._spill is not None or isinstance(self._db, MemoryStore)

    def _stores(self) -> list[SQLiteStore | MemoryStore]:
        return [self._db] + ([self._spill] if self._spill is not None else [])

    def _to_memory(self, e: BaseException) -> MemoryStore:
        """The file stopped taking replies (``e``: a full disk, or a lock held too long): keep them in
        memory from now on, after one warning; after a lock held too long the file is not read either."""
        if self._spill is None:
            self._spill = MemoryStore(schema=_SCHEMA)
            if isinstance(e, LockTimeout):
                log.warning("%s; replies are cached in memory for this process", e)
            elif not (self._in_cache_dir and out_of_room(self.path.parent, e)):
                log.warning(
                    "LLM response cache %s: write failed (%s); replies are cached in memory for this process",
                    self.path,
                    room_reason(e, self.path),
                )
        if isinstance(e, LockTimeout):
            self._db, self._spill = self._spill, None  # the file is not waited for again
            self.path = MemoryStore.path
            return self._db
        return self._spill

    # -- the mapping --------------------------------------------------------

    def get(self, key: str) -> Completion | None:
        """The cached reply for ``key`` (``cached=True``), or None. A broken cache reads as a miss."""
        row = None

        def read(c: sqlite3.Connection) -> Any:
            return c.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()

        try:
            for store in reversed(self._stores()):  # the memory's newer replies first
                row = store.run("read", read)
                if row is not None:
                    break
        except LockTimeout as e:
            self._to_memory(e)
            return None
        except sqlite3.Error as e:
            log.warning("LLM response cache %s: read failed (%s); treating as a miss", self.path, e)
            return None
        if row is None:
            return None
        try:
            out = Completion.from_dict(json.loads(row[0]))
        except (ValueError, TypeError, AttributeError) as e:
            log.warning("LLM response cache %s: entry %s is unreadable (%s); treating as a miss", self.path, key, e)
            return None
        out.cached = True
        return out

    def put(self, key: str, completion: Completion, model_id: str = "") -> None:
        """Store a reply (replacing any previous one). Failures are logged, never raised."""
        d = completion.to_dict(with_raw=self.store_raw)
        d.pop("cached", None)
        try:
            value = json.dumps(d, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            log.warning("LLM response cache: reply not stored, not JSON-serialisable (%s)", e)
            return
        row = (key, model_id or completion.model, value, time.time())

        def insert(c: sqlite3.Connection) -> None:
            c.execute("INSERT OR REPLACE INTO responses (key, model_id, value, created) VALUES (?, ?, ?, ?)", row)

        store = self._spill or self._db
        try:
            store.run("write", insert)
        except (sqlite3.Error, OSError) as e:
            if not (isinstance(e, LockTimeout) or is_out_of_room(e)):
                log.warning("LLM response cache %s: write failed (%s); the reply was not cached", self.path, e)
                return
            self._to_memory(e).run("write", insert)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and any(
            s.run("read", lambda c: c.execute("SELECT 1 FROM responses WHERE key = ?", (key,)).fetchone()) is not None
            for s in self._stores()
        )

    def __len__(self) -> int:
        if self._spill is None:
            return int(self._db.run("count", lambda c: c.execute("SELECT COUNT(*) FROM responses").fetchone()[0]))
        return len(self.keys())

    def keys(self) -> list[str]:
        def read(c: sqlite3.Connection) -> list[Any]:
            return c.execute("SELECT key FROM responses").fetchall()

        return list(dict.fromkeys(r[0] for s in self._stores() for r in s.run("read", read)))

    def clear(self) -> None:
        for s in self._stores():
            s.run("clear", lambda c: c.execute("DELETE FROM responses"))


class CachedClient:
    """Wrap any :class:`~ctxsel.llm.base.LLMClient` with a :class:`ResponseCache`.

    ``template_version`` names the prompt template (bump it when the prompt
    wording changes, so old replies miss). Calls with ``temperature > 0``
    bypass the cache unless ``cache_sampling=True``. A cache hit returns the
    stored Completion with ``cached=True`` and the original call's usage;
    ``hits``, ``misses`` and ``bypassed`` count what happened.
    """

    def __init__(
        self,
        client: LLMClient,
        cache: ResponseCache,
        template_version: str = "",
        *,
        cache_sampling: bool = False,
    ) -> None:
        self.client = client
        self.cache = cache
        self.template_version = str(template_version)
        self.cache_sampling = cache_sampling
        self.model_id = client.model_id
        self.hits = self.misses = self.bypassed = 0
        self._count_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CachedClient({self.client!r}, {self.cache!r}, template_version={self.template_version!r})"

    def cache_identity(self) -> dict[str, Any]:
        ident = getattr(self.client, "cache_identity", None)
        return dict(ident()) if callable(ident) else {}

    def key(
        self,
        prompt: Prompt,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        seed: int | None = None,
        **extra: Any,
    ) -> str:
        return cache_key(
            self.model_id,
            prompt,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
            seed=seed,
            template_version=self.template_version,
            identity=self.cache_identity(),
            **extra,
        )

    def complete_n(self, prompt: Any, n: int, *, seed: int | None = None, **kw: Any) -> list[Any]:
        """``n`` samples through the wrapped client's ``complete_n`` (sampled replies are not cached)."""
        from ctxsel.llm.base import complete_n

        if kw.get("temperature", 0.0) > 0 and not self.cache_sampling:
            self.bypassed += 1
            return complete_n(self.client, prompt, n, seed=seed, **kw)
        return [self.complete(prompt, seed=None if seed is None else seed + i, **kw) for i in range(n)]

    def complete_many(self, prompts: list[Prompt], **kw: Any) -> list[Completion]:
        """Replies to ``prompts`` in order: the cached ones from the cache, the rest in one
        :func:`~ctxsel.llm.base.complete_many` call to the wrapped client (batched where it can)."""
        if kw.get("temperature", 0.0) > 0 and not self.cache_sampling:
            with self._count_lock:
                self.bypassed += len(prompts)
            return complete_many(self.client, prompts, **kw)
        keys = [self.key(p, **kw) for p in prompts]
        out: list[Completion | None] = [self.cache.get(k) for k in keys]
        todo = [i for i, c in enumerate(out) if c is None]
        with self._count_lock:
            self.hits += len(prompts) - len(todo)
            self.misses += len(todo)
        for i, c in zip(todo, complete_many(self.client, [prompts[i] for i in todo], **kw), strict=True):
            self.cache.put(keys[i], c, self.model_id)
            out[i] = c
        return [c for c in out if c is not None]

    def complete(
        self,
        prompt: Prompt,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: list[str] | None = None,
        seed: int | None = None,
        **extra: Any,
    ) -> Completion:
        params: dict[str, Any] = dict(max_tokens=max_tokens, temperature=temperature, stop=stop, seed=seed, **extra)
        if temperature > 0 and not self.cache_sampling:
            with self._count_lock:
                self.bypassed += 1
            return self.client.complete(prompt, **params)
        key = self.key(prompt, **params)
        hit = self.cache.get(key)
        if hit is not None:
            with self._count_lock:
                self.hits += 1
            return hit
        out = self.client.complete(prompt, **params)
        with self._count_lock:
            self.misses += 1
        self.cache.put(key, out, self.model_id)
        return out


__all__ = ["KEY_SCHEMA", "CachedClient", "ResponseCache", "cache_key", "default_cache_path"]
