"""Decode steps replayed from CUDA graphs: one captured forward pass per bucket.

A decode step of a small model on a GPU is bound by kernel launches (about 1,300 small
operations), not by the GPU's arithmetic or memory. A CUDA graph records the step's kernels
once and replays them with one launch. A graph replays fixed shapes from fixed addresses, so
the backend owns static buffers per bucket (as nano-vllm and vLLM do): ``B`` decode rows run
in the bucket :class:`engine.worker.buckets.Buckets` picks (batch bucket 1, 2, 4, ..., 32 and a
power-of-two table width); the spare rows read and write one scratch block of the pool that no
sequence owns. A speculative verification pass of ``k`` drafts is ``k + 1`` decode rows of a
bucket, each attending up to its own position. Every other step (prefill chunks, mixed steps,
larger batches) runs through the :class:`engine.worker.backends.eager.EagerBackend` it holds.

Without CUDA (``use_graphs=False``) the same static buffers run eagerly: that is how the bucket
and buffer handling is tested on a CPU.
"""

from __future__ import annotations

import logging

import torch

from engine.core.scheduler_output import ScheduledSeq
from engine.worker.backends import StepPlan
from engine.worker.backends.eager import EagerBackend
from engine.worker.buckets import Buckets, is_decode_step
from engine.worker.input_builder import PackedInput, StaticBuffers
from engine.worker.runner_info import RunnerInfo

log = logging.getLogger("engine")


class CudaGraphBackend:
    """Decode-only steps of up to 32 rows from captured graphs, the rest eager.

    Args:
        eager: the eager backend for every other step; its model and input builder (with
            the scratch block) serve the graphs too.
        buckets: the static shapes (:class:`engine.worker.buckets.Buckets`).
        use_graphs: capture and replay CUDA graphs (True only on a CUDA device); False runs
            the same static buffers eagerly.
    """

    name = "cuda_graph"

    def __init__(self, eager: EagerBackend, buckets: Buckets, use_graphs: bool = True):
        self.eager = eager
        self.inputs = eager.inputs
        self.bucket_rule = buckets
        self.device = eager.device
        self.use_graphs = use_graphs and self.device.type == "cuda"
        self.buffers: dict[tuple[int, int], StaticBuffers] = {}
        self._pool_mem = None

    def bucket(self, entries: list[ScheduledSeq]) -> tuple[int, int] | None:
        """``(rows, width)`` for a decode-only step (an entry verifying ``k`` drafts counts
        ``k + 1`` rows), ``None`` for any other step or one no bucket holds."""
        if not entries or not all(map(is_decode_step, entries)):
            return None
        return self.bucket_rule.key(entries)

    def plan(self, entries: list[ScheduledSeq]) -> StepPlan:
        """A decode-only step that fits a bucket as one static group; any other step packed."""
        every = list(range(len(entries)))
        return StepPlan(static=[every]) if self.bucket(entries) else StepPlan(packed=every)

    def run_packed(self, inp: PackedInput) -> torch.Tensor:
        """The eager backend's packed pass."""
        return self.eager.run_packed(inp)

    def buffers_for(self, entries: list[ScheduledSeq]) -> StaticBuffers:
        """The buffers of the bucket of ``entries``, captured on first use.

        Raises:
            ValueError: no bucket holds ``entries``.
        """
        key = self.bucket(entries)
        if key is None:
            raise ValueError("these entries are no decode step of a bucket")
        return self.buffers.get(key) or self._capture(*key)

    def run_static(self, bufs: StaticBuffers) -> torch.Tensor:
        """``[B, V]`` logits of the filled buffers: the graph replayed (eager without one)."""
        if bufs.graph is not None:
            bufs.graph.replay()
        else:
            self._step(bufs)
        return bufs.logits

    def _step(self, bufs: StaticBuffers) -> None:
        """The decode step on the static buffers (what a graph records)."""
        logits = self.eager.run_packed(self.inputs.static_input(bufs))
        if bufs.logits is None:
            bufs.logits = logits.clone()
        else:
            bufs.logits.copy_(logits)

    def _capture(self, rows: int, width: int) -> StaticBuffers:
        """Static buffers for a bucket, and its graph on CUDA (after warm-up runs)."""
        bufs = self.inputs.new_static(rows, width)
        self._step(bufs)  # allocates the output; on CUDA also warms the kernels up
        if self.use_graphs:
            try:
                bufs.graph = self._record(bufs)
            except Exception:  # noqa: BLE001 - an uncapturable model still runs, eagerly
                log.warning("CUDA graph capture failed; decode steps run eagerly",
                            exc_info=True)
                self.use_graphs = False
        self.buffers[(rows, width)] = bufs
        return bufs

    def _record(self, bufs: StaticBuffers):
        """Capture :meth:`_step` on the bucket's buffers into a ``torch.cuda.CUDAGraph``
        (after two runs on a side stream, as PyTorch's graph notes ask)."""
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._step(bufs)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool_mem):
            self._step(bufs)
        self._pool_mem = graph.pool()
        return graph

    def info(self) -> RunnerInfo:
        """``RunnerInfo("cuda_graph", pool)``."""
        return RunnerInfo(backend=self.name, pool=self.inputs.pool)

    def close(self) -> None:
        """Nothing runs in the background."""
