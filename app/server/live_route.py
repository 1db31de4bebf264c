"""``GET /playground-live/<token>``: a run's live frames, for the page that started it.

The body is newline-delimited JSON, one line per frame (the lines of the live channel's log,
:class:`app.render.live_ops.LiveLog`), sent as the run makes them and ended with the run. The
token comes from the run's first frame (:mod:`app.state.live_feeds`), which only that page's
Gradio stream carries; a feed is read once. An unknown token, or one read already, answers 404.
"""

from __future__ import annotations

import asyncio

from app.server.asgi_body import json_response
from app.state.live_feeds import LIVE_ROUTE

HEADERS = [(b"content-type", b"application/x-ndjson; charset=utf-8"),
           (b"cache-control", b"no-store"),
           (b"x-accel-buffering", b"no")]  # a proxy in front (nginx) passes each line on at once


class LiveRoute:
    """ASGI middleware serving :data:`app.state.live_feeds.LIVE_ROUTE`.

    Args:
        app: the ASGI app it wraps.
        feeds: the page's :class:`app.state.live_feeds.LiveFeeds` (``None``: every path under
            the route answers 404).
    """

    def __init__(self, app, feeds=None) -> None:
        self.app = app
        self.feeds = feeds

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path.startswith(LIVE_ROUTE) or scope.get("method") != "GET":
            return await self.app(scope, receive, send)
        found = self.feeds.attach(path[len(LIVE_ROUTE):], asyncio.get_running_loop()) \
            if self.feeds is not None else None
        if found is None:
            return await json_response(send, 404, {"detail": "no such run streaming (a run's frames are "
                                           "read once, while it streams)"})
        feed, queue = found
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
            while True:
                line = await _next(queue, gone)
                if line is None:  # the run ended, or the page went away
                    break
                chunk = [line]
                while not queue.empty():  # lines that queued meanwhile go in the same chunk
                    more = queue.get_nowait()
                    if more is None:
                        queue.put_nowait(None)
                        break
                    chunk.append(more)
                await send({"type": "http.response.body", "body": "".join(chunk).encode(),
                            "more_body": True})
            if not gone.done():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the connection broke while sending
            pass
        finally:
            gone.cancel()
            feed.broke()  # frames of a run still going go by Gradio again


async def _disconnect(receive) -> None:
    """Return when the client has gone away."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _next(queue: asyncio.Queue, gone: asyncio.Future):
    """The next line of ``queue``, or ``None`` once ``gone`` is done (the page went away)."""
    get = asyncio.ensure_future(queue.get())
    await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
    if get.done():
        return get.result()
    get.cancel()
    return None
