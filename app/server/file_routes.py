"""The page's file routes: its one static file served from a fixed route, and uploads off.

- ``GET /playground-static/plotly.min.js`` serves plotly.js from the installed plotly
  package (:func:`app.plot_panel.plotly_js`). Served through Gradio's ``/gradio_api/file=``
  it needed a public folder of its own, whose absolute temporary path then showed in
  ``/config`` and in the page's HTML.
- Uploads are off: the page needs none (the calculator takes a ``config.json`` as pasted
  text), and Gradio keeps every upload until shutdown, answers with its absolute path and
  lets any client read it. ``/gradio_api/upload`` answers 403.
"""

from __future__ import annotations

import json

STATIC_ROUTE = "/playground-static/"
"""Where the page's own static files are served."""
_UPLOAD = "/gradio_api/upload"


def static_files() -> dict:
    """``{file name: path}`` of the files under :data:`STATIC_ROUTE`."""
    from app.tabs.playground.plot_panel import plotly_js

    return {"plotly.min.js": plotly_js()}


class FileRoutes:
    """ASGI middleware: :data:`STATIC_ROUTE` files, and 403 for uploads.

    Args:
        app: the ASGI app it wraps.
        files: ``{file name: path}`` served under :data:`STATIC_ROUTE` (default
            :func:`static_files`).
    """

    def __init__(self, app, files: dict | None = None) -> None:
        self.app = app
        self.files = static_files() if files is None else dict(files)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if path.rstrip("/") == _UPLOAD or path.startswith(_UPLOAD + "/"):
            return await _json(send, 403, {"detail": "uploads are off on this server: paste "
                                           "the config.json's text instead"})
        if path.startswith(STATIC_ROUTE) and scope.get("method") in ("GET", "HEAD"):
            name = path[len(STATIC_ROUTE):]
            if name in self.files:
                from starlette.responses import FileResponse

                response = FileResponse(self.files[name], headers={
                    "cache-control": "public, max-age=86400"})
                return await response(scope, receive, send)
            return await _json(send, 404, {"detail": "no such file"})
        return await self.app(scope, receive, send)


async def _json(send, status: int, doc: dict) -> None:
    payload = json.dumps(doc).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})
