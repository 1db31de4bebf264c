"""Who may run a lesson now: one run per session and a few per server, refused with a clear
"busy" line rather than queued.

Every event of the page is callable through Gradio's queue API, hidden ones included, so any
client can start a lesson's experiment (the quantization lesson loads four model variants,
about 2.4 GB, for two minutes). :func:`gated` wraps a lesson's handler: a session whose last
run is still going, or a server with :data:`MAX_RUNS` runs going, gets a ``gr.Error`` at once;
a run that ends gives its memory back (:func:`release_memory`). The experiments themselves
build their own engines with the eager decode step (``engine.experiments.common``), so no
lesson adds graphs to the serving engine's compiled step.
"""

from __future__ import annotations

import functools
import gc
import inspect
import secrets
import threading
from contextlib import contextmanager

MAX_RUNS = 2
"""Lesson runs going at once on a server (each session one at most)."""


class LessonGate:
    """Counts the lesson runs going, per session and in all.

    Args:
        max_runs: most runs at once on the server (>= 1).
    """

    def __init__(self, max_runs: int = MAX_RUNS) -> None:
        self.max_runs = max_runs
        self._running: dict[str, str] = {}  # session -> what it runs
        self._lock = threading.Lock()

    @property
    def running(self) -> int:
        """Runs going now."""
        return len(self._running)

    @contextmanager
    def run(self, session_id: str | None, what: str):
        """Hold a place for one run of ``what`` by ``session_id`` (``None``: a caller without a
        session, a place of its own) while the block runs.

        Raises:
            gradio.Error: the session runs a lesson already, or the server runs
                :attr:`max_runs` (the message says which and what to do).
        """
        import gradio as gr

        key = session_id or "no-session-" + secrets.token_hex(8)
        with self._lock:
            if key in self._running:
                raise gr.Error(f"Your {self._running[key]} run is still going: one lesson run "
                               "per session at a time. Wait for it to finish.", print_exception=False)
            if len(self._running) >= self.max_runs:
                raise gr.Error(f"The server is busy: {len(self._running)} lesson runs are going "
                               f"(at most {self.max_runs} at once). Try again in a minute.",
                               print_exception=False)
            self._running[key] = what
        try:
            yield
        finally:
            with self._lock:
                self._running.pop(key, None)
            release_memory()


GATE = LessonGate()
"""The server's one gate (every page of the process shares it)."""


def release_memory() -> None:
    """Give a finished run's memory back: collect its cycles (model variants, engines), and on
    glibc return the freed heap to the system (``malloc_trim``), so the process does not keep a
    quantization run's gigabytes."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the allocator keeps what it keeps
        pass


def gated(fn, what: str, gate: LessonGate | None = None):
    """``fn`` (a lesson's handler: a function or a generator function) run inside
    ``gate.run(session, what)`` (default :data:`GATE`).

    The wrapper's signature is ``fn``'s with a ``request: gr.Request`` parameter added at the
    end when ``fn`` has none (Gradio fills it in; ``fn`` is called without it).
    """
    import gradio as gr

    sig = inspect.signature(fn)
    wants_request = "request" in sig.parameters
    params = list(sig.parameters.values())
    if not wants_request:
        params.append(inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=None, annotation=gr.Request))
    outer = sig.replace(parameters=params)

    def call(args, kwargs):
        bound = outer.bind(*args, **kwargs)
        request = bound.arguments.get("request")
        if not wants_request:
            bound.arguments.pop("request", None)
        session = getattr(request, "session_hash", None) if request is not None else None
        return session, bound

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            session, bound = call(args, kwargs)
            with (gate or GATE).run(session, what):
                yield from fn(*bound.args, **bound.kwargs)
    else:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            session, bound = call(args, kwargs)
            with (gate or GATE).run(session, what):
                return fn(*bound.args, **bound.kwargs)
    wrapper.__signature__ = outer
    wrapper.__annotations__ = {**getattr(fn, "__annotations__", {}), "request": gr.Request}
    return wrapper
