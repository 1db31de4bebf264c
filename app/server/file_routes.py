"""The page's file routes: its one static file served from a fixed route, and uploads off.

- ``GET /playground-static/plotly.min.js`` serves plotly.js from the installed plotly
  package (:func:`app.plot_panel.plotly_js`). Served through Gradio's ``/gradio_api/file=``
  it needed a public folder of its own, whose absolute temporary path then showed in
  ``/config`` and in the page's HTML.
- ``GET /playground-traces/<token>/<name>`` serves a trace download by its opaque link
  (:mod:`app.state.trace_links`); the Generate result carries that link, never the file's
  server path (Gradio's ``path`` and ``/gradio_api/file=`` URL named the temporary folder).
  :func:`link_trace_buttons` makes the page's two trace buttons answer with such links.
- Uploads are off: the page needs none (the calculator takes a ``config.json`` as pasted
  text), and Gradio keeps every upload until shutdown, answers with its absolute path and
  lets any client read it. ``/gradio_api/upload`` answers 403.
"""

from __future__ import annotations

from app.server.asgi_body import json_response
from app.state.trace_links import TRACE_ROUTE

STATIC_ROUTE = "/playground-static/"
"""Where the page's own static files are served."""
_UPLOAD = "/gradio_api/upload"


def static_files() -> dict:
    """``{file name: path}`` of the files under :data:`STATIC_ROUTE`."""
    from app.tabs.playground.plot_panel import plotly_js

    return {"plotly.min.js": plotly_js()}


TRACE_BUTTONS = ("trace-json", "trace-csv")
"""``elem_id`` of the Playground's trace download buttons."""


def link_trace_buttons(demo, links) -> int:
    """Make the page's trace download buttons (:data:`TRACE_BUTTONS`) answer with opaque links
    from ``links`` (an :class:`app.state.trace_links.TraceLinks`) instead of the files' paths,
    and keep ``links`` on ``demo`` for :func:`app.server.launch.launch`'s file route.

    Returns:
        How many buttons were changed (0 on a page without them, or with ``links`` ``None``).
    """
    demo.trace_links = links
    if links is None:
        return 0
    changed = 0
    for block in demo.blocks.values():
        if getattr(block, "elem_id", None) in TRACE_BUTTONS:
            block.postprocess = links.file_data  # this button's values only
            changed += 1
    return changed


class FileRoutes:
    """ASGI middleware: :data:`STATIC_ROUTE` files, trace downloads by opaque link, and 403 for
    uploads.

    Args:
        app: the ASGI app it wraps.
        files: ``{file name: path}`` served under :data:`STATIC_ROUTE` (default
            :func:`static_files`).
        traces: the :class:`app.state.trace_links.TraceLinks` whose links are served (``None``:
            every trace link answers 404).
    """

    def __init__(self, app, files: dict | None = None, traces=None) -> None:
        self.app = app
        self.files = static_files() if files is None else dict(files)
        self.traces = traces

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if path.rstrip("/") == _UPLOAD or path.startswith(_UPLOAD + "/"):
            return await json_response(send, 403, {"detail": "uploads are off on this server: paste "
                                           "the config.json's text instead"})
        if path.startswith(STATIC_ROUTE) and scope.get("method") in ("GET", "HEAD"):
            name = path[len(STATIC_ROUTE):]
            if name in self.files:
                from starlette.responses import FileResponse

                response = FileResponse(self.files[name], headers={
                    "cache-control": "public, max-age=86400"})
                return await response(scope, receive, send)
            return await json_response(send, 404, {"detail": "no such file"})
        if path.startswith(TRACE_ROUTE) and scope.get("method") in ("GET", "HEAD"):
            found = self.traces.resolve(path) if self.traces is not None else None
            if found is None:
                return await json_response(send, 404, {"detail": "no such trace (traces are deleted "
                                               "with their session)"})
            from starlette.responses import FileResponse

            response = FileResponse(found, filename=found.name,
                                    headers={"cache-control": "private, no-store"})
            return await response(scope, receive, send)
        return await self.app(scope, receive, send)

