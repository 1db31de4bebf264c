"""How often each streaming page gets a frame, so that a class of pages costs the server a
bounded amount of work per second.

Every frame of a page's stream costs the server about the same (the handler builds the text,
cards and chips; Gradio post-processes the outputs, diffs them against the last frame and sends
the message; a few milliseconds in all), and the engine's thread shares the process, and the CPU
with it. At a fixed cadence per page, N pages cost N times as much, and with 30 pages on one core
the frames alone would take the core from the engine: every page's tokens would slow down.

So the pages share one budget: up to :data:`FULL_RATE_PAGES` pages streaming at once, each gets
the page's own cadence (``app.handlers``' intervals); beyond that every interval grows in
proportion (``stretch = pages / FULL_RATE_PAGES``), keeping the frames of all pages together
near what :data:`FULL_RATE_PAGES` pages cost. Each page still gets every token: a frame
carries all the tokens that arrived since the last one. Tokens are made at the engine's own
speed whatever the pages read; a page that reads slowly only gets fewer frames.

The budget also counts the frames it hands out, so the page can show the teacher how many pages
are streaming and at what frame rate (:meth:`FrameBudget.summary`).
"""

from __future__ import annotations

import threading
import time
from collections import deque

FULL_RATE_PAGES = 2     # pages streaming at once before the intervals stretch
RATE_WINDOW_S = 5.0     # frames counted over the last this many seconds for the rate shown


class FrameBudget:
    """The streaming pages of one server, and the frames they were sent.

    Args:
        full_rate_pages: pages that get the full cadence (see :data:`FULL_RATE_PAGES`).
        clock: seconds clock (``time.monotonic``; tests pass a fake).
    """

    def __init__(self, full_rate_pages: int = FULL_RATE_PAGES, clock=time.monotonic) -> None:
        if full_rate_pages < 1:
            raise ValueError(f"full_rate_pages must be at least 1, got {full_rate_pages}")
        self.full_rate_pages = full_rate_pages
        self.clock = clock
        self._lock = threading.Lock()
        self._streams: dict[object, int] = {}   # stream token -> frames sent
        self._frames: deque[float] = deque()    # send times of recent frames (all pages)

    def open(self) -> object:
        """A page starts streaming; returns its token for :meth:`frame` and :meth:`close`."""
        token = object()
        with self._lock:
            self._streams[token] = 0
        return token

    def close(self, token: object) -> None:
        """The page's stream ended (finished, refused, or the page went away)."""
        with self._lock:
            self._streams.pop(token, None)

    def stretch(self) -> float:
        """Factor (>= 1) by which every page's redraw intervals grow now."""
        with self._lock:
            n = len(self._streams)
        return max(1.0, n / self.full_rate_pages)

    def frame(self, token: object) -> None:
        """Count one frame sent to the page of ``token``."""
        now = self.clock()
        with self._lock:
            if token in self._streams:
                self._streams[token] += 1
            self._frames.append(now)
            self._trim(now)

    def _trim(self, now: float) -> None:
        while self._frames and self._frames[0] < now - RATE_WINDOW_S:
            self._frames.popleft()

    def summary(self) -> tuple[int, float]:
        """``(pages streaming now, frames per second each got)`` over the last
        :data:`RATE_WINDOW_S` seconds (0.0 with no page streaming)."""
        now = self.clock()
        with self._lock:
            self._trim(now)
            n = len(self._streams)
            frames = len(self._frames)
        return n, (frames / RATE_WINDOW_S / n) if n else 0.0
