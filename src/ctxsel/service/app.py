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

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

import anyio
import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic_core import from_json
from starlette.exceptions import HTTPException as StarletteHTTPException

from ctxsel._version import __version__
from ctxsel.chunking import chunk_text
from ctxsel.datasets.multiple_choice import question_with_options
from ctxsel.errors import CtxselError, InputError, MissingExtraError
from ctxsel.llm.base import LLMError
from ctxsel.pipeline import Pipeline
from ctxsel.scoring.base import cosine_scores
from ctxsel.selectors import get_selector, get_selector_class, parse_spec
from ctxsel.service.cancel import CancellableLLM, Cancelled, CancelToken, score_in_batches
from ctxsel.service.memory import trim_heap
from ctxsel.service.middleware import (
    BearerAuthMiddleware,
    BodySizeLimitMiddleware,
    BodyTooLarge,
    ConcurrencyLimiter,
    ConcurrencyLimitMiddleware,
    Hold,
    ReadinessMiddleware,
    RequestLogMiddleware,
    error_dict,
    log,
    request_id,
)
from ctxsel.service.models import AnswerOut, AnswerRequest, ErrorOut, HealthOut, SelectionOut, SelectRequest
from ctxsel.service.options import check_options
from ctxsel.service.settings import LIMITED_PATHS, PUBLIC_PATHS, ServiceSettings
from ctxsel.types import Chunk, Selection, as_chunks, jsonable

T = TypeVar("T")

_ERRORS = {
    401: "missing or wrong bearer token",
    413: "request body over the server's limit (--max-body-bytes), or more chunks or text than it takes "
    "in one request (--max-chunks, --max-chars)",
    422: "malformed body, or input the method cannot use (the message says which)",
    500: "internal error (the log line with this request id has the traceback)",
    503: "already handling --max-concurrency requests, or still loading its scorer; retry after Retry-After seconds",
    504: "the work took longer than the server's deadline (--deadline)",
}
_ROUTES = "POST /select, POST /answer, GET /health and GET /openapi.json (docs at /docs)"
_ANSWER_ERRORS = {
    **_ERRORS,
    501: "this server has no reader (start it with --reader local|URL)",
    502: "the reader LLM failed (the message quotes its error)",
}


def _responses(codes: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorOut, "description": text} for code, text in codes.items()}


