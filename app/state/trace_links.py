"""Opaque links to trace files: what a client gets instead of the file's server path.

A Generate result used to carry the trace's absolute path in the server's temporary folder
(as Gradio's ``path`` and in its ``/gradio_api/file=`` URL). Each trace file now gets a random
token, and the page serves it at ``/playground-traces/<token>/<file name>``
(:mod:`app.server.file_routes`); the link names no folder of the server. A link works while
its file exists: traces deleted with their session, pruned or removed at shutdown answer 404.
"""

from __future__ import annotations

import secrets
import threading
from pathlib import Path

TRACE_ROUTE = "/playground-traces/"
"""Where trace files are served."""
MAX_LINKS = 1000
"""Links kept before those of deleted files are forgotten (the traces kept are far fewer)."""


class TraceLinks:
    """Token → trace file, shared by the page's download buttons and its file route."""

    def __init__(self) -> None:
        self._files: dict[str, Path] = {}
        self._lock = threading.Lock()

    def link(self, path: str | Path) -> str:
        """A new opaque URL path for the file ``path``: ``/playground-traces/<token>/<name>``."""
        path = Path(path)
        token = secrets.token_urlsafe(18)
        with self._lock:
            if len(self._files) >= MAX_LINKS:
                self._files = {t: p for t, p in self._files.items() if p.is_file()}
            self._files[token] = path
        return f"{TRACE_ROUTE}{token}/{path.name}"

    def resolve(self, route_path: str) -> Path | None:
        """The file behind a URL path made by :meth:`link`; ``None`` for an unknown token, a
        name that is not the file's, or a file that no longer exists."""
        if not route_path.startswith(TRACE_ROUTE):
            return None
        token, _, name = route_path[len(TRACE_ROUTE):].partition("/")
        with self._lock:
            path = self._files.get(token)
        if path is None or name != path.name or not path.is_file():
            return None
        return path

    def file_data(self, value) -> dict | None:
        """A download button's value for the trace file ``value`` (a path; ``None`` stays
        ``None``): Gradio's file fields, with the opaque link as ``url`` and no ``path``. Without
        Gradio's ``meta`` marker Gradio neither copies it nor prefixes its URL."""
        if value is None:
            return None
        url = self.link(value)
        return {"url": url, "orig_name": Path(value).name,
                "mime_type": "text/csv" if str(value).endswith(".csv") else "application/json"}
