"""Rolling latency statistics over the most recent requests (p50/p90/p99, outcome counts)."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from engine.output.events import RequestOutput

_PCTS = (50, 90, 99)


def percentiles(values: list[float]) -> dict:
    """``{"p50", "p90", "p99"}`` of ``values`` with numpy's linear interpolation (docs/metrics.md);
    every value ``None`` when ``values`` is empty."""
    if not values:
        return {f"p{p}": None for p in _PCTS}
    got = np.percentile(np.asarray(values, dtype=float), _PCTS, method="linear")
    return {f"p{p}": float(v) for p, v in zip(_PCTS, got)}


class RollingStats:
    """Latency percentiles over the last ``window`` requests; safe across threads.

    Finished means finish reason ``stop`` or ``length``; aborted ``abort``; failed ``error``.
    Percentiles use finished requests only: TTFT and e2e for every one of them, TPOT for those
    with more than one output token (TPOT is undefined below two). Times are seconds.

    Users' requests and lesson runs (``RequestOutput.source == "lesson"``: 1,024-token sweeps,
    KV-off runs) are kept in two windows, so a lesson neither inflates the users' percentiles
    nor pushes users' requests out of the window.
    """

    def __init__(self, window: int = 100):
        if window < 1:
            raise ValueError("window must be at least 1")
        self.window = window
        self._items: dict[str, deque] = {"user": deque(maxlen=window), "lesson": deque(maxlen=window)}
        self._lock = threading.Lock()
        self.version = 0  # changes on every add and reset (a cached view of the table compares it)

    def add(self, output: RequestOutput) -> None:
        """Record a completed request (any finish reason); the oldest drops out past the window."""
        m = output.metrics
        item = (output.finish_reason, m.ttft_s, m.tpot_s, m.e2e_s, m.output_tokens)
        kind = "lesson" if getattr(output, "source", "user") == "lesson" else "user"
        with self._lock:
            self._items[kind].append(item)
            self.version += 1

    def reset(self) -> None:
        """Forget every recorded request (users' and lessons')."""
        with self._lock:
            for items in self._items.values():
                items.clear()
            self.version += 1

    def summary(self) -> dict:
        """Counts and percentiles of the users' requests in the window, and the lessons' apart.

        Returns:
            ``{"count", "finished", "aborted", "failed", "ttft_s", "tpot_s", "e2e_s",
            "tpot_count"}`` of the users' requests, the three times each a :func:`percentiles`
            dict in seconds, ``tpot_count`` the finished requests TPOT covers (two or more
            output tokens), and
            ``"lessons"``: the same dict for lesson runs (without a nested ``"lessons"``).
        """
        with self._lock:
            users, lessons = list(self._items["user"]), list(self._items["lesson"])
        return {**_summary(users), "lessons": _summary(lessons)}


def _summary(items: list) -> dict:
    ok = [it for it in items if it[0] in ("stop", "length")]
    return {
        "count": len(items),
        "finished": len(ok),
        "aborted": sum(1 for it in items if it[0] == "abort"),
        "failed": sum(1 for it in items if it[0] == "error"),
        "ttft_s": percentiles([it[1] for it in ok]),
        "tpot_s": percentiles([it[2] for it in ok if it[4] > 1]),
        "tpot_count": sum(1 for it in ok if it[4] > 1),
        "e2e_s": percentiles([it[3] for it in ok]),
    }
