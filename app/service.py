"""The app's one view of the engine: requests per browser session, Stop, traces, device readings.

``Playground`` wraps an ``LLMEngine`` (it never imports torch). Each browser tab (Gradio
session) and each API client has a session id; the playground remembers which engine requests
belong to it, so Stop and closing the tab abort exactly that session's work in the engine.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import OrderedDict, deque
from pathlib import Path
from typing import Iterator

from engine import SamplingParams

from .cards import kv_element_bytes
from .monitor import DeviceMonitor

KEEP_TRACES = 100  # trace file pairs kept on disk
KEEP_SESSIONS = 1000  # sessions whose recent request ids are remembered (marks "you" after a request ends)
KEEP_IDS = 16  # recent request ids remembered per session


class Playground:
    """Shared by every session of the page.

    Args:
        engine: a running ``LLMEngine`` (or anything with its API).
        trace_dir: folder for trace downloads; a fresh temporary folder when ``None``.
        monitor: start the background device sampler.
    """

    def __init__(self, engine, trace_dir: str | Path | None = None, monitor: bool = True) -> None:
        self.engine = engine
        self.info = engine.info
        self.bytes_per_token = int(self.info.spec.kv_bytes_per_token(kv_element_bytes(self.info)))
        self.pool_bytes = getattr(getattr(engine, "pool", None), "nbytes", None)
        self.trace_dir = Path(trace_dir or tempfile.mkdtemp(prefix="llm-playground-traces-"))
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        self.device = DeviceMonitor(getattr(engine, "gpu", None), self.info.device)
        if monitor:
            self.device.start()
        self._active: dict[str, set] = {}
        self._recent: OrderedDict[str, deque] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def max_seq_tokens(self) -> int:
        """Longest prompt + output one request may reach (the context window, or less when the
        engine's KV pool is smaller)."""
        return int(getattr(self.engine, "max_seq_tokens", None) or self.info.context_len)

    # ---- requests -----------------------------------------------------------------------------
    def submit(self, session_id: str, prompt, params: SamplingParams, raw: bool = False,
               use_kv_cache: bool = True):
        """Queue a request for a session.

        Raises:
            ValueError: bad prompt or prompt + max_tokens beyond the context window.
            QueueFullError: the engine's waiting queue is full.
        """
        handle = self.engine.submit(prompt, params, raw=raw, use_kv_cache=use_kv_cache)
        with self._lock:
            self._active.setdefault(session_id, set()).add(handle)
            self._recent.setdefault(session_id, deque(maxlen=KEEP_IDS)).append(str(handle.request_id))
            self._recent.move_to_end(session_id)
            while len(self._recent) > KEEP_SESSIONS:
                self._recent.popitem(last=False)
        return handle

    def session_request_ids(self, session_id: str) -> set[str]:
        """The engine request ids that belong to a session: its unfinished requests and its last
        few finished ones (so the page marks "you" in the recent steps after an answer ends)."""
        with self._lock:
            return ({str(h.request_id) for h in self._active.get(session_id, ())}
                    | set(self._recent.get(session_id, ())))

    def session_busy(self, session_id: str) -> bool:
        """Whether the session has a request the page is following now."""
        with self._lock:
            return bool(self._active.get(session_id))

    def stop(self, session_id: str) -> bool:
        """Abort every unfinished request of a session in the engine (frees their KV caches).

        Returns:
            True if at least one request was still waiting or running.
        """
        with self._lock:
            handles = list(self._active.get(session_id, ()))
        return any([h.abort() for h in handles])

    def release(self, session_id: str, handle) -> None:
        """Forget a request; abort it first if it is unfinished (the page went away)."""
        try:
            handle.close()
        finally:
            with self._lock:
                group = self._active.get(session_id)
                if group is not None:
                    group.discard(handle)
                    if not group:
                        del self._active[session_id]

    def active_count(self) -> int:
        """Requests the playground is following now (all sessions)."""
        with self._lock:
            return sum(len(g) for g in self._active.values())

    @staticmethod
    def follow(handle, poll_s: float = 0.1) -> Iterator[list]:
        """Yield the request's new step events in batches, at least every ``poll_s`` seconds.

        An empty batch means nothing new yet (the request waits in the queue or a step is
        running); the iterator ends once the request has finished and every event was yielded.
        """
        seen = 0
        while True:
            done = handle.finished  # read before the events: nothing is pushed after finishing
            events = handle.events
            new = events[seen:]
            seen += len(new)
            yield new
            if done:
                return
            try:
                handle.result(timeout=poll_s)
            except TimeoutError:
                pass

    # ---- telemetry for the panels -----------------------------------------------------------------
    def write_trace(self, output, events) -> tuple[str, str] | None:
        """Write the request's trace as JSON and CSV; returns their paths (``None`` on failure)."""
        from engine.telemetry.trace import write_trace

        try:
            paths = write_trace(self.trace_dir, output, events, getattr(self.engine, "spec", None),
                                kv_element_bytes(self.info))
        except Exception:  # a trace is a nicety: never fail the request for it
            return None
        self._prune_traces()
        return str(paths[0]), str(paths[1])

    def _prune_traces(self) -> None:
        files = sorted(self.trace_dir.glob("trace_*"), key=lambda p: p.stat().st_mtime)
        for old in files[: max(0, len(files) - 2 * KEEP_TRACES)]:
            old.unlink(missing_ok=True)

    def rolling_summary(self) -> dict:
        """``engine.rolling.summary()`` (p50/p90/p99 over recent requests of every session)."""
        rolling = getattr(self.engine, "rolling", None)
        return rolling.summary() if rolling is not None else {}

    def batch_data(self) -> tuple[dict, dict, list]:
        """The engine's batching state for the page: ``(stats, block snapshot, recent steps)``.

        Engines without continuous batching (or fakes) give ``batching`` False, ``{}`` and ``[]``.
        """
        stats = dict(self.engine.stats())
        stats.setdefault("batching", False)
        snap_fn = getattr(self.engine, "block_snapshot", None)
        snapshot = (snap_fn() or {}) if callable(snap_fn) else {}
        recent = getattr(self.engine, "recent_steps", None) or ()
        for _ in range(3):  # the engine thread appends while we copy
            try:
                steps = list(recent)
                break
            except RuntimeError:
                steps = []
        return stats, snapshot, steps

    def stats(self) -> dict:
        """Engine counts (waiting, running, finished, aborted, failed, queue_max) plus the
        playground's followed requests and a timestamp."""
        return {**self.engine.stats(), "followed": self.active_count(), "time_s": time.time()}

    def close(self) -> None:
        """Stop the device sampler (the engine belongs to the caller)."""
        self.device.stop()
