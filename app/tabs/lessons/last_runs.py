"""The figures of each lesson's last run on this page, for the Remedies lesson to quote.

A lesson that ran records a few of its measured figures under its name; the Remedies lesson
shows them beside its own measurements, with the time of the run. One store per process: on a
shared classroom server the last run may be another visitor's (the figures are the engine's
either way). No torch, no Gradio.
"""

from __future__ import annotations

import os
import threading
import time

_RUNS: dict[str, dict] = {}
_LOCK = threading.Lock()
_VERSION = 0


def record(lesson: str, figures: dict) -> None:
    """Keep ``figures`` (plain numbers and strings) as ``lesson``'s last run, stamped with
    ``at`` (``time.time()``, seconds) and ``load`` (the 1-minute load average as it finished,
    ``None`` where the OS has none)."""
    try:
        load = round(os.getloadavg()[0], 1)
    except (OSError, AttributeError):
        load = None
    global _VERSION
    with _LOCK:
        _RUNS[lesson] = {**figures, "at": time.time(), "load": load}
        _VERSION += 1


def latest(lesson: str) -> dict | None:
    """A copy of ``lesson``'s last recorded figures (with ``at``), or ``None`` if it has not run."""
    with _LOCK:
        run = _RUNS.get(lesson)
        return dict(run) if run is not None else None


def version() -> int:
    """A number that changes whenever a run is recorded or the runs are cleared (a page redraws
    what quotes them only when it moved)."""
    with _LOCK:
        return _VERSION


def clear() -> None:
    """Forget every run (for tests)."""
    global _VERSION
    with _LOCK:
        _RUNS.clear()
        _VERSION += 1
