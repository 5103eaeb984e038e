"""The FastAPI application: ``create_app(settings) -> ASGI app``.

    from ctxsel.service import ServiceSettings, create_app
    app = create_app(ServiceSettings(token="s3cret", scorer="keywords"))
    # uvicorn.run(app) -- or `ctxsel serve`, which also sets up JSON logs

Routes: POST /select, POST /answer, GET /health; the OpenAPI schema at
/openapi.json (docs at /docs). Selection and reading run in worker threads
under the per-request deadline; everything else is in the middleware
(:mod:`ctxsel.service.middleware`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic_core import from_json
from starlette.exceptions import HTTPException as StarletteHTTPException

from ctxsel import __version__
from ctxsel.chunking import chunk_text
from ctxsel.llm.base import LLMError
from ctxsel.selectors import get_selector, parse_spec
from ctxsel.service.middleware import (
    BearerAuthMiddleware,
    BodySizeLimitMiddleware,
    ConcurrencyLimiter,
    ConcurrencyLimitMiddleware,
    RequestLogMiddleware,
    error_dict,
    log,
    request_id,
)
from ctxsel.service.models import AnswerOut, AnswerRequest, ErrorOut, HealthOut, SelectionOut, SelectRequest
from ctxsel.service.settings import LIMITED_PATHS, PUBLIC_PATHS, ServiceSettings
from ctxsel.types import Chunk, Selection, as_chunks

T = TypeVar("T")

_ERRORS = {
    401: "missing or wrong bearer token",
    413: "request body over the server's limit (--max-body-bytes)",
    422: "malformed body, or input the method cannot use (the message says which)",
    500: "internal error (the log line with this request id has the traceback)",
    503: "already handling --max-concurrency requests; retry later",
    504: "the work took longer than the server's deadline (--deadline)",
}
_ANSWER_ERRORS = {
    **_ERRORS,
    501: "this server has no reader (start it with --reader local|URL)",
    502: "the reader LLM failed (the message quotes its error)",
}


def _responses(codes: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorOut, "description": text} for code, text in codes.items()}


class ServiceError(StarletteHTTPException):
    """An error the client gets as ``{"error": code, "message": ...}``."""

    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(status, message)
        self.error = error


def _plain(x: Any) -> Any:
    """numpy scalars/arrays (in selector meta) as JSON-able Python values."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return _plain(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def _error_response(request: Request, status: int, error: str, message: str,
                    headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    rid = request_id(request.scope)
    return JSONResponse(status_code=status, headers=headers, content=error_dict(status, error, message, rid, **extra))


#: Bodies above this are parsed in a worker thread, so a large one does not stall the event loop.
_THREAD_PARSE_BYTES = 64 * 1024


def _parse_json(body: bytes) -> Any:
    """pydantic-core's JSON parser (about 4x faster than ``json.loads`` on a
    9 MB body of embeddings); its errors become JSONDecodeError, which
    FastAPI answers as a validation error."""
    try:
        return from_json(body)
    except ValueError as e:
        raise json.JSONDecodeError(str(e), "", 0) from None


class FastJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            if len(body) > _THREAD_PARSE_BYTES:
                self._json = await anyio.to_thread.run_sync(_parse_json, body)
            else:
                self._json = _parse_json(body)
        return self._json


