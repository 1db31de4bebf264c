"""Reading a request's whole body inside ASGI middleware, and handing it on.

The page's middlewares (:mod:`app.server.launch`'s defaults for REST calls,
:mod:`app.server.limits`, :mod:`app.server.rest_calls`) each need the body before the app sees
it; they share these two helpers.
"""

from __future__ import annotations


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
