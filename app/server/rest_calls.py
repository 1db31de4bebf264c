"""Gradio's plain REST calls (``POST /gradio_api/call/<name>``, then
``GET /gradio_api/call/<name>/<event_id>``) made safe for ``/stop`` and for unknown ids.

Gradio streams a call's result from its *session's* message queue, not the event's: a
``/stop`` called with the session of a running ``/generate`` (which is the only way to say
whose requests to stop) read the generation's messages, ended with ``404: Not Found`` and a
dropped connection when the generation finished first, and left a ``gradio_client`` job that
shared the session waiting forever. A ``GET`` of an unknown event id dropped the connection
mid-response too. So, as ASGI middleware in front of Gradio:

- ``POST /gradio_api/call/stop`` runs the page's ``/stop`` function at once for the body's
  ``session_hash`` (outside Gradio's queue, so no session's stream is touched) and answers
  ``{"event_id": ...}``; the ``GET`` of that id answers ``event: complete`` with
  ``[true]`` or ``[false]``, once.
- ``GET /gradio_api/call/<name>/<event_id>`` of an id the queue does not hold answers 404
  ``{"detail": ...}`` before any stream starts.

``gradio_client`` calls ``/stop`` through the queue (``/gradio_api/queue/join``) with its own
session, which streams its own events: that path is left as it is.
"""

from __future__ import annotations

import json
import re
import secrets
from collections import OrderedDict
from types import SimpleNamespace

import anyio

from app.server.asgi_body import json_response, read_body

_CALL = re.compile(r"^/gradio_api/call/(?:v2/)?([^/]+)/?$")
_GET = re.compile(r"^/gradio_api/call/(?:v2/)?([^/]+)/([^/]+)/?$")
DIRECT = ("stop",)
"""Endpoints answered at once instead of through Gradio's queue."""
MAX_RESULTS = 1024
"""Direct results kept for their ``GET`` (oldest dropped first)."""


def direct_functions(demo) -> dict:
    """``{api_name: fn(session_hash) -> result}`` for the page's :data:`DIRECT` endpoints: the
    ``gr.api`` function called with a request that carries only the session."""
    out = {}
    for block_fn in demo.fns.values():
        if block_fn.api_name in DIRECT and block_fn.fn is not None:
            fn = block_fn.fn
            out[block_fn.api_name] = lambda s, fn=fn: fn(request=SimpleNamespace(session_hash=s))
    return out


class RestCalls:
    """ASGI middleware (see the module's docstring).

    Args:
        app: the ASGI app it wraps.
        demo: the page's ``gr.Blocks`` (its queue says which event ids exist).
    """

    def __init__(self, app, demo) -> None:
        self.app, self.demo = app, demo
        self.direct = direct_functions(demo)
        self.results: OrderedDict[str, object] = OrderedDict()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope.get("path", ""), scope.get("method")
        post = _CALL.match(path) if method == "POST" else None
        if post and post.group(1) in self.direct:
            return await self._call_direct(post.group(1), receive, send)
        get = _GET.match(path) if method == "GET" else None
        if get:
            name, event_id = get.groups()
            if name in self.direct:
                return await self._result(event_id, send)
            if not self._known(event_id):
                return await json_response(send, 404, {"detail": f"no event {event_id[:64]!r}: unknown, "
                                               "or its result was already read"})
        return await self.app(scope, receive, send)

    async def _call_direct(self, name: str, receive, send) -> None:
        body = await read_body(receive)
        if body is None:  # the client went away
            return
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("data", []), list):
            return await json_response(send, 422, {"detail": 'the body must be {"data": [...], '
                                           '"session_hash": "..."}'})
        session = doc.get("session_hash")
        result = False
        if isinstance(session, str) and session:
            result = await anyio.to_thread.run_sync(self.direct[name], session)
        event_id = secrets.token_hex(16)
        self.results[event_id] = result
        while len(self.results) > MAX_RESULTS:
            self.results.popitem(last=False)
        await json_response(send, 200, {"event_id": event_id})

    async def _result(self, event_id: str, send) -> None:
        if event_id not in self.results:
            return await json_response(send, 404, {"detail": f"no event {event_id[:64]!r}: unknown, or "
                                           "its result was already read"})
        payload = f"event: complete\ndata: {json.dumps([self.results.pop(event_id)])}\n\n"
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload.encode()})

    def _known(self, event_id: str) -> bool:
        queue = getattr(self.demo, "_queue", None)
        if queue is None:
            return True  # no queue to ask: let Gradio answer
        if event_id in getattr(queue, "event_ids_to_events", {}):
            return True
        return any(event_id in ids for ids in getattr(queue, "pending_event_ids_session",
                                                      {}).values())

