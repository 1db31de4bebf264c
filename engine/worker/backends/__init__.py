"""The forward backends of :class:`engine.worker.model_runner.ModelRunner`. The runner builds a
step's inputs once (:class:`engine.worker.input_builder.InputBuilder`) and a backend only runs
them and returns logits: no sampling, no state of the requests.

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

from dataclasses import dataclass, field
from typing import Protocol

import torch

from engine.core.scheduler_output import ScheduledSeq
from engine.worker.input_builder import PackedInput, StaticBuffers
from engine.worker.runner_info import RunnerInfo


@dataclass
class StepPlan:
    """How a paged backend runs a step's entries (indices into the step's entries).

    Attributes:
        packed: entries of the one packed forward pass (in order).
        static: groups of decode entries, each run in one static bucket (in order).
        rows: prefill entries run as rows of the compiled graph, one row per token
            (:meth:`engine.worker.compiled.compiled_backend.CompiledBackend.run_rows`).
    """

    packed: list[int] = field(default_factory=list)
    static: list[list[int]] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)


class PagedBackend(Protocol):
    """What the runner asks of a paged forward backend."""

    name: str
    """``"eager"``, ``"cuda_graph"`` or ``"compiled"``."""

    def plan(self, entries: list[ScheduledSeq]) -> StepPlan:
        """Which entries go into the packed pass and which into static buckets."""

    def run_packed(self, inp: PackedInput) -> torch.Tensor:
        """``[N, V]`` logits of the rows ``inp.keep`` names."""

    def buffers_for(self, entries: list[ScheduledSeq]) -> StaticBuffers:
        """The static buffers of the bucket that holds ``entries`` (a group of the plan)."""

    def run_static(self, bufs: StaticBuffers) -> torch.Tensor:
        """``[B, V]`` logits of every row of the filled buffers (valid until the next run)."""

    def info(self) -> RunnerInfo:
        """Its name, pool and (compiled) state, for the engine's views."""

    def close(self) -> None:
        """Stop background work (the engine is shutting down)."""
