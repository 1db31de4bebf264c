"""The Python heap of a serving process: long-lived objects out of the collector's full passes.

A loaded model, its tokenizer, transformers, torch and the compiled decode step leave about
690,000 objects that live as long as the process. CPython's cyclic collector walks all of them
in each full (generation 2) collection, which requests' allocations trigger now and then: under
8 to 32 concurrent bf16 streams on the 2-core AVX-512 EPYC, one every 25 to 50 s, each a pause of
0.5 to 0.6 s in every stream (and one soon after the step is compiled). Frozen, the same load
ran its full collections in 0.02 s each (``gc.callbacks`` timings, 2026-12-02).
:func:`freeze_long_lived` collects once and then moves every surviving object to the permanent
generation (``gc.freeze``), which later collections skip; objects made afterwards (requests,
events) are collected as before.
"""

from __future__ import annotations

import gc
import logging
import threading

log = logging.getLogger("engine")

FREEZE = True
"""Freeze the heap once the engine is built and again once its decode step is compiled."""

_lock = threading.Lock()


def freeze_long_lived(when: str) -> int:
    """Collect garbage, then freeze every object that survives (process-wide).

    Args:
        when: what just finished (for the log), e.g. ``"engine built"``.

    Returns:
        Objects in the permanent generation afterwards (0 when :data:`FREEZE` is off).
    """
    if not FREEZE:
        return 0
    with _lock:
        gc.collect()
        gc.freeze()
        frozen = gc.get_freeze_count()
    log.info("heap frozen after %s: %d long-lived objects left out of collections", when, frozen)
    return frozen


def thaw() -> None:
    """Let the collector free what an engine that shut down leaves in reference cycles (its
    model, pool and thread would otherwise stay frozen while the process goes on: tests, the
    page's lessons and model switches), then freeze what still lives again: unfreeze, then
    :func:`freeze_long_lived` (one full collection, about 0.5 s with a model loaded)."""
    with _lock:
        gc.unfreeze()
    freeze_long_lived("an engine shut down")
