"""Many threads' one-prompt calls gathered into batched generate calls.

The methods that ask the model while they select (Self-Route, SAGE,
Context-Picker) call ``complete`` one prompt at a time, each call waiting
for the last. On a GPU that wastes it: decoding is bound by reading the
weights, so a batch of prompts decodes in little more than the time of one.
:class:`BatchingClient` wraps a client that has
``complete_many`` (:class:`~ctxsel.llm.hf_reader.TransformersReaderClient`);
when many threads each select for their own question
(:func:`ctxsel.eval.runner.group_rows` does so for such a client), their
``complete`` calls queue up, and one worker sends every queued call with the
same settings as one ``complete_many``. Greedy replies do not depend on the
company a prompt keeps, as far as the backend's arithmetic allows.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future
from typing import Any

from ctxsel.llm.base import Completion, Prompt

#: Seconds the worker waits, once a call is queued, for the queue to stop growing.
SETTLE_S = 0.02


class BatchingClient:
    """``complete`` from any thread, answered in batches by the wrapped client's ``complete_many``.

    ``client`` is the wrapped client (readers and window checks look through it, as through a cache);
    ``max_batch`` bounds the prompts one worker round takes."""

    def __init__(self, client: Any, *, max_batch: int = 256, settle_s: float = SETTLE_S) -> None:
        self.client = client
        self.model_id = client.model_id
        self.max_batch = max_batch
        self.settle_s = settle_s
        self.batches: list[int] = []  # prompts per complete_many call, for tests and reports
        self._queue: list[tuple[Prompt, dict[str, Any], Future[Completion]]] = []
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"BatchingClient({self.client!r})"

    def cache_identity(self) -> dict[str, Any]:
        ident = getattr(self.client, "cache_identity", None)
        return dict(ident()) if callable(ident) else {"model": self.model_id}

    def complete_many(self, prompts: list[Prompt], **kw: Any) -> list[Completion]:
        self.batches.append(len(prompts))
        return list(self.client.complete_many(prompts, **kw))

    def complete(self, prompt: Prompt, **kw: Any) -> Completion:
        done: Future[Completion] = Future()
        with self._cond:
            self._queue.append((prompt, kw, done))
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="ctxsel-batcher", daemon=True)
                self._worker.start()
            self._cond.notify_all()
        return done.result()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._cond.wait(timeout=1.0):
                    if not self._queue:  # idle: the next complete() starts a new worker
                        self._worker = None
                        return
            self._settle()
            with self._cond:
                taken, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            groups: dict[str, list[tuple[Prompt, dict[str, Any], Future[Completion]]]] = {}
            for item in taken:  # one complete_many per set of settings (max_tokens, stop, ...)
                groups.setdefault(_settings_key(item[1]), []).append(item)
            for items in groups.values():
                self._send(items)

    def _settle(self) -> None:
        """Wait while more calls keep arriving (other threads finishing their own work), briefly."""
        last = -1
        while True:
            with self._cond:
                n = len(self._queue)
            if n == last or n >= self.max_batch:
                return
            last = n
            time.sleep(self.settle_s)

    def _send(self, items: list[tuple[Prompt, dict[str, Any], Future[Completion]]]) -> None:
        try:
            replies = self.complete_many([p for p, _, _ in items], **items[0][1])
        except Exception:  # one bad prompt must not fail the others: each alone, its own error
            for p, kw, done in items:
                try:
                    done.set_result(self.client.complete(p, **kw))
                except Exception as e:
                    done.set_exception(e)
            return
        for (_, _, done), reply in zip(items, replies, strict=True):
            done.set_result(reply)


def _settings_key(kw: dict[str, Any]) -> str:
    return json.dumps({k: getattr(v, "key", v) for k, v in kw.items()}, sort_keys=True, default=repr)


__all__ = ["SETTLE_S", "BatchingClient"]