class ServiceError(StarletteHTTPException):
    """An error the client gets as ``{"error": code, "message": ...}``."""

    def __init__(self, status: int, error: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(status, message, headers=headers)
        self.error = error


class RequestTooLarge(Exception):
    """More chunks or characters than the server takes in one request (413)."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


#: Options a request cannot set: the server's own objects and files.
_SERVER_ONLY_OPTIONS = {
    "llm": "LLM-routed methods use the server's reader (--reader)",
    "policy": "the LDAR policy is the server's (--ldar-policy); a request cannot name a file",
    "adapter": "a request cannot name a file on the server",
    "embed": "the server embeds with its own scorer",
}


def _error_response(
    request: Request, status: int, error: str, message: str, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    rid = request_id(request.scope)
    return JSONResponse(status_code=status, headers=headers, content=error_dict(status, error, message, rid, **extra))


#: After a request with a body above this, freed heap memory goes back to the system (see service.memory).
_TRIM_AFTER_BYTES = 256 * 1024
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


_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
    bytes: "bytes that are not JSON",
}


def _validation_message(errors: list[dict[str, Any]]) -> str:
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        msg = e.get("msg", "invalid")
        if loc == "body" and e.get("type") in ("model_attributes_type", "dict_type", "model_type"):
            got = _JSON_KINDS.get(type(e.get("input")), "something else")
            msg = 'must be a JSON object like {"question": "...", "chunks": ["..."]}, got ' + got
        if e.get("type") == "json_invalid":
            loc = "body"
            msg = f"not valid JSON: {(e.get('ctx') or {}).get('error', 'decode error')}"
            if "hex escape" in msg:
                msg += r" (a lone UTF-16 surrogate such as \ud800 is not text: pair it or remove it)"
        parts.append(f"{loc}: {msg}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more


class Service:
    """Holds the settings, the scorer (warmed at start-up, or built on first
    use), its readiness and the concurrency limiter."""

    def __init__(self, settings: ServiceSettings, scorer: Any = None) -> None:
        self.settings = settings
        self.limiter = ConcurrencyLimiter(settings.max_concurrency)
        self._scorer = scorer
        self._scorer_lock = threading.Lock()  # one model, one SQLite cache: score one request at a time
        #: "ok", or "starting" while the scorer loads (start_warm_up), or "failed" if it could not load
        self.status: Literal["ok", "starting", "failed"] = "ok"
        self.status_message: str | None = None
        self._warm_up_thread: threading.Thread | None = None
        #: the dense scorer keeps every text's vector in memory; past this many it forgets them (about
        #: 1.5 KB of vector plus the text each): a server's memory must not grow with every new document
        self.max_rows_in_memory = 50_000
        #: called (from the warm-up thread) if the scorer fails to load; ``ctxsel serve`` stops the server
        self.on_warm_up_failure: Callable[[], None] | None = None

    # -- building blocks ------------------------------------------------------

    def scorer(self) -> Any:
        if self._scorer is None:
            from ctxsel.scoring import get_scorer

            s = self.settings
            opts: dict[str, Any] = (
                {"model": s.model, "num_threads": s.threads} if s.scorer in ("dense", "hybrid") else {}
            )
            self._scorer = get_scorer(s.scorer, **opts)
        return self._scorer

    def check_size(self, question: str, texts: Sequence[str], what: str) -> None:
        """413 for a request over ``max_chunks`` or ``max_chars`` (question plus chunk text)."""
        s = self.settings
        if len(texts) > s.max_chunks:
            raise RequestTooLarge(
                "too_many_chunks",
                f"the request has {len(texts):,} {what}; this server takes at most {s.max_chunks:,} per request "
                "(its --max-chunks, ServiceSettings.max_chunks): send fewer chunks, or split the request",
            )
        n_chars = len(question) + sum(len(t) for t in texts)
        if n_chars > s.max_chars:
            raise RequestTooLarge(
                "too_much_text",
                f"the request has {n_chars:,} characters of question and chunk text; this server takes at most "
                f"{s.max_chars:,} per request (its --max-chars, ServiceSettings.max_chars): send fewer or "
                "shorter chunks",
            )

    def chunks(self, req: SelectRequest) -> list[Chunk]:
        if req.document is not None:
            self.check_size(req.question, [req.document], "characters")  # the text limit, before chunking it
            chunks = chunk_text(req.document, req.chunking, headings=req.headings)
            if not chunks:
                raise InputError("the document has no text to select from")
            self.check_size(req.question, [c.text for c in chunks], f"chunks (from the document, by {req.chunking})")
            return chunks
        items = req.chunks or []
        self.check_size(req.question, [item if isinstance(item, str) else item["text"] for item in items], "chunks")
        return as_chunks(  # strings get ids "0", "1", ...; ids must be unique
            item
            if isinstance(item, str)
            else Chunk(
                id=item["id"],
                text=item["text"],
                doc_id=item.get("doc_id", "doc"),
                position=i if (position := item.get("position")) is None else position,
                n_tokens=-1 if (n := item.get("n_tokens")) is None else n,
                meta=item.get("meta") or {},
            )
            for i, item in enumerate(items)
        )

    def selector(self, req: SelectRequest, token: CancelToken) -> Any:
        name, spec_options = parse_spec(req.method)
        options = dict(req.options)
        for key in sorted(_SERVER_ONLY_OPTIONS.keys() & (set(spec_options) | set(options))):
            raise InputError(f"'{key}' is not an option a request can set: {_SERVER_ONLY_OPTIONS[key]}")
        cls = get_selector_class(name)  # imports the method's module
        if cls.needs_llm and self.settings.reader is None:
            raise InputError(
                f"method {name!r} calls an LLM and this server has no reader: start the server with "
                "`ctxsel serve --reader local` (the bundled model) or `--reader URL --reader-model NAME` "
                "(an OpenAI-compatible server), or use a method that needs none (adaptive-k, top-k, ...)"
            )
        check_options(name, cls, spec_options, prefix=f"method {req.method!r}: ")
        check_options(name, cls, options)
        llm = None if self.settings.reader is None else CancellableLLM(self.settings.reader, token)
        # no --ldar-policy: the method's own default (ldar: the bundled, sha256-checked policy)
        resources = {"policy": self.settings.ldar_policy} if self.settings.ldar_policy else None
        return get_selector(req.method, llm=llm, resources=resources, **options)

    def given_scores(self, req: SelectRequest, n: int) -> np.ndarray | None:
        """The request's own relevance: ``scores``, or cosine similarity of its ``embeddings``;
        None when it brings neither (the server's scorer then scores, if the method needs it)."""
        if req.scores is not None:
            if len(req.scores) != n:
                raise InputError(f"got {len(req.scores)} scores for {n} chunks; they must match")
            return np.asarray(req.scores, dtype=np.float64)
        if req.embeddings is not None:
            if len(req.embeddings) != n:
                raise InputError(f"got {len(req.embeddings)} embeddings for {n} chunks; they must match")
            assert req.query_embedding is not None  # the request model checks they come together
            return cosine_scores(req.query_embedding, req.embeddings)
        return None

    def select(self, req: SelectRequest, token: CancelToken) -> Selection:
        chunks = self.chunks(req)
        pipeline = Pipeline(self.selector(req, token), _ServerScorer(self, token), expand=req.expand or None)
        scored = pipeline.score(req.question, chunks, self.given_scores(req, len(chunks)))
        token.check()
        return pipeline.select(req.question, chunks, scored=scored, choices=req.choices)

    # -- running work under the deadline ----------------------------------------

    async def run(self, request: Request, fn: Callable[[CancelToken], T]) -> T:
        """``fn(token)`` in a worker thread; 504 at the deadline, mapped errors.

        At the deadline the token is set (the work stops at its next check)
        and the client gets 504 at once. The worker's hold on the request's
        concurrency slot is dropped when the worker ends, or
        ``release_grace_s`` after the deadline if it has not ended by then
        (a step that cannot be interrupted: one LLM call, one scoring batch).
        """
        slot = request.scope.get("state", {}).get("slot")
        hold = slot.hold() if slot is not None else None
        token = CancelToken()
        declared = request.headers.get("content-length", "")
        large = not declared.isdigit() or int(declared) > _TRIM_AFTER_BYTES

        def work() -> T:
            try:
                return fn(token)
            finally:
                if large:
                    trim_heap()
                if hold is not None:
                    hold.release()

        try:
            with anyio.fail_after(self.settings.deadline_s):
                return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except TimeoutError:
            token.cancel()
            if hold is not None:
                rid = request_id(request.scope)
                asyncio.get_running_loop().call_later(self.settings.release_grace_s, self._release_late, hold, rid)
            raise ServiceError(
                504,
                "deadline_exceeded",
                f"the request took longer than the server's {self.settings.deadline_s:g}-second deadline "
                "(--deadline); its work was stopped. Send fewer chunks, precomputed scores, or a cheaper method",
            ) from None
        except Cancelled:  # cancelled without a timeout here: cannot happen, but never a 500
            raise ServiceError(504, "deadline_exceeded", "the request's work was stopped at its deadline") from None
        except RequestTooLarge as e:
            raise ServiceError(413, e.error, str(e)) from None
        except LLMError as e:
            raise ServiceError(502, "llm_error", str(e)) from None
        except MissingExtraError as e:  # the server lacks an extra: its operator's to fix, not the client's
            log.error(
                "missing dependency", extra={"fields": {"request_id": request_id(request.scope), "error": str(e)}}
            )
            raise ServiceError(500, "server_misconfigured", str(e)) from None
        except CtxselError as e:
            raise ServiceError(422, "invalid_input", str(e) or type(e).__name__) from None
        except Exception:  # a bug: 500 with the request id, the traceback in the server's log
            rid = request_id(request.scope)
            log.exception("unhandled error", extra={"fields": {"request_id": rid}})
            raise ServiceError(
                500, "internal_error", f"internal error; the server log has the details (request id {rid})"
            ) from None

    @staticmethod
    def _release_late(hold: Hold, rid: str | None) -> None:
        if hold.release():
            log.warning(
                "work past its deadline is still running; its concurrency slot is freed",
                extra={"fields": {"request_id": rid}},
            )

    # -- start-up -----------------------------------------------------------------

    def start_warm_up(self) -> None:
        """Build the scorer now (a bad --model fails here, at start-up) and load
        and warm it in a background thread; until it is done, /health says
        "starting" and /select and /answer answer 503 with Retry-After."""
        scorer = self.scorer()
        self.status, self.status_message = "starting", "loading and warming the scorer"
        self._warm_up_thread = threading.Thread(
            target=self._warm_up, args=(scorer,), name="ctxsel-warm-up", daemon=True
        )
        self._warm_up_thread.start()

    def wait_for_warm_up(self, timeout: float = 60.0) -> None:
        """Wait for a warm-up still under way (at shutdown: a model half-loaded in a daemon thread
        can abort the interpreter on exit)."""
        if self._warm_up_thread is not None:
            self._warm_up_thread.join(timeout)

    def _warm_up(self, scorer: Any) -> None:
        t0 = time.perf_counter()
        try:
            with self._scorer_lock:
                # a scorer that loads a model lazily (dense) loads it on a cache miss only: encode once directly
                encode = getattr(getattr(scorer, "model", None), "encode", None)
                if callable(encode):
                    encode(["ctxsel loads and warms its model at start-up."])
                scorer.score("Which scorer is this?", [Chunk(id="warm-up", text="ctxsel warms its scorer.")])
        except Exception as e:
            self.status, self.status_message = "failed", f"the scorer failed to load: {type(e).__name__}: {e}"
            log.error(
                "scorer failed to load",
                exc_info=log.isEnabledFor(logging.DEBUG),
                extra={"fields": {"scorer": self.settings.scorer, "error": self.status_message}},
            )
            if self.on_warm_up_failure is not None:
                self.on_warm_up_failure()
            return
        self.status, self.status_message = "ok", None
        log.info(
            "ready", extra={"fields": {"scorer": self.settings.scorer, "warm_up_s": round(time.perf_counter() - t0, 2)}}
        )

    def refusal(self) -> tuple[str, str] | None:
        """(error code, message) while the server cannot take work, else None."""
        if self.status == "starting":
            return "starting", "the server is still loading its scorer; retry shortly (GET /health says when)"
        if self.status == "failed":
            return "scorer_failed", f"{self.status_message}; see the server log, fix it and restart the server"
        return None


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def create_app(settings: ServiceSettings | None = None, *, scorer: Any = None) -> FastAPI:
    """The ASGI app for ``settings`` (a custom ``scorer`` replaces the configured one).

    Its lifespan start-up (uvicorn, or ``with TestClient(app)``) loads and
    warms the scorer in the background (:meth:`Service.start_warm_up`);
    without a lifespan the scorer loads on the first request that needs it.
    """
    settings = settings or ServiceSettings()
    service = Service(settings, scorer)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(service.start_warm_up)  # builds the scorer: a bad --model fails here
        yield
        await anyio.to_thread.run_sync(service.wait_for_warm_up)

    app = FastAPI(
        title="ctxsel",
        version=__version__,
        description="Decide which chunks of a long context a language model should read. "
        "Errors are JSON: {error, message, status, request_id}.",
        lifespan=lifespan,
    )
    app.state.service = service
    app.router.route_class = FastJSONRoute
    bearer = [Depends(HTTPBearer(auto_error=False, description="the server's token (when it has one)"))]

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc, BodyTooLarge):
            raise exc  # BodySizeLimitMiddleware answers it, and drains the rest of the body
        if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI could not decode the body
            cause = exc.__cause__
            what = "not UTF-8" if isinstance(cause, UnicodeDecodeError) else type(cause).__name__
            return _error_response(
                request, 422, "invalid_body", f"the body could not be read as JSON ({what}: {cause}); send UTF-8 JSON"
            )
        error = getattr(exc, "error", None) or {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(
            exc.status_code, "http_error"
        )
        message = str(exc.detail)
        if exc.status_code == 404 and error == "not_found":
            message = f"no such path: {request.method} {request.url.path}; the service has {_ROUTES}"
        elif exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            message = f"{request.method} is not allowed on {request.url.path}; use {allowed or 'another method'}"
        return _error_response(request, exc.status_code, error, message, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        raw = list(exc.errors())
        errors = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))} for e in raw
        ]
        content_type = request.headers.get("content-type")
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            message = (
                f"Content-Encoding: {encoding} is not supported: send the JSON body uncompressed "
                "(Content-Type: application/json)"
            )
        elif not _is_json(content_type) and any(tuple(e.get("loc", ())) == ("body",) for e in raw):
            given = f"Content-Type: {content_type}" if content_type else "no Content-Type"
            message = f"the body must be a JSON object sent with Content-Type: application/json (got {given})"
        else:
            message = _validation_message(raw)
        return _error_response(request, 422, "invalid_body", message, detail=errors)

    @app.get(
        "/health",
        response_model=HealthOut,
        responses={
            503: {
                "model": HealthOut,
                "description": "still loading the scorer (status 'starting'), or it failed to load (status 'failed')",
            }
        },
        tags=["service"],
    )
    async def health() -> Any:
        """Readiness and load: never needs the token, never counts against the limit.
        200 with status "ok" once the scorer is loaded and warm; 503 before."""
        out = HealthOut(
            status=service.status,
            version=__version__,
            reader=settings.reader_name,
            scorer=settings.scorer,
            in_flight=service.limiter.in_flight,
            max_concurrency=settings.max_concurrency,
            message=service.status_message,
        )
        if service.status == "ok":
            return out
        return JSONResponse(status_code=503, content=out.model_dump(), headers={"Retry-After": "2"})

    @app.post(
        "/select", response_model=SelectionOut, responses=_responses(_ERRORS), dependencies=bearer, tags=["selection"]
    )
    async def select(req: SelectRequest, request: Request) -> Any:
        """Select the chunks a reader should see: the Selection as JSON."""
        return await service.run(
            request, lambda token: jsonable(service.select(req, token).to_dict(with_text=req.with_text))
        )

    @app.post(
        "/answer",
        response_model=AnswerOut,
        responses=_responses(_ANSWER_ERRORS),
        dependencies=bearer,
        tags=["selection"],
    )
    async def answer(req: AnswerRequest, request: Request) -> Any:
        """Select, then answer with the server's reader LLM (``--reader``)."""
        if settings.reader is None:
            raise ServiceError(
                501,
                "no_reader",
                "this server has no reader: start it with "
                "`ctxsel serve --reader local` or `--reader URL --reader-model NAME`",
            )

        def work(token: CancelToken) -> dict[str, Any]:
            from ctxsel.reader import Reader

            sel = service.select(req, token)
            reader = Reader(
                CancellableLLM(settings.reader, token), req.template, max_answer_tokens=req.max_answer_tokens
            )
            question = question_with_options(req.question, req.choices or [])  # the reader sees the options too
            out: dict[str, Any] = jsonable(reader.answer(question, sel).to_dict(with_text=req.with_text))
            return out

        return await service.run(request, work)

    # outermost last: RequestLog -> BearerAuth -> BodySizeLimit -> Readiness -> ConcurrencyLimit -> routes
    app.add_middleware(ConcurrencyLimitMiddleware, limiter=service.limiter, paths=LIMITED_PATHS)
    app.add_middleware(ReadinessMiddleware, refusal=service.refusal, paths=LIMITED_PATHS)
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.token is not None:
        app.add_middleware(BearerAuthMiddleware, token=settings.token, public_paths=PUBLIC_PATHS)
    app.add_middleware(RequestLogMiddleware, logger=log)
    return app


__all__ = ["Service", "ServiceError", "create_app"]


class _ServerScorer:
    """The server's scorer as a request's pipeline sees it: one request at a time (one model,
    one SQLite cache), a batch at a time under the request's deadline, and memory that stops
    growing with new texts (the vectors stay in the SQLite cache)."""

    def __init__(self, service: Service, token: CancelToken) -> None:
        self.service, self.token = service, token
        self.name = f"server:{service.settings.scorer}"

    def score_detailed(self, question: str, chunks: Sequence[Chunk]) -> tuple[np.ndarray, dict[str, Any]]:
        service = self.service
        self.token.acquire(service._scorer_lock)  # gives up at the deadline instead of queueing past it
        scorer = service.scorer()
        try:
            return score_in_batches(scorer, question, chunks, self.token)
        finally:
            if getattr(scorer, "rows_in_memory", 0) > service.max_rows_in_memory:
                scorer.clear_memory()
            service._scorer_lock.release()

    def score(self, question: str, chunks: Sequence[Chunk]) -> np.ndarray:
        return self.score_detailed(question, chunks)[0]
