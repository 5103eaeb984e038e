"""The JSON route: FastAPI's routes, reading the body with pydantic-core's faster JSON parser
(large bodies in a worker thread, so they do not stall the event loop)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
from fastapi import Request
from fastapi.routing import APIRoute
from pydantic_core import from_json

#: Bodies above this are parsed in a worker thread, so a large one does not stall the event loop (below
#: it the thread hop costs more than the parse itself).
_THREAD_PARSE_BYTES = 1024 * 1024


def _parse_json(body: bytes) -> Any:
    """pydantic-core's JSON parser (compiled, several times faster than ``json.loads`` on a large
    body: benchmarks/serve_load.py times both); its errors become JSONDecodeError, which
    FastAPI answers as a validation error. A body it refuses only for a lone
    surrogate escape is read by ``json``, so the question or chunk that holds
    it is refused by name, in the words Python and the CLI use."""
    try:
        return from_json(body)
    except ValueError as e:
        if "hex escape" in str(e):  # a lone surrogate escape ("\ud800") is JSON; the field's own check names it
            try:
                return json.loads(body)
            except (ValueError, RecursionError):
                pass
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


__all__ = ["FastJSONRequest", "FastJSONRoute"]
