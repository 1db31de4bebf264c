"""The model runner: one class that owns a step, from a
:class:`engine.core.scheduler_output.SchedulerOutput` to a
:class:`engine.worker.runner_output.ModelRunnerOutput`.

``execute`` runs the sequences without a KV cache (and, without the paged pool, every sequence)
one at a time through :class:`engine.worker.backends.contiguous.ContiguousBackend`, then the
others through the paged backend chosen at wiring (:mod:`engine.worker.backends`: eager
transformers, CUDA graphs or the compiled decode step). The backend's plan says which entries
go into the one packed pass and which into static buckets; the runner builds those inputs with
its one :class:`engine.worker.input_builder.InputBuilder` and the backend runs them. The logits
of every way go through one sampling path, :meth:`ModelRunner.sample_rows`: speculative
verification, grammar masks, samples and beams of a group, the sampler, jump-forward.
"""

from __future__ import annotations

import time

import torch

from engine.core.scheduler_output import ScheduledSeq, SchedulerOutput
from engine.structured.masking import apply_structured_masks, drop_masked_candidates, jump_forward
from engine.worker.backends.contiguous import ContiguousBackend
from engine.worker.buckets import rows_of
from engine.worker.group_sampling import sample_group_rows, split_group_rows
from engine.worker.input_builder import InputBuilder
from engine.worker.runner_info import RunnerInfo
from engine.worker.runner_output import ModelRunnerOutput
from engine.worker.sampler import Sampler
from engine.worker.threads import StepThreads


