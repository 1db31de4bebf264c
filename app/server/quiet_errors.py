"""A malformed client call costs one log line, not a traceback.

Every page handler is wrapped by :func:`app.server.errors.guard`, so the exceptions that still
reach Gradio's queue come from Gradio checking the client's values before any handler runs (too
few inputs, a dropdown value not among its choices, a value of the wrong shape): the client's
mistake, which Gradio printed as a full traceback (443 of ~500 malformed events in one probe).

- :func:`install` makes Gradio's queue log such a failure as one ``WARNING`` line naming the
  exception and its first 200 characters; the traceback goes to ``DEBUG``.
- :class:`QueueGuard` answers two malformed calls before Gradio sees them: ``queue/data`` for a
  session with nothing pending (Gradio raised inside its already started stream: a truncated
  200 answer and an "Exception in ASGI application" traceback) gets a plain 404, and
  ``queue/join`` naming no event of the page (Gradio: a ``KeyError`` and a 500 with a
  traceback) gets a 422 naming ``fn_index``.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import traceback
from urllib.parse import parse_qs

from app.server.asgi_body import read_body, replay

log = logging.getLogger("app")
_DATA = re.compile(r"/queue/data/?$")
_JOIN = re.compile(r"/queue/join/?$")
MAX_SHOWN = 200  # characters of an exception's message in the line


class _OneLineTracebacks:
    """Stands in for the ``traceback`` module inside Gradio's queue: ``print_exc`` logs one line
    (the traceback at ``DEBUG``); everything else is the real module's."""

    def __getattr__(self, name):
        return getattr(traceback, name)

    @staticmethod
    def print_exc(*args, **kwargs) -> None:
        exc = sys.exc_info()[1]
        text = " ".join(str(exc).split())
        if len(text) > MAX_SHOWN:
            text = text[:MAX_SHOWN - 3] + "..."
        log.warning("a page event failed before its handler ran (the client's values): %s: %s",
                    type(exc).__name__, text)
        log.debug("its traceback", exc_info=True)


def install() -> None:
    """Make Gradio's queue log a failed event as one line (see the module docstring). Safe to
    call more than once."""
    import gradio.queueing

    if not isinstance(gradio.queueing.traceback, _OneLineTracebacks):
        gradio.queueing.traceback = _OneLineTracebacks()


class QueueGuard:
    """ASGI middleware: 404 for ``queue/data`` of an unknown session, 422 for ``queue/join`` of
    an unknown ``fn_index`` (see the module docstring).

    Args:
        app: the ASGI app it wraps.
        demo: the page's ``gr.Blocks`` (its queue and its events).
    """

    def __init__(self, app, demo) -> None:
        self.app, self.demo = app, demo

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope.get("path", ""), scope.get("method")
        if method == "GET" and _DATA.search(path):
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            session = (query.get("session_hash") or [""])[0]
            queue = getattr(self.demo, "_queue", None)
            pending = getattr(queue, "pending_messages_per_session", None)
            if pending is not None and session not in pending:
                return await _json(send, 404, {"detail": "no such session: join the queue first"})
        elif method == "POST" and _JOIN.search(path):
            body = await read_body(receive)
            if body is None:  # the client went away
                return
            index = _fn_index(body)
            if isinstance(index, int) and not isinstance(index, bool) \
                    and index not in self.demo.fns:
                return await _json(send, 422, {"detail": "fn_index names no event of this page"})
            receive = replay(body, receive)
        return await self.app(scope, receive, send)


def _fn_index(body: bytes):
    """The body's ``fn_index`` when it is JSON with one (``None`` otherwise: Gradio answers
    that itself)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc.get("fn_index") if isinstance(doc, dict) else None


async def _json(send, status: int, doc: dict) -> None:
    payload = json.dumps(doc).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
