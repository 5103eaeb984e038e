"""The service's error envelope: every error answer is ``{error, message, status, request_id}``.

The documented error codes of each route, the JSON answer for a :class:`~ctxsel.errors.ServiceError`,
and the handlers that word FastAPI's own errors (404, 405, a body that is not JSON, a request
that fails validation) the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ctxsel.errors import InputError, ServiceError
from ctxsel.service.middleware import error_dict, request_id
from ctxsel.service.models import ErrorOut

ERRORS = {
    400: "not valid HTTP (the HTTP parser's answer, in the same JSON shape; the connection is closed)",
    401: "missing or wrong bearer token",
    408: "the request body did not all arrive within the server's --body-timeout of its headers "
    "(the connection is closed)",
    411: "a POST without Content-Length (or chunked Transfer-Encoding): its body cannot be read",
    413: "request body over the server's limit (--max-body-bytes), or more chunks or text than it takes "
    "in one request (--max-chunks, --max-chars)",
    422: "malformed body, or input the method cannot use (the message says which)",
    431: "more headers than the server's --max-headers, or a target and headers larger than its --max-header-bytes",
    500: "internal error (the log line with this request id has the traceback)",
    503: "already handling --max-concurrency requests with its queue full (--max-queue) or no slot free within "
    "--queue-timeout, or holding as many request bodies as it keeps in memory, or still loading its scorer; "
    "retry after Retry-After seconds",
    504: "the work took longer than the server's deadline (--deadline)",
}
ROUTES = (
    "POST /select, POST /explain, POST /answer, GET|HEAD /health, GET /metrics and GET /openapi.json (docs at /docs)"
)
ANSWER_ERRORS = {
    **ERRORS,
    501: "this server has no reader (start it with --reader local|URL)",
    502: "the reader LLM failed (the message says how and quotes its reply, never where the reader is)",
}


def responses(codes: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorOut, "description": text} for code, text in codes.items()}


def error_response(
    request: Request, status: int, error: str, message: str, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    rid = request_id(request.scope)
    return JSONResponse(status_code=status, headers=headers, content=error_dict(status, error, message, rid, **extra))


_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
    bytes: "bytes that are not JSON",
}


def validation_message(errors: list[dict[str, Any]]) -> str:
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        msg = e.get("msg", "invalid")
        cause = (e.get("ctx") or {}).get("error")
        if e.get("type") == "value_error" and isinstance(cause, InputError):  # ctxsel's own check: its message
            msg = str(cause)
            if msg.startswith(loc) or loc == "body":  # it names the field itself (the Query's words name theirs)
                parts.append(msg)
                continue
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


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def install_error_handlers(app: FastAPI) -> None:
    """Answer :class:`ServiceError` and FastAPI's own errors in the envelope."""

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(request, exc.status_code, exc.error, exc.detail, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI could not decode the body
            cause = exc.__cause__
            what = "not UTF-8" if isinstance(cause, UnicodeDecodeError) else type(cause).__name__
            return error_response(
                request, 422, "invalid_body", f"the body could not be read as JSON ({what}: {cause}); send UTF-8 JSON"
            )
        error = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(exc.status_code, "http_error")
        message = str(exc.detail)
        if exc.status_code == 404 and error == "not_found":
            message = f"no such path: {request.method} {request.url.path}; the service has {ROUTES}"
        elif exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            message = f"{request.method} is not allowed on {request.url.path}; use {allowed or 'another method'}"
        return error_response(request, exc.status_code, error, message, headers=exc.headers)

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
            message = validation_message(raw)
        return error_response(request, 422, "invalid_body", message, detail=errors)


__all__ = ["ANSWER_ERRORS", "ERRORS", "ROUTES", "error_response", "install_error_handlers", "responses"]