class FastJSONRoute(APIRoute):
    """FastAPI's documented custom-route pattern: the same route, with
    :class:`FastJSONRequest` as its request (only the JSON parser changes)."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def with_fast_json(request: Request) -> Any:
            return await handler(FastJSONRequest(request.scope, request.receive))

        return with_fast_json


def _validation_message(errors: list[dict[str, Any]]) -> str:
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        msg = e.get("msg", "invalid")
        if e.get("type") == "json_invalid":
            loc = "body"
            msg = f"not valid JSON: {(e.get('ctx') or {}).get('error', 'decode error')}"
        parts.append(f"{loc}: {msg}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more


class Service:
    """Holds the settings, the lazily built scorer and the concurrency limiter."""

    def __init__(self, settings: ServiceSettings, scorer: Any = None) -> None:
        self.settings = settings
        self.limiter = ConcurrencyLimiter(settings.max_concurrency)
        self._scorer = scorer
        self._scorer_lock = threading.Lock()  # one model, one SQLite cache: score one request at a time

    # -- building blocks ------------------------------------------------------

    def scorer(self) -> Any:
        if self._scorer is None:
            from ctxsel.scoring import get_scorer

            s = self.settings
            opts: dict[str, Any] = ({"model": s.model, "num_threads": s.threads} if s.scorer in ("dense", "hybrid")
                                    else {})
            self._scorer = get_scorer(s.scorer, **opts)
        return self._scorer

    @staticmethod
    def chunks(req: SelectRequest) -> list[Chunk]:
        if req.document is not None:
            chunks = chunk_text(req.document, req.chunking)
            if not chunks:
                raise ValueError("the document has no text to select from")
            return chunks
        return as_chunks(  # strings get ids "0", "1", ...; ids must be unique
            item if isinstance(item, str) else Chunk(
                id=item.id, text=item.text, doc_id=item.doc_id,
                position=i if item.position is None else item.position,
                n_tokens=-1 if item.n_tokens is None else item.n_tokens, meta=item.meta,
            )
            for i, item in enumerate(req.chunks or [])
        )

    def selector(self, req: SelectRequest) -> Any:
        name, spec_options = parse_spec(req.method)
        options = dict(req.options)
        if "llm" in options:
            raise ValueError("'llm' is not an option: LLM-routed methods use the server's reader")
        if name == "ldar":
            if "policy" in spec_options or "policy" in options:
                raise ValueError("the LDAR policy is the server's (--ldar-policy); a request cannot name a file")
            if not self.settings.ldar_policy:
                raise ValueError("this server has no LDAR policy: start it with --ldar-policy PATH")
            options["policy"] = self.settings.ldar_policy
        selector = get_selector(req.method, llm=self.settings.reader, **options)
        if selector.needs_llm and self.settings.reader is None:
            raise ValueError(f"method {name!r} calls an LLM and this server has no reader (start it with --reader)")
        return selector

    def scores(self, req: SelectRequest, chunks: list[Chunk], selector: Any) -> Any:
        n = len(chunks)
        if req.scores is not None:
            if len(req.scores) != n:
                raise ValueError(f"got {len(req.scores)} scores for {n} chunks; they must match")
            return np.asarray(req.scores, dtype=np.float64)
        if req.embeddings is not None:
            if len(req.embeddings) != n:
                raise ValueError(f"got {len(req.embeddings)} embeddings for {n} chunks; they must match")
            q = np.asarray(req.query_embedding, dtype=np.float32)
            try:
                emb = np.asarray(req.embeddings, dtype=np.float32)
            except ValueError:
                raise ValueError("every embedding must have the same dimension") from None
            if n and (emb.ndim != 2 or emb.shape[1] != q.shape[0]):
                raise ValueError(
                    f"embeddings have dimension {emb.shape[-1] if emb.ndim == 2 else '?'} but query_embedding has {q.shape[0]}"
                )
            if not n:
                return np.zeros(0)
            if not (np.isfinite(emb).all() and np.isfinite(q).all()):
                raise ValueError("embeddings contain NaN or infinite values")
            qn = float(np.linalg.norm(q))
            if qn == 0.0:
                raise ValueError("query_embedding is all zeros: cosine similarity is undefined")
            norms = np.linalg.norm(emb, axis=1)
            norms[norms == 0] = 1.0  # a zero chunk vector scores 0
            return (emb @ (q / qn)) / norms
        if not selector.needs_scores or not chunks:
            return None
        with self._scorer_lock:
            return self.scorer().score(req.question, chunks)

    def select(self, req: SelectRequest) -> Selection:
        selector = self.selector(req)
        chunks = self.chunks(req)
        scores = self.scores(req, chunks, selector)
        if scores is None and not chunks:
            scores = []
        if req.expand:
            return self.expanded(req, chunks, scores, selector)
        return selector.select(req.question, chunks, scores)

    def expanded(self, req: SelectRequest, chunks: list[Chunk], scores: Any, selector: Any) -> Selection:
        """The request's ``expand``: re-rank, then cut (a second hop scores with the server's scorer)."""
        from ctxsel.expansion import annotate, expand, parse_expansion

        expansion = parse_expansion(req.expand)
        if expansion is None or not chunks:
            return selector.select(req.question, chunks, scores)
        if not selector.needs_scores:
            raise ValueError(f"expand={req.expand!r} re-ranks scores, and method {selector.name!r} uses none")
        if expansion.hop is not None:
            with self._scorer_lock:
                out = expand(req.question, chunks, scores, self.scorer(), expansion)
        else:
            out = expand(req.question, chunks, scores, None, expansion)
        return annotate(selector.select(req.question, chunks, out.scores), chunks, out, expansion)

    # -- running work under the deadline ----------------------------------------

    async def run(self, request: Request, fn: Callable[[], T]) -> T:
        """``fn()`` in a worker thread; 504 after the deadline, mapped errors."""
        slot = request.scope.get("state", {}).get("slot")
        if slot is not None:
            slot.hold()

        def work() -> T:
            try:
                return fn()
            finally:
                if slot is not None:
                    slot.release()

        try:
            with anyio.fail_after(self.settings.deadline_s):
                return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except TimeoutError:
            raise ServiceError(
                504, "deadline_exceeded",
                f"the request took longer than the server's {self.settings.deadline_s:g}-second deadline "
                "(--deadline); send fewer chunks, precomputed scores, or a cheaper method",
            ) from None
        except LLMError as e:
            raise ServiceError(502, "llm_error", str(e)) from None
        except (ValueError, TypeError, KeyError) as e:
            message = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
            raise ServiceError(422, "invalid_input", message or type(e).__name__) from None
        except ImportError as e:
            log.error("missing dependency",
                      extra={"fields": {"request_id": request_id(request.scope), "error": str(e)}})
            raise ServiceError(500, "server_misconfigured", str(e)) from None
        except Exception:
            rid = request_id(request.scope)
            log.exception("unhandled error", extra={"fields": {"request_id": rid}})
            raise ServiceError(500, "internal_error",
                               f"internal error; the server log has the details (request id {rid})") from None


def create_app(settings: ServiceSettings | None = None, *, scorer: Any = None) -> FastAPI:
    """The ASGI app for ``settings`` (a custom ``scorer`` replaces the configured one)."""
    settings = settings or ServiceSettings()
    service = Service(settings, scorer)
    app = FastAPI(
        title="ctxsel",
        version=__version__,
        description="Decide which chunks of a long context a language model should read. "
        "Errors are JSON: {error, message, status, request_id}.",
    )
    app.state.service = service
    app.router.route_class = FastJSONRoute
    bearer = [Depends(HTTPBearer(auto_error=False, description="the server's token (when it has one)"))]

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI could not decode the body
            cause = exc.__cause__
            what = "not UTF-8" if isinstance(cause, UnicodeDecodeError) else type(cause).__name__
            return _error_response(request, 422, "invalid_body",
                                   f"the body could not be read as JSON ({what}: {cause}); send UTF-8 JSON")
        error = getattr(exc, "error", None) or {404: "not_found", 405: "method_not_allowed",
                                                413: "body_too_large"}.get(exc.status_code, "http_error")
        return _error_response(request, exc.status_code, error, str(exc.detail), headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        raw = list(exc.errors())
        errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                  for e in raw]
        return _error_response(request, 422, "invalid_body", _validation_message(raw), detail=errors)

    @app.get("/health", response_model=HealthOut, tags=["service"])
    async def health() -> HealthOut:
        """Liveness and load: never needs the token, never counts against the limit."""
        return HealthOut(status="ok", version=__version__, reader=settings.reader_name, scorer=settings.scorer,
                         in_flight=service.limiter.in_flight, max_concurrency=settings.max_concurrency)

    @app.post("/select", response_model=SelectionOut, responses=_responses(_ERRORS), dependencies=bearer,
              tags=["selection"])
    async def select(req: SelectRequest, request: Request) -> Any:
        """Select the chunks a reader should see: the Selection as JSON."""
        return await service.run(request, lambda: _plain(service.select(req).to_dict(with_text=req.with_text)))

    @app.post("/answer", response_model=AnswerOut, responses=_responses(_ANSWER_ERRORS), dependencies=bearer,
              tags=["selection"])
    async def answer(req: AnswerRequest, request: Request) -> Any:
        """Select, then answer with the server's reader LLM (``--reader``)."""
        if settings.reader is None:
            raise ServiceError(501, "no_reader", "this server has no reader: start it with --reader local|URL")

        def work() -> dict[str, Any]:
            from ctxsel.reader import Reader

            sel = service.select(req)
            reader = Reader(settings.reader, req.template, max_answer_tokens=req.max_answer_tokens)
            return _plain(reader.answer(req.question, sel).to_dict(with_text=req.with_text))

        return await service.run(request, work)

    # outermost last: RequestLog -> BearerAuth -> BodySizeLimit -> ConcurrencyLimit -> routes
    app.add_middleware(ConcurrencyLimitMiddleware, limiter=service.limiter, paths=LIMITED_PATHS)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.token is not None:
        app.add_middleware(BearerAuthMiddleware, token=settings.token, public_paths=PUBLIC_PATHS)
    app.add_middleware(RequestLogMiddleware, logger=log)
    return app


__all__ = ["Service", "ServiceError", "create_app"]
