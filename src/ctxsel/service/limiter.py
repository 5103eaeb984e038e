"""The concurrency limit of /select, /explain and /answer, with a short bounded queue.

At most ``limit`` requests run at once. One more waits in a FIFO queue of at
most ``max_queue`` places for up to ``queue_timeout_s`` seconds; a request
that finds the queue full, or waits longer than that, gets 503 with
``Retry-After``. A short queue keeps a burst of a few clients above the limit
from being refused (a client's retry costs more than its wait), while the
bound keeps an overloaded server from holding requests it cannot serve in
time.

A slot is freed from whichever thread ends the work (a worker thread, or the
event loop's timer after a deadline), so the limiter is guarded by a
``threading.Lock`` and a freed slot is handed straight to the first waiter
with ``call_soon_threadsafe``: nobody can jump the queue.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Collection

from starlette.types import ASGIApp, Receive, Scope, Send

from ctxsel.service.middleware import send_error


class ConcurrencyLimiter:
    """At most ``limit`` slots taken at once, at most ``max_queue`` requests waiting for one.

    ``on_change(in_flight, waiting)`` is called after every change (the metrics' gauges)."""

    def __init__(
        self,
        limit: int,
        max_queue: int = 0,
        queue_timeout_s: float = 5.0,
        on_change: Callable[[int, int], None] | None = None,
    ) -> None:
        self.limit = limit
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        self.on_change = on_change
        self._in_flight = 0
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self._lock = threading.Lock()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _changed(self) -> None:
        if self.on_change is not None:
            with self._lock:  # under the lock: two threads cannot report their counts out of order
                self.on_change(self._in_flight, len(self._waiters))

    def try_acquire(self) -> Slot | None:
        """A slot now, or None (never waits; nobody waiting is passed)."""
        with self._lock:
            if self._in_flight >= self.limit or self._waiters:
                return None
            self._in_flight += 1
        self._changed()
        return Slot(self)

    async def acquire(self) -> tuple[Slot | None, str]:
        """A slot, after waiting in the queue if need be; (None, why) when the
        queue is full ("queue_full") or the wait passed ``queue_timeout_s`` ("queue_timeout")."""
        slot = self.try_acquire()
        if slot is not None:
            return slot, ""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        entry = (loop, waiter)
        immediate = False
        with self._lock:
            if self._in_flight < self.limit and not self._waiters:  # freed meanwhile
                self._in_flight += 1
                immediate = True
            elif len(self._waiters) >= self.max_queue:
                return None, "queue_full"
            else:
                self._waiters.append(entry)
        self._changed()
        if immediate:
            return Slot(self), ""
        try:
            await asyncio.wait_for(waiter, self.queue_timeout_s)
        except BaseException as e:  # timed out, or the client went away: leave the queue
            with self._lock:
                handed = entry not in self._waiters
                if not handed:
                    self._waiters.remove(entry)
            if handed:  # the slot reached us as we gave up: pass it on
                self._free()
            else:
                self._changed()
            if isinstance(e, TimeoutError):
                return None, "queue_timeout"
            raise
        return Slot(self), ""

    def _free(self) -> None:
        with self._lock:
            if self._waiters:  # the slot goes to the first in line; in_flight stays the same
                loop, waiter = self._waiters.popleft()
                loop.call_soon_threadsafe(_wake, waiter)
            else:
                self._in_flight -= 1
        self._changed()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Slot:
    """One taken place, reference counted: the request holds it, and so does
    any worker thread the request starts (:meth:`hold`), so a request
    abandoned at its deadline keeps its place until its worker ends, or until
    the service drops the worker's hold (a grace after the deadline)."""

    def __init__(self, limiter: ConcurrencyLimiter) -> None:
        self._limiter = limiter
        self._refs = 1
        self._lock = threading.Lock()

    def hold(self) -> Hold:
        with self._lock:
            if self._refs <= 0:
                raise RuntimeError("slot already released")
            self._refs += 1
        return Hold(self)

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            self._limiter._free()


class Hold:
    """A worker's reference on a :class:`Slot`; released at most once, by
    whichever comes first: the worker ending or the service giving up on it."""

    def __init__(self, slot: Slot) -> None:
        self._slot = slot
        self._released = False
        self._lock = threading.Lock()

    def release(self) -> bool:
        """Drop the reference; False if it was already dropped."""
        with self._lock:
            if self._released:
                return False
            self._released = True
        self._slot.release()
        return True


class ConcurrencyLimitMiddleware:
    """A slot of ``limiter`` for each request to ``paths``, taken before the
        body is read (waiting in its queue if need be) and put in
        ``scope["state"]["slot"]`` for the endpoint. Past the queue: 503 with
        ``Retry-After: 1``. ``on_admit(why, waited_s)`` hears of every request
    (``why``: "" when it got a slot, else why not), for the metrics."""

    def __init__(
        self,
        app: ASGIApp,
        limiter: ConcurrencyLimiter,
        paths: Collection[str],
        on_admit: Callable[[str, float], None] | None = None,
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.paths = frozenset(paths)
        self.on_admit = on_admit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        slot, why = await self.limiter.acquire()
        if self.on_admit is not None:
            self.on_admit(why, time.perf_counter() - t0)
        if slot is None:
            lim = self.limiter
            if why == "queue_full":
                message = (
                    f"the server is already handling {lim.limit} requests (its --max-concurrency) with "
                    f"{lim.max_queue} more waiting (its --max-queue); retry shortly"
                )
            else:
                message = (
                    f"no slot came free within {lim.queue_timeout_s:g} s (the server's --queue-timeout; it "
                    f"handles {lim.limit} requests at once); retry shortly"
                )
            await send_error(scope, send, 503, "overloaded", message, {"Retry-After": "1"})
            return
        scope.setdefault("state", {})["slot"] = slot
        try:
            await self.app(scope, receive, send)
        finally:
            slot.release()


__all__ = ["ConcurrencyLimitMiddleware", "ConcurrencyLimiter", "Hold", "Slot"]
