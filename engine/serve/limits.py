"""A cap on request bodies, as plain ASGI middleware: a body larger than the cap is refused
with 413 before it is read whole (by its ``Content-Length``, or as soon as a chunked body
passes the cap), so no large body is held in memory or parsed as JSON on the event loop.

The cap of the API is :func:`api_body_limit`: room for the longest prompt that could fit
the context (:attr:`engine.engine.LLMEngine.max_prompt_bytes`), JSON-escaped, plus the other
fields.
"""

from __future__ import annotations

import json

JSON_ESCAPE_FACTOR = 4
"""JSON text may escape a character: ``\\u00e9`` is 6 bytes for 2 of UTF-8, an emoji's
surrogate pair 12 for 4; a factor of 4 covers any text a client would send."""
FIELDS_SLACK_BYTES = 64 * 1024
"""Room in a body for everything besides the prompt (settings, stop strings, roles)."""
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
"""The cap when the engine does not say how much prompt text could fit (16 MiB)."""


def api_body_limit(engine) -> int:
    """The API's body cap for ``engine``, in bytes: ``JSON_ESCAPE_FACTOR x max_prompt_bytes +
    FIELDS_SLACK_BYTES``, or :data:`DEFAULT_MAX_BODY_BYTES` when the engine has no bound."""
    most = getattr(engine, "max_prompt_bytes", None)
    if not isinstance(most, int) or most <= 0:
        return DEFAULT_MAX_BODY_BYTES
    return JSON_ESCAPE_FACTOR * most + FIELDS_SLACK_BYTES


class BodyLimit:
    """ASGI middleware: refuse an HTTP request whose body is over ``max_bytes`` with 413.

    Args:
        app: the ASGI app it wraps.
        max_bytes: the largest body accepted, in bytes.
        body: ``body(size, max_bytes) -> (content type, bytes)`` of the refusal (default:
            OpenAI's error shape, ``code`` ``request_too_large``).
    """

    def __init__(self, app, max_bytes: int, body=None):
        self.app, self.max_bytes = app, int(max_bytes)
        self.body = body or openai_error_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            return await self._refuse(send, declared)
        seen, started, refused = 0, False, False

        async def limited_receive():
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes and not started:
                    # answer now; the app reads on as if the client had gone, and whatever it
                    # answers to that is dropped
                    refused = True
                    await self._refuse(send, seen)
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message):
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, limited_receive, tracked_send)

    async def _refuse(self, send, size: int) -> None:
        content_type, payload = self.body(size, self.max_bytes)
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", content_type.encode()), (b"content-length", str(len(payload)).encode()),
            (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": payload})


def openai_error_body(size: int, max_bytes: int) -> tuple[str, bytes]:
    """The 413 refusal in OpenAI's error shape."""
    return "application/json", json.dumps({"error": {
        "message": f"the request body is at least {size} bytes; this server accepts at most "
                   f"{max_bytes} bytes", "type": "invalid_request_error", "param": None,
        "code": "request_too_large"}}).encode()


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
