"""The HTTP service behind ``ctxsel serve`` (needs the ``serve`` extra:
fastapi and uvicorn).

    from ctxsel.service import ServiceSettings, create_app
    app = create_app(ServiceSettings(token="s3cret", max_concurrency=8))

``import ctxsel.service`` is light; fastapi loads when ``create_app`` or
``run_server`` is first used.
"""

from __future__ import annotations

from typing import Any

from ctxsel.errors import MissingExtraError, install_hint
from ctxsel.service.settings import LIMITED_PATHS, PUBLIC_PATHS, ServiceSettings


def create_app(settings: ServiceSettings | None = None, **kw: Any) -> Any:
    """The FastAPI app (see :func:`ctxsel.service.app.create_app`)."""
    try:
        from ctxsel.service.app import create_app as _create_app
    except ImportError as e:
        raise MissingExtraError(f"the HTTP service needs fastapi and uvicorn ({e}): {install_hint('serve')}") from e
    return _create_app(settings, **kw)


def run_server(settings: ServiceSettings, host: str = "127.0.0.1", port: int = 8000, **kw: Any) -> None:
    """Serve until SIGINT/SIGTERM (see :func:`ctxsel.service.runner.run_server`)."""
    try:
        from ctxsel.service.runner import run_server as _run
    except ImportError as e:
        raise MissingExtraError(f"the HTTP service needs fastapi and uvicorn ({e}): {install_hint('serve')}") from e
    _run(settings, host, port, **kw)


__all__ = ["LIMITED_PATHS", "PUBLIC_PATHS", "ServiceSettings", "create_app", "run_server"]
