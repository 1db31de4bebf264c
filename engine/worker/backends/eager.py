"""transformers' model code over the paged KV pool: the reference paged forward.

Every sequence with a KV cache goes into one forward pass: prefill chunks and decode tokens
side by side in one packed row, built by the runner
(:meth:`engine.worker.input_builder.InputBuilder.packed`);
transformers hands the step's :class:`engine.worker.paged_attention.PagedContext` to the
registered paged attention function. Decode-only steps of 2 to 4 sequences on CPU may run their
linear layers in the weight-stationary layout (:mod:`engine.worker.weight_stationary`).
"""

from __future__ import annotations

import contextlib

import torch

from engine.core.scheduler_output import ScheduledSeq
from engine.worker.backends import StepPlan
from engine.worker.input_builder import InputBuilder, PackedInput, StaticBuffers
from engine.worker.runner_info import RunnerInfo
from engine.worker.threads import StepThreads
from engine.worker.weight_stationary import WeightStationaryLinear, use_weight_stationary


class EagerBackend:
    """Runs packed inputs through a transformers ``*ForCausalLM`` with paged attention.

    Args:
        model: a transformers ``*ForCausalLM`` whose attention goes through transformers'
            attention interface (:data:`engine.model.families.PAGED_FAMILIES`); its attention implementation
            is switched to the paged function here.
        inputs: the runner's :class:`engine.worker.input_builder.InputBuilder` (its pool and
            device; the static backends build their buffers with it).
        threads: the runner's :class:`engine.worker.threads.StepThreads` (steps of at most
            ``few_rows`` tokens run on ``decode_threads``).
        weight_stationary: allow that layout (False keeps ``F.linear`` for every step).
    """

    name = "eager"

    def __init__(self, model, inputs: InputBuilder, threads: StepThreads | None = None,
                 weight_stationary: bool = True):
        from engine.worker.paged_attention import register

        self.model = model
        self.inputs = inputs
        self.threads = threads or StepThreads()
        self.weight_stationary = weight_stationary
        self.device = inputs.device
        model.set_attn_implementation(register())
        # a ready 4-D mask makes transformers skip building a causal mask that the paged
        # function ignores (and its packed-sequence check, a host-device wait on a GPU)
        self._no_mask = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=self.device)

    def plan(self, entries: list[ScheduledSeq]) -> StepPlan:
        """Every entry in the one packed pass."""
        return StepPlan(packed=list(range(len(entries))))

    def buffers_for(self, entries: list[ScheduledSeq]) -> StaticBuffers:
        """Never asked: :meth:`plan` makes no static group.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("the eager backend has no static buckets")

    def run_static(self, bufs: StaticBuffers) -> torch.Tensor:
        """Never asked, as :meth:`buffers_for`.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("the eager backend has no static buckets")

    def run_packed(self, inp: PackedInput) -> torch.Tensor:
        """One forward pass of a packed input.

        Returns:
            ``[N, V]`` logits of the rows ``inp.keep`` names (``[0, V]`` when it is empty).
        """
        keep, drop = inp.keep, inp.keep.numel() == 0
        if drop:  # transformers keeps every row for an empty index: keep one, return none
            keep = torch.tensor([inp.num_tokens - 1], device=self.device)
        self.threads.use(inp.num_tokens)
        layout = contextlib.nullcontext()
        if self.weight_stationary and use_weight_stationary(self.device, inp.num_tokens,
                                                            inp.paged.decode_only):
            layout = WeightStationaryLinear()
        with torch.inference_mode(), layout:
            out = self.model(input_ids=inp.input_ids, position_ids=inp.position_ids,
                             use_cache=False, attention_mask=self._no_mask,
                             logits_to_keep=keep, paged=inp.paged)
        return out.logits[0, :0] if drop else out.logits[0]

    def info(self) -> RunnerInfo:
        """``RunnerInfo("eager", pool)``."""
        return RunnerInfo(backend=self.name, pool=self.inputs.pool)

    def close(self) -> None:
        """Nothing runs in the background."""
