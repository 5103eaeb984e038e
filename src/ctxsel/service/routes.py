"""The routes: GET|HEAD /health, GET /metrics, POST /select, POST /explain and POST /answer, each a thin call into
:class:`Service`."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPBearer

from ctxsel._version import __version__
from ctxsel.datasets.multiple_choice import question_with_options
from ctxsel.errors import ServiceError, install_hint
from ctxsel.service.cancel import CancellableLLM, CancelToken
from ctxsel.service.envelope import ANSWER_ERRORS, ERRORS, responses
from ctxsel.service.metrics import CONTENT_TYPE
from ctxsel.service.models import (
    AnswerOut,
    AnswerRequest,
    CatalogOut,
    ErrorOut,
    HealthOut,
    SelectionOut,
    SelectRequest,
    catalog,
)
from ctxsel.service.service import Service
from ctxsel.types import jsonable


def add_routes(app: FastAPI, service: Service) -> None:
    """The routes of ``service`` on ``app``.

    ``bearer`` only puts the token in the OpenAPI schema; BearerAuthMiddleware checks it.
    """
    settings = service.settings
    bearer = [Depends(HTTPBearer(auto_error=False, description="the server's token (when it has one)"))]

    not_ready: dict[int | str, dict[str, Any]] = {
        503: {
            "model": HealthOut,
            "description": "still loading the scorer (status 'starting'), or it failed to load (status 'failed')",
        }
    }

    @app.get("/health", response_model=HealthOut, responses=not_ready, tags=["service"])
    async def health() -> Any:
        """Readiness and load: never needs the token, never counts against the limit.
        200 with status "ok" once the scorer is loaded and warm; 503 before. HEAD: the same status, no body."""
        out = HealthOut(
            status=service.status,
            version=__version__,
            reader=settings.reader_name,
            scorer=settings.scorer_spec,
            in_flight=service.limiter.in_flight,
            max_concurrency=settings.max_concurrency,
            queued=service.limiter.waiting,
            max_queue=settings.max_queue,
            message=service.status_message,
        )
        if service.status == "ok":
            return out
        return JSONResponse(status_code=503, content=out.model_dump(), headers={"Retry-After": "2"})

    app.add_api_route(  # load balancers probe with HEAD: the same status and headers, no body
        "/health",
        health,
        methods=["HEAD"],
        operation_id="head_health",
        summary="Health (HEAD)",
        response_model=HealthOut,
        responses=not_ready,
        tags=["service"],
    )

    @app.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {"content": {"text/plain": {}}, "description": "Prometheus text format 0.0.4"},
            401: {"model": ErrorOut, "description": ERRORS[401]},
            501: {"model": ErrorOut, "description": "prometheus_client is not installed on the server"},
        },
        dependencies=bearer,
        tags=["service"],
    )
    async def metrics() -> Response:
        """Prometheus metrics: requests by route and status, latency, in flight, queue, caches, LLM calls.
        Needs the token when the server has one; never counts against the limit."""
        if not service.metrics.enabled:
            raise ServiceError(
                501,
                "no_metrics",
                f"this server cannot export metrics: prometheus_client is not installed ({install_hint('serve')})",
            )
        return Response(service.metrics.exposition(), media_type=CONTENT_TYPE)

    @app.get(
        "/methods",
        response_model=CatalogOut,
        responses={401: {"model": ErrorOut, "description": ERRORS[401]}},
        dependencies=bearer,
        tags=["selection"],
    )
    async def methods() -> Any:
        """Every method and stage this server runs, each with its declared options (type and bounds,
        default, what it does; ``server_flag``: an option a request cannot set), as ``ctxsel.options``
        declares them: the same rules every request's ``method``, ``options`` and ``stages`` are checked by."""
        return catalog()

    @app.post(
        "/select", response_model=SelectionOut, responses=responses(ERRORS), dependencies=bearer, tags=["selection"]
    )
    async def select(req: SelectRequest, request: Request) -> Any:
        """Select the chunks a reader should see: the Selection as JSON."""
        return await service.run(
            request,
            lambda token: jsonable(service.select(req, token).to_dict(with_text=req.with_text)),
            inline=service.runs_inline(req),
        )

    @app.post(
        "/explain",
        response_class=HTMLResponse,
        # the page is HTML; its errors are the JSON envelope, as every route's (named so: the route's
        # response class would otherwise stand for them too)
        responses={
            code: {
                "description": text,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
            }
            for code, text in ERRORS.items()
        },
        dependencies=bearer,
        tags=["selection"],
    )
    async def explain(req: SelectRequest, request: Request) -> Any:
        """Select as /select does, and answer with the selection's page (``ctxsel.explainer``): the
        sorted scores with the cut, the document with the kept chunks highlighted; self-contained HTML."""

        def work(token: CancelToken) -> str:
            from ctxsel.explainer import selection_html

            return selection_html(service.select(req, token))

        return HTMLResponse(await service.run(request, work))

    @app.post(
        "/answer",
        response_model=AnswerOut,
        responses=responses(ANSWER_ERRORS),
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
            llm = CancellableLLM(settings.reader, token, service.metrics.llm_reply)
            reader = Reader(llm, req.template, max_answer_tokens=req.max_answer_tokens)
            question = question_with_options(req.question, req.choices or [])  # the reader sees the options too
            out: dict[str, Any] = jsonable(reader.answer(question, sel).to_dict(with_text=req.with_text))
            return out

        return await service.run(request, work)


__all__ = ["add_routes"]
