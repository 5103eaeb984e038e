"""Settings of the HTTP service (standard library only)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ctxsel.errors import InputError

#: Paths anyone may call without the bearer token: liveness and the API description.
PUBLIC_PATHS = frozenset({"/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
#: Paths that do work and count against the concurrency limit.
LIMITED_PATHS = frozenset({"/select", "/explain", "/answer"})


@dataclass
class ServiceSettings:
    """What a ``ctxsel serve`` process enforces.

    - ``token``: when set, every path except :data:`PUBLIC_PATHS` needs
      ``Authorization: Bearer <token>`` (else 401).
    - ``max_body_bytes``: a larger request body gets 413, decided from
      ``Content-Length`` or from the bytes streamed so far, never by reading
      the rest of the body.
    - ``max_chunks`` / ``max_chars``: the work one request may ask for, counted
      after the server chunks a ``document``: at most this many chunks and
      this many characters of chunk text plus question (else 413). They bound
      the server's memory, which the body limit alone does not: a 30 MB body
      of one-line chunks costs gigabytes to tokenize and embed.
    - ``deadline_s``: a selection or answer still running after this many
      seconds gets 504, and its work is told to stop: scoring stops at the
      next batch, an LLM call in flight is abandoned. Its concurrency slot is
      free within ``release_grace_s`` of the deadline whatever the work does.
    - ``max_concurrency``: requests to /select and /answer in flight at once.
    - ``max_queue`` / ``queue_timeout_s``: requests past ``max_concurrency``
      wait, first come first served, in a queue of at most ``max_queue``
      places for at most ``queue_timeout_s`` seconds; a request that finds
      the queue full, or waits longer, gets 503 with ``Retry-After``
      (``max_queue=0``: no queue, 503 at once).
    - ``body_timeout_s``: the whole request body must arrive within this many seconds of its
      headers (else 408, and the connection is closed). It is read, and checked against
      ``max_body_bytes``, before the request asks for a concurrency slot, so a slow client holds
      its own connection, never a slot.
    - ``max_header_bytes`` / ``max_headers``: a request whose target and header names and values
      add up to more bytes than this, or that has more headers, gets 431; a header section
      still incomplete past twice ``max_header_bytes`` is refused as it arrives.
    - ``scorer`` / ``model`` / ``threads``: how chunks are scored when a
      request brings neither scores nor embeddings (``scorer``: a name or a spec with
      options, e.g. ``cascade[head=100]``; None: ``dense`` when ``model`` is given, else the
      default scorer, :func:`ctxsel.scoring.default_scorer`).
    - ``reader``: an LLM client for /answer and LLM-routed methods (None: /answer
      answers 501). ``reader_name`` is what /health reports.
    - ``ldar_policy``: the LDAR checkpoint the ``ldar`` method uses (None: the
      bundled, sha256-checked policy); clients cannot name a file on the server.
    """

    token: str | None = None
    max_body_bytes: int = 32 * 1024 * 1024
    max_chunks: int = 10_000
    max_chars: int = 4_000_000
    deadline_s: float = 30.0
    release_grace_s: float = 1.0
    max_concurrency: int = 4
    max_queue: int = 16
    queue_timeout_s: float = 5.0
    body_timeout_s: float = 10.0
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    scorer: str | None = None
    model: str | None = None
    threads: int | None = None
    reader: Any = None
    reader_name: str | None = None
    ldar_policy: str | None = None

    def __post_init__(self) -> None:
        if self.token is not None and not self.token:
            raise InputError("the bearer token is empty: set a non-empty token or none at all")
        if self.token is not None and not self.token.isascii():
            raise InputError("the bearer token must be ASCII (it travels in an HTTP header)")
        if isinstance(self.max_body_bytes, bool) or not isinstance(self.max_body_bytes, int) or self.max_body_bytes < 1:
            raise InputError(f"max_body_bytes must be a positive integer, got {self.max_body_bytes!r}")
        for name in ("max_chunks", "max_chars", "max_header_bytes", "max_headers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        if not (isinstance(self.deadline_s, (int, float)) and math.isfinite(self.deadline_s) and self.deadline_s > 0):
            raise InputError(f"deadline_s must be a positive number of seconds, got {self.deadline_s!r}")
        if not (isinstance(self.release_grace_s, (int, float)) and 0 <= self.release_grace_s <= 60):
            raise InputError(f"release_grace_s must be between 0 and 60 seconds, got {self.release_grace_s!r}")
        if (
            isinstance(self.max_concurrency, bool)
            or not isinstance(self.max_concurrency, int)
            or self.max_concurrency < 1
        ):
            raise InputError(f"max_concurrency must be an integer >= 1, got {self.max_concurrency!r}")
        if isinstance(self.max_queue, bool) or not isinstance(self.max_queue, int) or self.max_queue < 0:
            raise InputError(f"max_queue must be an integer >= 0, got {self.max_queue!r}")
        if not (
            isinstance(self.queue_timeout_s, (int, float))
            and not isinstance(self.queue_timeout_s, bool)
            and math.isfinite(self.queue_timeout_s)
            and self.queue_timeout_s > 0
        ):
            raise InputError(f"queue_timeout_s must be a positive number of seconds, got {self.queue_timeout_s!r}")
        if not (
            isinstance(self.body_timeout_s, (int, float))
            and not isinstance(self.body_timeout_s, bool)
            and math.isfinite(self.body_timeout_s)
            and self.body_timeout_s > 0
        ):
            raise InputError(f"body_timeout_s must be a positive number of seconds, got {self.body_timeout_s!r}")
        from ctxsel.scoring import default_scorer, parse_scorer_spec
        from ctxsel.scoring.registry import available_scorers

        if self.scorer is None:
            self.scorer = "dense" if self.model is not None else default_scorer()
        if not isinstance(self.scorer, str):
            raise InputError(f"scorer must be a scorer name or spec such as 'dense', got {self.scorer!r}")
        name, _ = parse_scorer_spec(self.scorer)  # a spec with options: cascade[head=100]
        if name not in available_scorers():
            raise InputError(f"unknown scorer {name!r}; choose {', '.join(available_scorers())}")

    @property
    def scorer_spec(self) -> str:
        """The scorer spec the service ranks with (``scorer``, resolved to the default when None)."""
        assert self.scorer is not None  # set by __post_init__
        return self.scorer
