"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}`` with the
status code the OpenAI API uses for the same failure (400 bad value, 401 bad key, 404 unknown
model or route, 429 queue full, 503 shutting down, 500 anything else)."""

from __future__ import annotations

import logging
import re
import secrets

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import EngineShutdownError, QueueFullError

log = logging.getLogger("engine.serve")

MAX_MESSAGE_CHARS = 600
"""Longest error message a client gets (characters)."""
TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "not_found_error",
         405: "invalid_request_error", 429: "rate_limit_error", 500: "server_error",
         503: "service_unavailable"}


class APIError(Exception):
    """A request refused or failed, with what the client is told.

    Args:
        status: HTTP status code.
        message: one line for the client (never a path or a traceback).
        param: the request field at fault (``"temperature"``, ``"messages[0].content"``), if any.
        code: OpenAI's machine-readable code (``"model_not_found"``, ``"invalid_api_key"``...).

    A message over :data:`MAX_MESSAGE_CHARS` is cut there (a refused value is never echoed
    whole).
    """

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None) -> None:
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS - 3] + "..."
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        """The JSON body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        """The body as a ``JSONResponse`` with the status code."""
        return JSONResponse(self.body(), status_code=self.status)


FIELD = re.compile(r"^([a-z_]+) (must|is|needs)\b")


def bad_value(exc: ValueError, fields: tuple[str, ...] = ()) -> APIError:
    """A 400 for a ``ValueError`` of the engine (``SamplingParams``, ``submit``), whose message
    starts with the field's name; ``param`` is that name when it is one of ``fields``."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid request"
    m = FIELD.match(message)
    param = m.group(1) if m and m.group(1) in fields else None
    if param is None and message.startswith("prompt"):
        param = "prompt"
    return APIError(400, message, param, "invalid_value")


def from_engine(exc: Exception) -> APIError:
    """The client's error for an exception of ``engine.submit``: queue full 429, engine shut
    down 503; anything unexpected is logged with an id and answered 500 with only that id."""
    if isinstance(exc, QueueFullError):
        return APIError(429, f"the engine's queue is full ({exc}); retry later", None,
                        "queue_full")
    if isinstance(exc, EngineShutdownError):
        return APIError(503, "the server is shutting down", None, "shutting_down")
    return internal(exc)


def internal(exc: BaseException) -> APIError:
    """A 500 naming only an error id; the traceback goes to the server log under that id."""
    err_id = "err-" + secrets.token_hex(4)
    log.error("internal error %s", err_id, exc_info=(type(exc), exc, exc.__traceback__))
    return APIError(500, f"internal server error (id {err_id})", None, "internal_error")


_TYPE_NAMES = {"str", "int", "float", "bool", "dict", "list", "none"}


def field_path(loc) -> str | None:
    """``("body", "messages", 0, "content")`` -> ``"messages[0].content"``; pydantic's union
    branch names (``("body", "stop", "str")``) are left out: ``"stop"``."""
    parts = [p for p in loc if p != "body" and (isinstance(p, int) or (
        p.isidentifier() and p not in _TYPE_NAMES))]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or None


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` in OpenAI's shape: validation errors as 400 naming the
    field, unknown routes 404, :class:`APIError` as itself, anything else 500."""

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
        if first.get("type") == "json_invalid":
            return APIError(400, "the request body is not valid JSON", None,
                            "invalid_json").response()
        param = field_path(first.get("loc", ()))
        if first.get("type") == "missing" and param is None:  # no body at all
            needed = "messages" if request.url.path.endswith("/chat/completions") else "prompt"
            return APIError(400, f"the request body is empty: send a JSON object with model "
                            f"and {needed}", "model", "invalid_value").response()
        if param is None and first.get("type") in ("model_type", "model_attributes_type",
                                                    "dict_type"):  # a list, a string, a number
            return APIError(400, "the request body must be a JSON object", None,
                            "invalid_value").response()
        if first.get("type") == "missing":
            message = f"{param} is required"
        else:
            message = f"{param}: {first.get('msg', 'invalid value')}" if param else \
                str(first.get("msg", "invalid request"))
        return APIError(400, message, param, "invalid_value").response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        message = {404: "no such route", 405: "method not allowed"}.get(exc.status_code,
                                                                         str(exc.detail))
        return APIError(exc.status_code, message, None,
                        {404: "not_found"}.get(exc.status_code)).response()

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        return internal(exc).response()
