"""Reading a request's whole body inside ASGI middleware, handing it on, and answering JSON.

The page's middlewares (:mod:`app.server.launch`'s defaults for REST calls,
:mod:`app.server.limits`, :mod:`app.server.rest_calls`) each need the body before the app sees
it; they share these helpers, and the page's own routes answer with :func:`json_response`.
"""

from __future__ import annotations

import json


async def read_body(receive) -> bytes | None:
    """The request's body, from all its ``http.request`` messages; ``None`` when the client went
    away before sending it all."""
    body, more = b"", True
    while more:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return None
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


def replay(body: bytes, receive):
    """A ``receive`` that gives ``body`` once (as one message), then the client's own messages
    (its disconnect, when it comes)."""
    sent = False

    async def again():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def json_response(send, status: int, doc: dict) -> None:
    """Answer an ASGI request with ``doc`` as a JSON body and HTTP status ``status``."""
    payload = json.dumps(doc).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
