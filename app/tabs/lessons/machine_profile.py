"""This machine's measured profile (read bandwidth, matmul FLOP/s, their ridge point), kept once
for the whole server so every lesson that prints it prints the same figures.

The machine profile panel's "Measure again" (:mod:`app.tabs.lessons.profile_panel`) measures
anew; the Memory-bound and Batch size lessons reuse the last profile while it is younger than
:data:`MAX_AGE_S`, and measure one when there is none.
Each profile carries when it was measured and the machine's load then, and the page prints both
beside the figures (they move with load). No torch here: ``measure`` is the caller's function.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timezone

MAX_AGE_S = 15 * 60
"""A profile older than this (seconds) is measured again before it is reused."""

_LOCK = threading.Lock()
_LAST: dict | None = None


def load_average() -> float | None:
    """The 1-minute load average (runnable processes), or ``None`` where the OS has none."""
    try:
        return round(os.getloadavg()[0], 1)
    except (OSError, AttributeError):
        return None


def current(measure, fresh: bool = False, clock=time.time) -> dict:
    """The server's machine profile: the last one, or a new one from ``measure()``.

    Args:
        measure: ``() -> dict`` with ``bandwidth_gb_per_s``, ``flops_per_s`` and ``ridge``
            (:func:`app.tabs.lessons.roofline.measure_machine` bound to an engine).
        fresh: measure anew even when a recent profile exists (the panel's "Measure again").
        clock: epoch seconds (tests pass a fake).

    Returns:
        A copy of the profile: ``measure()``'s keys, with ``ridge`` (FLOPs per byte) the quotient
        of GFLOP/s and GB/s rounded to one decimal as the lessons print them, plus
        ``measured_at`` (epoch seconds) and ``load_average`` (1 minute, at measuring time, or
        ``None``).
    """
    global _LAST
    with _LOCK:
        now = clock()
        if fresh or _LAST is None or now - _LAST["measured_at"] > MAX_AGE_S:
            m = measure()
            gflops, bw = round(m["flops_per_s"] / 1e9, 1), round(m["bandwidth_gb_per_s"], 1)
            # the ridge is the quotient of the figures as printed (GFLOP/s and GB/s to 0.1), so
            # every lesson's printed division is exact and they all print one value
            ridge = gflops / bw if bw > 0 else float("inf")
            _LAST = {**m, "ridge": ridge, "measured_at": now, "load_average": load_average()}
        return dict(_LAST)


def kept() -> dict | None:
    """A copy of the last profile without measuring (whatever its age), or ``None`` before the
    first measurement."""
    with _LOCK:
        return dict(_LAST) if _LAST is not None else None


def stamp(profile: dict) -> str:
    """``"measured at 18:45 UTC on 2026-12-04, load average 3.1"``: when the profile was taken
    (time and date) and the load then (the figures move with it); the load is left out where
    unknown."""
    at = datetime.fromtimestamp(profile["measured_at"], timezone.utc).strftime("%H:%M UTC on %Y-%m-%d")
    load = profile.get("load_average")
    return f"measured at {at}" + (f", load average {load:g}" if load is not None else "")


def forget() -> None:
    """Drop the kept profile (tests; the next :func:`current` measures)."""
    global _LAST
    with _LOCK:
        _LAST = None
