"""The forward backends of :class:`engine.worker.model_runner.ModelRunner`: each runs a step's
entries and returns the logits of the rows they sample, nothing else (no sampling, no state of
the requests).

- :mod:`.contiguous`: one request at a time on its own contiguous cache, or recomputed without
  one (any transformers architecture).
- :mod:`.eager`: transformers' model code over the paged KV pool, every sequence of a step
  packed into one row.
- :mod:`.cuda_graph`: decode steps replayed from CUDA graphs over static bucket buffers.
- :mod:`engine.worker.compiled.compiled_backend`: decode rows through the compiled compact
  Llama forward over static bucket buffers.

Chosen at wiring (:func:`engine.wiring.paged_backend`).
"""

from __future__ import annotations

from typing import Protocol

import torch

from engine.core.scheduler_output import ScheduledSeq
from engine.worker.runner_info import RunnerInfo


class PagedBackend(Protocol):
    """What the runner asks of a paged forward backend."""

    name: str
    """``"eager"``, ``"cuda_graph"`` or ``"compiled"``."""

    def forward(self, entries: list[ScheduledSeq]) -> torch.Tensor:
        """``[R, V]`` logits: for each entry that samples this step (``entry.samples``), in
        ``entries`` order, its last known token's row and one row per draft it verifies
        (``R`` may be 0 for a step of prefill chunks only)."""

    def info(self) -> RunnerInfo:
        """Its name, pool and (compiled) state, for the engine's views."""

    def close(self) -> None:
        """Stop background work (the engine is shutting down)."""
