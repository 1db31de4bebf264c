"""How the page is served: the launch settings that keep server files and errors private.

- ``show_error=False``: only ``gr.Error`` messages (written for the client) reach a client;
  Gradio's own exception texts, which can name server paths, stay in the server log.
- ``max_file_size``: every upload (the calculator's ``config.json`` is the page's only one) is
  capped at :data:`MAX_UPLOAD_BYTES`.
- :mod:`app.server.file_routes`: plotly.js from a fixed route (no temporary path), uploads off.
- :mod:`app.server.page_head`: the page's HTML starts with a script slowing Gradio's status
  tracker loops, which otherwise outlive their trackers at 60 frames a second.
- :mod:`app.server.limits`: every body and every event's text is capped before Gradio reads it.
- :mod:`app.server.quiet_errors`: a malformed event is one log line, an unknown session a 404.
- :mod:`app.server.rest_calls`: ``/stop`` over plain REST answered at once, unknown event ids 404.
- :class:`RestDefaults`: ``POST /gradio_api/call/<name>`` with a short ``data`` list gets the
  endpoint's defaults for the arguments left out (Gradio 6 fills defaults only on
  ``/gradio_api/call/v2/<name>`` and in ``gradio_client``).
- :func:`use_read_timeouts`: a client that sends a request's headers or body too slowly is
  disconnected (:mod:`engine.serve.read_timeouts`).
- :func:`private_temp_dir`: Gradio's upload and cache folder (``GRADIO_TEMP_DIR``) made
  private to this process (0700) and removed at shutdown.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from app.server.asgi_body import read_body, replay

MAX_UPLOAD_BYTES = 1 << 20  # 1 MiB
_CALL = re.compile(r"/gradio_api/call/([^/]+)/?$")


GRADIO_ENV = {
    "GRADIO_ANALYTICS_ENABLED": "False",
    # Gradio's queue rebuilds a pandas summary of every event it has recorded (up to 10,000)
    # after each event ends, for its monitoring dashboard, which the page does not use: 2 ms
    # per event on a fresh server, 8 ms once 10,000 are recorded (a class's timer ticks record
    # 15 a second), 6% of the server's GIL time with 4 pages streaming (py-spy). A summary
    # every billion events is none.
    "GRADIO_ANALYTICS_CACHE_FREQUENCY": str(10**9),
}
"""Environment settings for Gradio that the page's server sets (unless the user has) before its
``gr.Blocks`` and queue are made (:func:`set_gradio_env`)."""


def set_gradio_env() -> None:
    """Set :data:`GRADIO_ENV` in ``os.environ`` where not set already; call before building the
    page (Gradio's queue reads them when it is made)."""
    for key, value in GRADIO_ENV.items():
        os.environ.setdefault(key, value)


def api_defaults(demo) -> dict[str, list]:
    """``{api_name: [default of each parameter]}`` for the page's ``gr.api`` endpoints.

    A parameter without a default gets ``None`` (the function then names it as missing).
    The parameters are read the way ``gr.api`` reads them (``gr.Request`` is not one).
    """
    from gradio.components.api_component import Api
    from gradio.utils import get_function_params

    out = {}
    for block_fn in demo.fns.values():
        inputs = list(block_fn.inputs or [])
        if not block_fn.api_name or block_fn.fn is None or not inputs:
            continue
        if not all(isinstance(b, Api) for b in inputs):
            continue
        params = get_function_params(block_fn.fn)
        if len(params) == len(inputs):
            out[block_fn.api_name] = [default if has else None for _, has, default, _ in params]
    return out


class RestDefaults:
    """ASGI middleware: fill in the defaults of ``/gradio_api/call/<name>`` arguments left out.

    Args:
        app: the ASGI app it wraps.
        defaults: ``{api_name: [defaults in parameter order]}`` (see :func:`api_defaults`).
    """

    def __init__(self, app, defaults: dict[str, list]) -> None:
        self.app = app
        self.defaults = defaults

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        m = _CALL.search(scope.get("path", ""))
        defaults = self.defaults.get(m.group(1)) if m else None
        if defaults is None:
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        if body is None:  # the client went away
            return
        body = _padded(body, defaults)
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await self.app({**scope, "headers": headers}, replay(body, receive), send)


def _padded(body: bytes, defaults: list) -> bytes:
    """The request body with ``data`` extended by the defaults of the missing arguments
    (unchanged when it is not such a JSON object or nothing is missing)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list) or len(data) >= len(defaults):
        return body
    doc["data"] = data + defaults[len(data):]
    return json.dumps(doc).encode()



def use_read_timeouts(timeouts=None) -> None:
    """Serve every later uvicorn server of this process that asks for ``http="auto"`` (as
    Gradio's does; it takes no protocol of ours) with read timeouts.

    Args:
        timeouts: an :class:`engine.serve.read_timeouts.ReadTimeouts`; ``None`` = its defaults.
    """
    from uvicorn import config

    from engine.serve.read_timeouts import ReadTimeouts, timed_http_protocol

    config.HTTP_PROTOCOLS["auto"] = timed_http_protocol(timeouts or ReadTimeouts())


def launch(demo, host: str = "127.0.0.1", port: int | None = None, share: bool = False,
           max_threads: int = 40, read_timeouts=None, **kwargs) -> tuple[str, str | None]:
    """``demo.launch`` with this module's settings, without blocking; returns
    ``(local_url, share_url)``. ``read_timeouts`` (an
    :class:`engine.serve.read_timeouts.ReadTimeouts`, ``None`` = its defaults) bounds how long a
    client may take to send a request. Extra keyword arguments (``theme``, ``css``...) go to
    ``launch``."""
    from starlette.middleware import Middleware

    from .file_routes import FileRoutes
    from .limits import TextLimit, page_body_limit
    from .live_route import LiveRoute
    from .page_head import PageHead
    from .quiet_errors import QueueGuard, install
    from .rest_calls import RestCalls

    middleware = [Middleware(page_body_limit),  # outermost first
                  Middleware(PageHead),
                  Middleware(FileRoutes, traces=getattr(demo, "trace_links", None)),
                  Middleware(LiveRoute, feeds=getattr(demo, "live_feeds", None)),
                  Middleware(TextLimit), Middleware(QueueGuard, demo=demo),
                  Middleware(RestCalls, demo=demo),
                  Middleware(RestDefaults, defaults=api_defaults(demo))]
    use_read_timeouts(read_timeouts)
    install()  # a malformed event: one log line, not a traceback
    _, local_url, share_url = demo.launch(
        server_name=host, server_port=port, share=share, prevent_thread_lock=True, quiet=True,
        show_error=False, max_file_size=MAX_UPLOAD_BYTES, max_threads=max_threads,
        app_kwargs={"middleware": middleware}, **kwargs)
    return local_url, share_url


@contextmanager
def private_temp_dir() -> Iterator[Path]:
    """Point ``GRADIO_TEMP_DIR`` (uploads and the copies of served files) at a fresh 0700
    folder for the life of the block, then remove it.

    A ``GRADIO_TEMP_DIR`` set by the user is kept as it is (and not removed). Yields the
    folder Gradio uses.
    """
    own = not os.environ.get("GRADIO_TEMP_DIR")
    folder = Path(tempfile.mkdtemp(prefix="llm-playground-gradio-")) if own \
        else Path(os.environ["GRADIO_TEMP_DIR"])
    if own:
        os.environ["GRADIO_TEMP_DIR"] = str(folder)
    try:
        yield folder
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
            if os.environ.get("GRADIO_TEMP_DIR") == str(folder):
                del os.environ["GRADIO_TEMP_DIR"]