class ModelRunner:
    """Runs the model's forward passes of a step and samples their logits.

    Args:
        model: a transformers ``*ForCausalLM`` in eval mode.
        sampler: the :class:`engine.worker.sampler.Sampler` (a plain one when omitted).
        backend: the paged forward (:class:`engine.worker.backends.PagedBackend`); ``None``
            runs every sequence alone on its own contiguous cache (any architecture).
        inputs: the :class:`engine.worker.input_builder.InputBuilder` of the paged steps (its
            pool is the runner's :attr:`pool`); with a backend only.
        threads: the :class:`engine.worker.threads.StepThreads` the backend switches (kept
            here so its ``few_rows`` can be read and set on the runner).
    """

    def __init__(self, model, sampler: Sampler | None = None, backend=None,
                 inputs: InputBuilder | None = None, threads: StepThreads | None = None):
        if (backend is None) != (inputs is None):
            raise ValueError("a paged backend and its input builder go together")
        self.model = model
        self.sampler = sampler or Sampler()
        self.backend = backend
        self.inputs = inputs
        self.pool = inputs.pool if inputs is not None else None
        self.threads = threads or StepThreads()
        self.alone = ContiguousBackend(model)
        self.device = self.alone.device

    @property
    def few_rows(self) -> int:
        """The most rows of a step run on ``decode_threads`` (:class:`StepThreads`)."""
        return self.threads.few_rows

    @few_rows.setter
    def few_rows(self, rows: int) -> None:
        self.threads.few_rows = rows

    def info(self) -> RunnerInfo:
        """Which backend runs, its pool, and the compiled backend's state and buckets."""
        return RunnerInfo(backend="contiguous") if self.backend is None else self.backend.info()

    # ---- one step ---------------------------------------------------------------------------
    def execute(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        """Run a step: blocks copied on write first, sequences without a cache alone, then one
        packed forward pass of the others and their sampling. When the packed pass fails, its
        sequences are run again one per pass, so only the sequence at fault fails.

        Returns:
            :class:`ModelRunnerOutput`; a sequence whose forward pass or sampling raised has
            its exception in ``errors`` and the others go on.
        """
        out = ModelRunnerOutput(start_s=time.perf_counter(), end_s=0.0)
        if self.backend is None:
            for e in scheduler_output.all_entries:
                self.run_alone(e, out)
            out.end_s = time.perf_counter()
            return out
        self.pool.copy_blocks(scheduler_output.blocks_to_copy)  # copy-on-write of forked blocks
        for e in scheduler_output.recompute:
            self.run_alone(e, out)
        entries = scheduler_output.entries
        if entries:
            try:
                self.run_packed(entries, out)
            except Exception as exc:  # noqa: BLE001 - isolate the failing request: rerun each alone
                after_error(exc)
                for e in entries:
                    try:
                        self.run_packed([e], out)
                    except Exception as exc:  # noqa: BLE001
                        after_error(exc)
                        out.errors[e.seq.seq_id] = exc
        out.end_s = time.perf_counter()
        return out

    def forward(self, entries: list[ScheduledSeq]) -> torch.Tensor:
        """The paged forward of ``entries``: the backend's plan, each part's inputs built once
        and run by the backend (prompt rows of the compiled graph, the packed pass, static
        buckets).

        Returns:
            ``[R, V]`` logits: for each entry that samples, in ``entries`` order, one row
            (``1 + k`` for an entry verifying ``k`` drafts); ``R`` is 0 for a step of prefill
            chunks only. Rows of a static bucket may be views of its buffers, valid until its
            next run.
        """
        plan = self.backend.plan(entries)
        parts = []                                  # (entry indices, their logits)
        packed_index = plan.packed
        if plan.rows:
            part = [entries[i] for i in plan.rows]
            logits = self.backend.run_rows(self.inputs.rows(part, self.backend.width))
            if logits is None:                      # the graph can't take them: packed instead
                packed_index = sorted([*plan.packed, *plan.rows])
            else:
                parts.append(([i for i in plan.rows if entries[i].samples], logits))
        if packed_index:
            packed = [entries[i] for i in packed_index]
            parts.append(([i for i in packed_index if entries[i].samples],
                          self.backend.run_packed(self.inputs.packed(packed))))
        for group in plan.static:
            part = [entries[i] for i in group]
            bufs = self.backend.buffers_for(part)
            used = self.inputs.fill(bufs, part)
            logits = self.backend.run_static(bufs)[:used]
            parts.append((group, logits.clone() if len(plan.static) > 1 else logits))
        if len(parts) == 1:                         # one part, in entry order
            return parts[0][1]
        rows: list = [None] * len(entries)          # logits per entry: None = no row this step
        for index, logits in parts:
            at = 0
            for i in index:
                n = rows_of(entries[i])
                rows[i] = logits[at:at + n]
                at += n
        return torch.cat([r for r in rows if r is not None])

    def run_packed(self, entries: list[ScheduledSeq], out: ModelRunnerOutput) -> None:
        """One forward pass for ``entries``, then sampling for each that reached its end."""
        start = time.perf_counter()
        logits = self.forward(entries)
        self.sample_rows(logits, entries, out)
        end = time.perf_counter()
        out.batch_size = max(out.batch_size, len(entries))
        for e in entries:
            sid = e.seq.seq_id
            # a verification step keeps the accepted drafts' keys and values, not the rejected
            rejected = len(e.draft_ids) - len(out.spec_accepted.get(sid, e.draft_ids))
            out.kv_tokens[sid] = e.num_computed + e.num_new - rejected
            out.kv_bytes[sid] = self.kv_bytes(sid, out.kv_tokens[sid])
            out.spans[sid] = (start, end)

    def run_alone(self, e: ScheduledSeq, out: ModelRunnerOutput) -> None:
        """One sequence's forward pass on its own cache (prefill, decode or, without a cache,
        recompute) and its sampling, recorded in ``out`` with its own time span."""
        seq = e.seq
        sid = seq.seq_id
        start = time.perf_counter()
        try:
            logits = self.alone.forward(e)
            if e.samples:
                self.sample_rows(logits[None], [e], out)
        except Exception as exc:  # noqa: BLE001 - one request's failure must not stop others
            after_error(exc)
            out.errors[sid] = exc
        tokens = e.num_computed + e.num_new if seq.use_kv_cache else 0
        out.kv_tokens[sid] = tokens
        out.kv_bytes[sid] = self.kv_bytes(sid, tokens)
        out.spans[sid] = (start, time.perf_counter())

    def sample_rows(self, logits: torch.Tensor, entries: list[ScheduledSeq],
                    out: ModelRunnerOutput) -> None:
        """The one sampling path: from a forward pass's logits to ``out``'s tokens.

        Verifying entries check their drafts (:func:`engine.spec_decode.verify.verify_drafts`);
        the others that sample have their grammar's mask applied, then a group's sequences
        (samples before their fork, beams) go to their group and the rest to the sampler in
        one call; jump-forward queues the tokens a grammar forces next.

        Args:
            logits: ``[R, V]``: for each entry that samples, in order, one row (``1 + k`` for
                one verifying ``k`` drafts).
            entries: the entries of that forward pass.
            out: the step's output; a row's failure (NaN logits, a grammar error) goes to
                ``out.errors`` and the other rows go on.
        """
        if any(e.draft_ids for e in entries):
            from engine.spec_decode.verify import verify_drafts

            logits = verify_drafts([e for e in entries if e.samples], logits, out)
        sampling = [e.seq for e in entries if e.samples and not e.draft_ids]
        logits = apply_structured_masks(logits, sampling, out.errors)  # grammar masks, if any
        plain, own = split_group_rows(sampling)
        if own:  # samples before their fork, and beams: the group takes the logits
            sample_group_rows(self.sampler, logits[own], [sampling[i] for i in own], out)
            drop_masked_candidates([sampling[i] for i in own], out.beam_candidates)
            logits, sampling = logits[plain], [sampling[i] for i in plain]
        if sampling:
            choices = self.sampler.sample_many(
                logits, [q.params for q in sampling], [q.generator for q in sampling],
                lambda i: (sampling[i].all_ids, sampling[i].output_ids))
            for seq, choice in zip(sampling, choices):
                if isinstance(choice, Exception):  # e.g. NaN logits of this request only
                    out.errors[seq.seq_id] = choice
                else:
                    out.sampled[seq.seq_id] = choice
            jump_forward(sampling, out.sampled, out.errors)

    def recompute(self, all_ids: list[int]) -> torch.Tensor:
        """``[V]`` logits of the last position of ``all_ids`` from a forward pass over all of
        them, no cache (the explorer's and the lessons' reference logits)."""
        return self.alone.recompute(all_ids)

    def warm_up(self) -> None:
        """Two small forward passes before serving, so the first request's TTFT holds no
        one-time set-up (cuBLAS handles and workspaces, kernel loading on a GPU)."""
        for _ in range(2):
            self.recompute([0] * 16)

    # ---- the KV cache it holds --------------------------------------------------------------
    def kv_bytes(self, seq_id: str, num_tokens: int) -> int:
        """Bytes of ``num_tokens`` tokens of a sequence's keys and values: in the pool, its
        bytes per token slot times ``num_tokens`` (a block shared by several sequences counts
        for each); without one, measured from the sequence's own cache tensors."""
        if self.pool is not None:
            return self.pool.bytes_per_token * num_tokens
        return self.alone.kv_bytes(seq_id)

    def kv_cache_bytes(self) -> int:
        """Bytes of every KV cache this runner holds now (the whole pool, allocated once)."""
        return self.pool.nbytes if self.pool is not None else self.alone.kv_cache_bytes()

    def release(self, seq_ids) -> None:
        """Drop the own caches of finished sequences (the pool's blocks are the block
        manager's)."""
        self.alone.release(seq_ids)

    def close(self) -> None:
        """Stop the backend's background work (the engine is shutting down)."""
        if self.backend is not None:
            self.backend.close()


def after_error(exc: BaseException) -> None:
    """After an out-of-memory error on a GPU, give torch's cached blocks back to the device,
    so the requests that go on have room (the one time the cache is emptied)."""
    if isinstance(exc, torch.OutOfMemoryError) and torch.cuda.is_available():
        torch.cuda.empty_cache()
