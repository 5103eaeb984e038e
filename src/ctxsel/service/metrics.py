"""Prometheus metrics of the service, served at ``GET /metrics`` (text format 0.0.4).

Counted: requests by route, method and status; their latency (histogram, by
route); requests in flight and waiting for a slot; queue refusals and waits;
texts the dense scorer found in its memory versus looked up (its SQLite cache
or the model); LLM calls (answered from the response cache or not) and their
tokens. Routes outside the service's own are counted as ``other``, so a scan
of random paths cannot grow the label set.

With ``--workers N`` each worker is a process of its own: the counts go
through prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``,
set by ``ctxsel serve``), and any worker's /metrics answers for all of them.

prometheus_client is in the ``serve`` extra; without it the service runs and
/metrics answers 501 with the install hint.
"""

from __future__ import annotations

import os
from typing import Any

from ctxsel.service.settings import LIMITED_PATHS, PUBLIC_PATHS

#: routes that get their own label value; anything else is "other"
ROUTES = frozenset({*LIMITED_PATHS, *PUBLIC_PATHS, "/metrics"})
#: seconds: a /select with given scores takes milliseconds, one with an LLM seconds
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def available() -> bool:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class Metrics:
    """The service's metrics in a registry of their own (several apps in one process do not mix)."""

    def __init__(self) -> None:
        self.enabled = available()
        if not self.enabled:
            return
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "ctxsel_http_requests", "HTTP requests answered, by route, method and status.",
            ["route", "method", "status"], registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            "ctxsel_http_request_duration_seconds", "Time from the request's arrival to its last byte, by route.",
            ["route"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.in_flight = Gauge(
            "ctxsel_requests_in_flight", "/select and /answer requests holding a slot.",
            registry=r, multiprocess_mode="livesum",
        )  # fmt: skip
        self.queued = Gauge(
            "ctxsel_requests_queued", "/select and /answer requests waiting for a slot.",
            registry=r, multiprocess_mode="livesum",
        )  # fmt: skip
        self.rejections = Counter(
            "ctxsel_queue_rejections", "Requests refused with 503: queue_full or queue_timeout.",
            ["reason"], registry=r,
        )  # fmt: skip
        self.queue_wait = Histogram(
            "ctxsel_queue_wait_seconds", "Time a request waited for a slot (0 when one was free).",
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.embedding_texts = Counter(
            "ctxsel_embedding_texts", "Chunk texts the server's dense scorer scored: "
            "source=memory (its in-memory vectors) or lookup (its SQLite cache or the model).",
            ["source"], registry=r,
        )  # fmt: skip
        self.llm_calls = Counter(
            "ctxsel_llm_calls", "Calls to the server's reader LLM; cached=true: answered by its response cache.",
            ["cached"], registry=r,
        )  # fmt: skip
        self.llm_tokens = Counter(
            "ctxsel_llm_tokens", "Tokens of the reader LLM's calls (direction=in: prompt, out: completion).",
            ["direction"], registry=r,
        )  # fmt: skip
        for reason in ("queue_full", "queue_timeout"):
            self.rejections.labels(reason)
        for source in ("memory", "lookup"):
            self.embedding_texts.labels(source)
        for cached in ("false", "true"):
            self.llm_calls.labels(cached)
        for direction in ("in", "out"):
            self.llm_tokens.labels(direction)

    # -- what the service reports --------------------------------------------------

    def request(self, path: str, method: str, status: int, seconds: float) -> None:
        if not self.enabled:
            return
        route = path if path in ROUTES else "other"
        self.requests.labels(route, method if method in _METHODS else "other", str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def slots(self, in_flight: int, waiting: int) -> None:
        if self.enabled:
            self.in_flight.set(in_flight)
            self.queued.set(waiting)

    def admitted(self, why: str, waited_s: float) -> None:
        if not self.enabled:
            return
        if why:
            self.rejections.labels(why).inc()
        else:
            self.queue_wait.observe(waited_s)

    def embedded(self, from_memory: int, looked_up: int) -> None:
        if self.enabled:
            self.embedding_texts.labels("memory").inc(from_memory)
            self.embedding_texts.labels("lookup").inc(looked_up)

    def llm_reply(self, reply: Any) -> None:
        if not self.enabled:
            return
        for one in reply if isinstance(reply, list) else [reply]:
            usage = getattr(one, "usage", None)
            self.llm_calls.labels("true" if getattr(one, "cached", False) else "false").inc()
            if usage is not None:
                self.llm_tokens.labels("in").inc(max(0, int(getattr(usage, "tokens_in", 0) or 0)))
                self.llm_tokens.labels("out").inc(max(0, int(getattr(usage, "tokens_out", 0) or 0)))

    # -- the scrape --------------------------------------------------------------

    def exposition(self) -> bytes:
        """The text a scrape gets: this process's registry, or every worker's in multiprocess mode."""
        from prometheus_client import CollectorRegistry, generate_latest

        path = multiprocess_dir()
        if path is None:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        merged = CollectorRegistry()
        collector: Any = multiprocess.MultiProcessCollector  # untyped in prometheus_client
        collector(merged, path=path)
        return generate_latest(merged)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS", "ROUTES", "Metrics", "available", "multiprocess_dir"]
