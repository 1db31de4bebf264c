"""Size limits of the page's own routes, as ASGI middleware in front of Gradio.

Gradio reads a whole request body into memory and copies it several times on its way to the
queue (a 50 MB body once took the page from 1.65 to 5.10 GB, and 3.17 GB stayed), and its
``max_file_size`` covers uploads only. So:

- :func:`page_body_limit`: every body over :data:`MAX_BODY_BYTES` is refused with 413 before
  it is read (by its ``Content-Length``, or as soon as a chunked body passes it), with
  :class:`engine.serve.limits.BodyLimit`.
- :class:`TextLimit`: a call of an event (``/gradio_api/call/<name>``,
  ``/gradio_api/queue/join``, ``/gradio_api/run/<name>``) whose ``data`` holds a text longer
  than :data:`MAX_TEXT_CHARS` is refused with 413 before it joins the queue.
"""

from __future__ import annotations

import json
import re

from engine.serve.limits import BodyLimit
from app.server.asgi_body import read_body, replay

MAX_TEXT_CHARS = 1 << 20
"""Longest text of one field (characters): the calculator's pasted ``config.json`` may be
1 MiB, and the embedded model's longest prompt that could fit is 663,552 bytes (8,192 tokens x
81 bytes, :mod:`engine.model.prompt_bytes`); the engine refuses a longer prompt by itself."""
MAX_BODY_BYTES = 4 * MAX_TEXT_CHARS + 64 * 1024
"""Largest body: one longest text JSON-escaped (:data:`engine.serve.limits.JSON_ESCAPE_FACTOR`),
plus room for the other fields; uploads (at most 1 MiB each) fit too."""
_EVENT = re.compile(r"/gradio_api/(call/(v2/)?[^/]+|queue/join|run/[^/]+)/?$")


def page_body_limit(app, max_bytes: int = MAX_BODY_BYTES) -> BodyLimit:
    """:class:`engine.serve.limits.BodyLimit` with Gradio's error shape (``{"detail": ...}``)."""
    return BodyLimit(app, max_bytes, body=_detail)


class TextLimit:
    """ASGI middleware: refuse an event call whose ``data`` holds a text over ``max_chars``.

    Args:
        app: the ASGI app it wraps.
        max_chars: the longest text accepted in any field, in characters.
    """

    def __init__(self, app, max_chars: int = MAX_TEXT_CHARS) -> None:
        self.app, self.max_chars = app, int(max_chars)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" \
                or not _EVENT.search(scope.get("path", "")):
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        if body is None:  # the client went away
            return
        longest = _longest_text(body)
        if longest > self.max_chars:
            content_type, payload = _text_detail(longest, self.max_chars)
            await send({"type": "http.response.start", "status": 413, "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(payload)).encode())]})
            await send({"type": "http.response.body", "body": payload})
            return
        await self.app(scope, replay(body, receive), send)


def _longest_text(body: bytes) -> int:
    """Characters of the longest string in the body's ``data`` (0 when it has none or is not
    JSON: Gradio answers that itself)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return 0
    data = doc.get("data") if isinstance(doc, dict) else None
    longest, todo = 0, [data]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            longest = max(longest, len(item))
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
    return longest


def _detail(size: int, max_bytes: int) -> tuple[str, bytes]:
    return "application/json", json.dumps({"detail": (
        f"the request body is at least {size} bytes; this server accepts at most {max_bytes} "
        "bytes")}).encode()


def _text_detail(chars: int, max_chars: int) -> tuple[str, bytes]:
    return "application/json", json.dumps({"detail": (
        f"a field holds {chars} characters; this server accepts at most {max_chars} "
        "characters per field")}).encode()

