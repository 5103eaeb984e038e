"""The routes: GET /health, POST /select and POST /answer, each a thin call into :class:`Service`."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer

from ctxsel._version import __version__
from ctxsel.datasets.multiple_choice import question_with_options
from ctxsel.errors import ServiceError
from ctxsel.service.cancel import CancellableLLM, CancelToken
from ctxsel.service.envelope import ANSWER_ERRORS, ERRORS, responses
from ctxsel.service.models import AnswerOut, AnswerRequest, HealthOut, SelectionOut, SelectRequest
from ctxsel.service.service import Service
from ctxsel.types import jsonable


def add_routes(app: FastAPI, service: Service) -> None:
    """The three routes of ``service`` on ``app``.

    ``bearer`` only puts the token in the OpenAPI schema; BearerAuthMiddleware checks it.
    """
    settings = service.settings
    bearer = [Depends(HTTPBearer(auto_error=False, description="the server's token (when it has one)"))]

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
        "/select", response_model=SelectionOut, responses=responses(ERRORS), dependencies=bearer, tags=["selection"]
    )
    async def select(req: SelectRequest, request: Request) -> Any:
        """Select the chunks a reader should see: the Selection as JSON."""
        return await service.run(
            request, lambda token: jsonable(service.select(req, token).to_dict(with_text=req.with_text))
        )

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
            reader = Reader(
                CancellableLLM(settings.reader, token), req.template, max_answer_tokens=req.max_answer_tokens
            )
            question = question_with_options(req.question, req.choices or [])  # the reader sees the options too
            out: dict[str, Any] = jsonable(reader.answer(question, sel).to_dict(with_text=req.with_text))
            return out

        return await service.run(request, work)


__all__ = ["add_routes"]
