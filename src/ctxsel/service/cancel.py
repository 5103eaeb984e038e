"""Work that stops when its request's deadline passes.

A Python thread cannot be killed, so a request's work runs in a worker
thread that checks a :class:`CancelToken` between steps: before each batch of
chunks it scores, while it waits for the scorer, and before and after each
LLM call. At the deadline the service sets the token; the work then stops at
its next check, instead of scoring 5,000 chunks long after the client
got its 504. (The service also frees the request's concurrency slot a short
grace after the deadline even if a step is still running: one LLM call in
flight cannot be interrupted, and ends under the client's own timeout.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ctxsel.errors import Cancelled
from ctxsel.scoring.base import score_with_notes
from ctxsel.stages.vectors import embedding_scorer
from ctxsel.types import Chunk


class CancelToken:
    """Set once, at the deadline; the work checks it between steps."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled("the request's deadline passed")

    def acquire(self, lock: Any, poll_s: float = 0.05) -> None:
        """Take ``lock``, giving up (:class:`Cancelled`) once the token is set."""
        while not lock.acquire(timeout=poll_s):
            self.check()


#: Scorers whose score of a chunk does not depend on the other chunks, so they
#: can score a request in batches. (BM25's IDF is over the whole pool, so it
#: scores in one call; that call is one pass over the pool's words, cheap next to embedding.)
BATCHABLE_SCORERS = frozenset({"dense"})


def score_in_batches(
    scorer: Any,
    question: str,
    chunks: Sequence[Chunk],
    token: CancelToken,
    *,
    first_batch: int = 8,
    max_batch: int = 256,
    target_s: float = 0.3,
) -> tuple[np.ndarray, dict[str, Any]]:
    """``score_with_notes(scorer, question, chunks)``, a batch at a time,
    checking ``token`` before each: the scores, and the scorer's notes for
    ``Selection.meta`` (what its window truncated) summed over the batches.

    The batch size adapts to keep each batch near ``target_s`` seconds (small
    while the model embeds, large while the cache answers), so cancelled work
    stops within about one batch. A scorer that fuses others (hybrid, cascade) scores in one call,
    after its ``vector_source`` has embedded the chunks here a batch at a time: that call then
    reads its vectors from the cache, and what is left (BM25, a cascade's head) is bounded."""
    token.check()
    if len(chunks) <= first_batch:
        scores, notes = score_with_notes(scorer, question, chunks)
        return np.asarray(scores, dtype=np.float32), notes
    if getattr(scorer, "name", None) not in BATCHABLE_SCORERS:
        source = embedding_scorer(getattr(scorer, "vector_source", None))
        if source is not None:
            prefix = getattr(source, "document_prefix", "")
            _in_batches(
                lambda part: (source.embed([c.text for c in part], prefix), {}),
                chunks,
                token,
                first_batch,
                max_batch,
                target_s,
            )
        token.check()
        scores, notes = score_with_notes(scorer, question, chunks)
        return np.asarray(scores, dtype=np.float32), notes
    return _in_batches(
        lambda part: score_with_notes(scorer, question, part), chunks, token, first_batch, max_batch, target_s
    )


def _in_batches(
    run: Any, chunks: Sequence[Chunk], token: CancelToken, first_batch: int, max_batch: int, target_s: float
) -> tuple[np.ndarray, dict[str, Any]]:
    """``run(part)`` -> (scores, notes) over ``chunks`` a batch at a time, checking ``token`` before each;
    the batch grows while a batch takes under half ``target_s`` and shrinks past it."""
    out: list[np.ndarray] = []
    notes: dict[str, Any] = {}
    size, start = first_batch, 0
    while start < len(chunks):
        token.check()
        t0 = time.perf_counter()
        scores, batch_notes = run(chunks[start : start + size])
        out.append(np.asarray(scores, dtype=np.float32))
        notes = _merge_notes(notes, batch_notes)
        start += size
        took = time.perf_counter() - t0
        if took < target_s / 2:
            size = min(2 * size, max_batch)
        elif took > target_s and size > 1:
            size //= 2
    return np.concatenate(out), notes


def _merge_notes(total: dict[str, Any], batch: dict[str, Any]) -> dict[str, Any]:
    """Notes of two batches as one call's: counts add up, flags combine (``truncated``:
    the question is cut in every batch or none; chunk counts sum)."""
    merged = dict(total)
    for key, value in batch.items():
        before = merged.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            merged[key] = {
                k: (
                    before.get(k, 0) + v
                    if isinstance(v, int) and not isinstance(v, bool) and k != "window_tokens"
                    else v
                )
                for k, v in value.items()
            }
        else:
            merged[key] = value
    return merged


class CancellableLLM:
    """An LLM client that checks ``token`` before each call and after it (the
    reply of a call that ended past the deadline is dropped); everything else
    is the wrapped client's. ``on_reply`` hears of each reply (the metrics)."""

    def __init__(self, client: Any, token: CancelToken, on_reply: Callable[[Any], None] | None = None) -> None:
        self._client = client
        self._token = token
        self._on_reply = on_reply

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        self._token.check()
        reply = self._client.complete(*args, **kwargs)
        if self._on_reply is not None:
            self._on_reply(reply)
        self._token.check()
        return reply

    def complete_n(self, prompt: Any, n: int, *, seed: int | None = None, **kwargs: Any) -> list[Any]:
        own = getattr(self._client, "complete_n", None)
        if not callable(own):  # what ctxsel.llm.base.complete_n does, a checked call at a time
            return [self.complete(prompt, seed=None if seed is None else seed + i, **kwargs) for i in range(n)]
        self._token.check()
        replies = list(own(prompt, n, seed=seed, **kwargs))
        if self._on_reply is not None:
            self._on_reply(replies)
        self._token.check()
        return replies

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_client", "_token", "_on_reply"):  # copy/pickle probe before __init__ ran
            raise AttributeError(name)
        return getattr(self._client, name)


__all__ = ["BATCHABLE_SCORERS", "CancelToken", "CancellableLLM", "score_in_batches"]
