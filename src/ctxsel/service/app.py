"""The FastAPI application: ``create_app(settings) -> ASGI app``.

    from ctxsel.service import ServiceSettings, create_app
    app = create_app(ServiceSettings(token="s3cret", scorer="keywords"))
    # uvicorn.run(app) -- or `ctxsel serve`, which also sets up JSON logs

Routes: POST /select, POST /explain, POST /answer, GET|HEAD /health, GET /metrics; the OpenAPI schema at
/openapi.json (docs at /docs). The app is put together here from its parts:
the routes (:mod:`~ctxsel.service.routes`) call the :class:`Service`
(:mod:`~ctxsel.service.service`), which runs selection and reading in worker
threads under the per-request deadline (a small cut on given scores runs on the event loop,
:meth:`Service.runs_inline`); errors answer in one envelope
(:mod:`~ctxsel.service.envelope`); bodies are read by a faster JSON parser
(:mod:`~ctxsel.service.fast_json`); everything else is in the middleware
(:mod:`ctxsel.service.middleware`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI

from ctxsel._version import __version__
from ctxsel.service.envelope import install_error_handlers
from ctxsel.service.fast_json import FastJSONRoute
from ctxsel.service.limiter import ConcurrencyLimitMiddleware
from ctxsel.service.middleware import (
    BearerAuthMiddleware,
    BodySizeLimitMiddleware,
    HeaderLimitMiddleware,
    ReadinessMiddleware,
    RequestLogMiddleware,
    log,
)
from ctxsel.service.routes import add_routes
from ctxsel.service.service import Service
from ctxsel.service.settings import LIMITED_PATHS, PUBLIC_PATHS, ServiceSettings


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

    install_error_handlers(app)
    add_routes(app, service)

    # outermost last: RequestLog -> HeaderLimit -> BearerAuth -> BodySizeLimit (reads the whole body)
    # -> Readiness -> ConcurrencyLimit -> routes: a body is in memory before its request asks for a slot
    app.add_middleware(
        ConcurrencyLimitMiddleware, limiter=service.limiter, paths=LIMITED_PATHS, on_admit=service.metrics.admitted
    )
    app.add_middleware(ReadinessMiddleware, refusal=service.refusal, paths=LIMITED_PATHS)
    app.add_middleware(
        BodySizeLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        body_timeout_s=settings.body_timeout_s,
        # as many full bodies as requests may run and wait at once: reading first must not cost more memory
        budget_bytes=settings.max_body_bytes * (settings.max_concurrency + settings.max_queue),
    )
    if settings.token is not None:
        app.add_middleware(BearerAuthMiddleware, token=settings.token, public_paths=PUBLIC_PATHS)
    app.add_middleware(HeaderLimitMiddleware, max_bytes=settings.max_header_bytes, max_headers=settings.max_headers)
    app.add_middleware(RequestLogMiddleware, logger=log, metrics=service.metrics)
    return app


__all__ = ["create_app"]
