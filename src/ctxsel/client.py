"""A client for ``ctxsel serve``: :func:`ctxsel.select`'s signature and result, the work on the server.

    >>> with ctxsel.Client("http://127.0.0.1:8000") as client:
    ...     sel = client.select("Who wrote it?", ["...", "..."], "top-k@3")
    ...     sel = await client.aselect(...)          # from async code, on one pooled connection

The chunks are checked here first, by the same rules as :func:`ctxsel.select` (a bad pool is the
same :class:`~ctxsel.errors.InputError`, before any request), and sent without their text coming
back: the result is a :class:`~ctxsel.types.Selection` over your own Chunk objects, with the
server's ids, scores, explanation, trace, usage and meta. A method's details (LDAR's band, SAGE's
verdicts) and an answer arrive in ``meta``, as the HTTP body has them. The server's scorer ranks
(``ctxsel serve --scorer``), so ``scorer=`` is not an argument here.

Errors: 422 is an :class:`~ctxsel.errors.InputError` in the server's words; any other error answer
is a :class:`~ctxsel.errors.ServiceError` with its status and code; a 503 (busy, or still loading
its scorer) is retried ``retries`` times after the server's Retry-After (at most ``max_wait``
seconds each); a server that cannot be reached is a ServiceError with status 0.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ctxsel.errors import InputError, InputTypeError, MissingExtraError, ServiceError, install_hint
from ctxsel.selectors.base import Selector
from ctxsel.types import ChunkLike, LLMUsage, Selection

UNREACHABLE = 0  #: a ServiceError's status when no HTTP answer came


def _httpx() -> Any:
    try:
        import httpx
    except ImportError as e:
        raise MissingExtraError(f"ctxsel.Client needs httpx: {install_hint('client')}") from e
    return httpx


class Client:
    """Selections from a ``ctxsel serve`` at ``base_url``; ``token`` is its bearer token
    (``CTXSEL_SERVE_TOKEN``), ``timeout`` the seconds one request may take."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 120.0,
        retries: int = 2,
        max_wait: float = 10.0,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InputError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        if retries < 0 or timeout <= 0 or max_wait < 0:
            raise InputError("retries and max_wait must be >= 0 and timeout > 0")
        self.base_url = base_url.rstrip("/")
        self.retries, self.max_wait = retries, max_wait
        self._settings: dict[str, Any] = {
            "base_url": self.base_url,
            "headers": {"Authorization": f"Bearer {token}"} if token else {},
            "timeout": timeout,
        }
        self._sync = _httpx().Client(**self._settings)
        self._async: Any = None  # made in the event loop of the first aselect

    # -- the API ------------------------------------------------------------------------------------

    def select(
        self,
        question: str,
        chunks: Sequence[ChunkLike],
        method: str | Selector = "adaptive-k",
        scores: Sequence[float] | Any | None = None,
        *,
        choices: Sequence[str] | None = None,
        expand: str | None = None,
        rerank: str | None = None,
        stages: str | Sequence[str] | None = None,
        **options: Any,
    ) -> Selection:
        """What :func:`ctxsel.select` returns for these arguments, selected by the server."""
        pool, body = self._request(question, chunks, method, scores, choices, expand, rerank, stages, options)
        for attempt in range(self.retries + 1):
            try:
                res = self._sync.post("/select", json=body)
            except _httpx().TransportError as e:
                raise self._unreachable(e) from e
            wait = self._retry_after(res, attempt)
            if wait is None:
                return self._selection(res, pool)
            time.sleep(wait)
        raise AssertionError("unreachable")  # the last attempt never retries

    async def aselect(
        self,
        question: str,
        chunks: Sequence[ChunkLike],
        method: str | Selector = "adaptive-k",
        scores: Sequence[float] | Any | None = None,
        *,
        choices: Sequence[str] | None = None,
        expand: str | None = None,
        rerank: str | None = None,
        stages: str | Sequence[str] | None = None,
        **options: Any,
    ) -> Selection:
        """:meth:`select` from async code, without blocking the event loop."""
        pool, body = self._request(question, chunks, method, scores, choices, expand, rerank, stages, options)
        for attempt in range(self.retries + 1):
            if self._async is None:
                self._async = _httpx().AsyncClient(**self._settings)
            try:
                res = await self._async.post("/select", json=body)
            except _httpx().TransportError as e:
                raise self._unreachable(e) from e
            wait = self._retry_after(res, attempt)
            if wait is None:
                return self._selection(res, pool)
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    def health(self) -> dict[str, Any]:
        """The server's /health body (``status`` is ``ok`` once its scorer is warm)."""
        try:
            res = self._sync.get("/health")
        except _httpx().TransportError as e:
            raise self._unreachable(e) from e
        body: dict[str, Any] = res.json()
        return body

    def close(self) -> None:
        """Close the connections (an async client's too, from sync code: prefer :meth:`aclose` in async code)."""
        self._sync.close()
        if self._async is not None:
            client, self._async = self._async, None
            try:
                asyncio.get_running_loop().create_task(client.aclose())
            except RuntimeError:  # no loop running: close it in one of its own
                asyncio.run(client.aclose())

    async def aclose(self) -> None:
        self._sync.close()
        if self._async is not None:
            client, self._async = self._async, None
            await client.aclose()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"

    # -- the wire -----------------------------------------------------------------------------------

    @staticmethod
    def _request(
        question: str,
        chunks: Sequence[ChunkLike],
        method: str | Selector,
        scores: Any,
        choices: Sequence[str] | None,
        expand: str | None,
        rerank: str | None,
        stages: str | Sequence[str] | None,
        options: Mapping[str, Any],
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The checked pool by id, and the /select body (the question and the rest the server checks)."""
        if "scorer" in options:
            raise InputError("the server's scorer ranks (ctxsel serve --scorer): Client.select takes no scorer")
        if not isinstance(method, str):
            raise InputTypeError("a Client sends a method spec string such as 'top-k@5', not a Selector object")
        from ctxsel.query import Query

        query = Query(question, chunks, scores, choices=choices)  # Python's checks, before the network
        body: dict[str, Any] = {
            "question": query.question,
            "chunks": [
                {"id": c.id, "text": c.text, "doc_id": c.doc_id, "position": c.position, "n_tokens": c.n_tokens}
                for c in query.chunks
            ],
            "method": method,
            "options": dict(options),
            "with_text": False,
        }
        if query.scores is not None:
            body["scores"] = [float(s) for s in query.scores]
        for key, value in (("choices", choices), ("expand", expand), ("rerank", rerank)):
            if value is not None:
                body[key] = list(value) if key == "choices" else value
        if stages is not None:
            body["stages"] = [stages] if isinstance(stages, str) else list(stages)
        return {c.id: c for c in query.chunks}, body

    def _retry_after(self, res: Any, attempt: int) -> float | None:
        """Seconds to wait before retrying a 503 (None: no retry; the answer is final)."""
        if res.status_code != 503 or attempt >= self.retries:
            return None
        try:
            return min(float(res.headers.get("Retry-After", "1")), self.max_wait)
        except ValueError:
            return min(1.0, self.max_wait)

    def _selection(self, res: Any, pool: Mapping[str, Any]) -> Selection:
        try:
            body = res.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise ServiceError(res.status_code, "not_json", f"{self.base_url} answered {res.status_code} without JSON")
        if res.status_code != 200:
            message = str(body.get("message", body))
            if res.status_code == 422:
                raise InputError(message)
            raise ServiceError(res.status_code, str(body.get("error", "error")), message)
        chunks = [pool[c["id"]] for c in body["chunks"]]
        reading = body["reading_order"]
        in_document_order = [c.id for c in sorted(chunks, key=lambda c: (c.doc_id, c.position))]
        return Selection(
            ids=list(body["ids"]),
            scores=[c["score"] for c in body["chunks"]],
            chunks=chunks,
            method=body["method"],
            config=body["config"],
            explanation=body["explanation"],
            n_candidates=body["n_candidates"],
            trace=body["trace"],
            usage=LLMUsage(**body["usage"]),
            meta=body["meta"],
            reading=None if reading == in_document_order else list(reading),
            abstained=body["abstained"],
            abstain_reason=body["abstain_reason"],
        )

    def _unreachable(self, e: Exception) -> ServiceError:
        return ServiceError(UNREACHABLE, "unreachable", f"no answer from {self.base_url}: {type(e).__name__}: {e}")


__all__ = ["UNREACHABLE", "Client"]
