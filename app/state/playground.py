"""The app's one view of the engine: requests per browser session, Stop, traces, device readings.

``Playground`` wraps an ``LLMEngine`` (it never imports torch). Each browser tab (Gradio
session) and each API client has a session id; the playground remembers which engine requests
belong to it, so Stop and closing the tab abort exactly that session's work in the engine.

Prefix cache: by default each session gets its own random salt (``cache_salt`` of
``engine.submit``), so a request reuses cached prompt blocks of its own session only and no user
can confirm another's prompt prefix by timing; ``shared_prefix_cache=True`` lets every user share
the cache (a classroom with one system prompt), and then the engine-wide prefix hit rate is shown.

Trace files hold the answers, so they are private: a 0700 folder per session (named by a
random token, which is also what makes their download URLs unguessable), 0600 files, deleted
when the session ends and, with the whole trace folder, at shutdown.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections import OrderedDict, deque
from pathlib import Path
from typing import Iterator

from engine import SamplingParams
from engine.protocol import BlockPoolSnapshot, EngineClient, EngineStats

from app.render.cards import kv_element_bytes
from app.state.device_monitor import DeviceMonitor
from app.state.live_feeds import LiveFeeds
from app.state.trace_links import TraceLinks

KEEP_TRACES = 100  # trace file pairs kept on disk
KEEP_SESSIONS = 1000  # sessions whose recent request ids are remembered (marks "you" after a request ends)
KEEP_IDS = 16  # recent request ids remembered per session
log = logging.getLogger("app")


class Playground:
    """Shared by every session of the page.

    Args:
        engine: a running :class:`engine.protocol.EngineClient` (``LLMEngine``, a remote
            engine, a test's fake).
        trace_dir: folder for trace downloads (created 0700 when missing); when ``None``, a
            fresh private folder in ``trace_parent``, removed by :meth:`close`.
        trace_parent: where that fresh folder goes (the system's temporary folder when ``None``).
        monitor: start the background device sampler.
        shared_prefix_cache: let every session reuse every other session's cached prompt
            prefixes (``cache_salt=None``); by default each session has its own secret salt.
    """

    def __init__(self, engine: EngineClient, trace_dir: str | Path | None = None, monitor: bool = True,
                 trace_parent: str | Path | None = None, shared_prefix_cache: bool = False) -> None:
        self.engine = engine
        self._salted = not shared_prefix_cache
        self.capabilities = engine.capabilities
        if self._salted and not self.capabilities.supports_cache_salt:
            log.warning("this engine's submit() takes no cache_salt: every user shares its prefix cache")
            self._salted = False
        self._salts: OrderedDict[str, str] = OrderedDict()
        self.info = engine.info
        spec = engine.spec  # None for a remote engine: no model shape
        self.bytes_per_token = int(spec.kv_bytes_per_token(kv_element_bytes(self.info))) if spec else 0
        self._own_trace_dir = trace_dir is None
        self.trace_dir = Path(trace_dir or tempfile.mkdtemp(prefix="llm-playground-traces-", dir=trace_parent))
        self.trace_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._trace_dirs: dict[str, Path] = {}  # session -> its private trace folder
        self.trace_links = TraceLinks()  # what clients get instead of the traces' paths
        self.live_feeds = LiveFeeds()  # runs' frames read by their pages (app.server.live_route)
        self.pool_bytes = engine.pool_bytes
        # the blocks the scheduler hands out and their size (the pool may keep one more as the
        # compiled step's scratch), for the KV formula line; (0, 0) without a block pool
        stats = engine.stats()
        self.pool_blocks = (int(stats.blocks_total or 0), int(stats.block_size or 0))
        # what a remote engine draws instead of its KV and memory panels (None for a local one)
        self.remote_view = engine.remote_view
        self.device = DeviceMonitor(engine.gpu, self.info.device)
        if monitor:
            self.device.start()
        self._active: dict[str, set] = {}
        self._recent: OrderedDict[str, deque] = OrderedDict()
        self._lock = threading.Lock()
        self._trace_lock = threading.Lock()  # one trace write and prune at a time

    @property
    def prefix_cache_shared(self) -> bool:
        """Whether sessions share cached prompt prefixes (then timing reveals them to others)."""
        return not self._salted

    def cache_salt(self, session_id: str) -> str | None:
        """The session's prefix-cache salt: a random secret made on first use and kept per
        session (the latest :data:`KEEP_SESSIONS`), never derived from the session id;
        ``None`` when the cache is shared."""
        if not self._salted:
            return None
        with self._lock:
            salt = self._salts.get(session_id)
            if salt is None:
                salt = self._salts[session_id] = secrets.token_hex(16)
            self._salts.move_to_end(session_id)
            while len(self._salts) > KEEP_SESSIONS:
                self._salts.popitem(last=False)
            return salt

    def engine_kwargs(self, session_id: str) -> dict:
        """Keyword arguments for ``engine.submit``/``generate`` on behalf of a session
        (``cache_salt`` when the prefix cache is per session)."""
        return {"cache_salt": self.cache_salt(session_id)} if self._salted else {}

    @property
    def max_seq_tokens(self) -> int:
        """Longest prompt + output one request may reach (the context window, or less when the
        engine's KV pool is smaller)."""
        return int(self.engine.max_seq_tokens or self.info.context_len)

    # ---- requests -----------------------------------------------------------------------------
    def submit(self, session_id: str, prompt, params: SamplingParams, raw: bool = False,
               use_kv_cache: bool = True, engine: EngineClient | None = None, **kwargs):
        """Queue a request for a session.

        Args:
            engine: another engine to run it on (the Compare tab's second variant); the
                served engine when ``None``. Stop and closing the tab reach it all the same.
            kwargs: more ``submit`` arguments (``speculative``; a ``cache_salt`` of the
                caller's, which replaces the session's).

        Raises:
            ValueError: bad prompt or prompt + max_tokens beyond the context window.
            QueueFullError: the engine's waiting queue is full.
        """
        engine = engine or self.engine
        kwargs = {**self.engine_kwargs(session_id), **kwargs}
        if not engine.capabilities.supports_cache_salt:  # a remote server beside the page
            kwargs.pop("cache_salt", None)
        handle = engine.submit(prompt, params, raw=raw, use_kv_cache=use_kv_cache, **kwargs)
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

    def end_session(self, session_id: str) -> None:
        """The session is gone (its tab closed): abort its requests, delete its traces and
        forget its salt."""
        self.stop(session_id)
        with self._lock:
            self._recent.pop(session_id, None)
            self._salts.pop(session_id, None)
            folder = self._trace_dirs.pop(session_id, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    # ---- telemetry for the panels -----------------------------------------------------------------
    def write_trace(self, output, events, session_id: str = "") -> tuple[str, str] | None:
        """Write the request's trace as JSON and CSV into the session's private folder (0600
        files); returns their paths (``None`` on failure, and for a remote engine, whose steps
        this page does not see)."""
        if not self.capabilities.supports_traces:
            return None
        from engine.telemetry.trace import write_trace

        # one write-and-prune at a time: a class of pages finishes at once, and a prune must not
        # remove a file another page has just listed, nor the folder another is writing into
        with self._trace_lock:
            try:
                paths = write_trace(self._session_trace_dir(session_id), output, events,
                                    self.engine.spec, kv_element_bytes(self.info))
                for path in paths:
                    os.chmod(path, 0o600)
            except Exception:  # a trace is a nicety: never fail the request for it
                return None
            try:
                self._prune_traces()
            except OSError:  # pruning is housekeeping: never fail the request for it
                log.warning("could not prune old traces", exc_info=True)
        return str(paths[0]), str(paths[1])

    def _session_trace_dir(self, session_id: str) -> Path:
        with self._lock:
            folder = self._trace_dirs.get(session_id)
            if folder is None or not folder.is_dir():
                folder = self.trace_dir / secrets.token_hex(16)
                folder.mkdir(mode=0o700)
                self._trace_dirs[session_id] = folder
            return folder

    def _prune_traces(self) -> None:
        """Keep the newest :data:`KEEP_TRACES` traces; a session folder left empty goes too.

        Called by :meth:`write_trace` under ``_trace_lock``; a file or folder removed meanwhile
        (a session that ended) is skipped.
        """
        dated = []
        for path in self.trace_dir.glob("*/trace_*"):
            try:
                dated.append((path.stat().st_mtime, str(path), path))
            except FileNotFoundError:  # removed since the listing
                continue
        dated.sort()
        emptied = set()
        for _, _, old in dated[: max(0, len(dated) - 2 * KEEP_TRACES)]:
            old.unlink(missing_ok=True)
            emptied.add(old.parent)
        with self._lock:
            for folder in emptied:
                try:
                    if folder.is_dir() and not any(folder.iterdir()):
                        folder.rmdir()
                except OSError:  # gone already, or a new trace arrived
                    continue
                self._trace_dirs = {k: v for k, v in self._trace_dirs.items() if v != folder}

    def rolling_summary(self) -> dict:
        """``engine.rolling.summary()``: p50/p90/p99 over recent requests of every session, lesson
        runs apart under ``"lessons"``."""
        return self.engine.rolling_summary()

    def reset_rolling(self) -> None:
        """Empty the recent-requests table (for every page: the statistics are the server's)."""
        if self.capabilities.supports_rolling_reset:
            self.engine.reset_rolling()

    def batch_data(self) -> tuple[EngineStats, BlockPoolSnapshot, list]:
        """The engine's batching state for the page: ``(stats, block snapshot, recent steps)``.

        ``stats`` is :meth:`visible_stats`. Engines without continuous batching give ``batching``
        False, an empty snapshot and ``[]``.
        """
        stats = self.visible_stats()
        snapshot = self.engine.block_snapshot()
        recent = self.engine.recent_steps or ()
        for _ in range(3):  # the engine thread appends while we copy
            try:
                steps = list(recent)
                break
            except RuntimeError:
                steps = []
        return stats, snapshot, steps

    def stats(self) -> dict:
        """For the ``/stats`` JSON endpoint: :meth:`visible_stats` as a dict
        (:meth:`engine.protocol.EngineStats.as_dict`) plus the playground's followed requests,
        whether the prefix cache is shared, and a timestamp."""
        return {**self.visible_stats().as_dict(), "followed": self.active_count(),
                "prefix_cache_shared": self.prefix_cache_shared, "time_s": time.time()}

    def engine_stats(self) -> EngineStats:
        """The engine's :class:`engine.protocol.EngineStats` now."""
        return self.engine.stats()

    def visible_stats(self) -> EngineStats:
        """The engine's stats as clients may see them: the engine-wide prefix-cache hit rate
        (``prefix_hit_rate``) is ``None`` unless the cache is shared, since it counts other
        users' hits."""
        stats = self.engine_stats()
        if self.prefix_cache_shared or stats.prefix_hit_rate is None:
            return stats
        return dataclasses.replace(stats, prefix_hit_rate=None)

    def close(self) -> None:
        """Stop the device sampler and delete every trace (the whole trace folder when the
        playground made it). The engine belongs to the caller."""
        self.device.stop()
        with self._lock:
            folders, self._trace_dirs = list(self._trace_dirs.values()), {}
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        if self._own_trace_dir:
            shutil.rmtree(self.trace_dir, ignore_errors=True)

