"""The scheduler: waiting and running queues, and what each engine step computes.

Iteration-level scheduling (continuous batching, Yu et al., OSDI 2022 "Orca"; vLLM's
scheduler): every step, finished sequences have left; each running sequence gets one decode
token (or the next chunk of its prompt); waiting requests join, first come first served, while
the step's token budget, the running-sequence limit and free KV blocks allow. When blocks run
out, the newest running sequence is preempted: its blocks are freed and it is recomputed later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .sequence import Sequence, SequenceStatus


class QueueFullError(RuntimeError):
    """The waiting queue is at its maximum size; try again later."""


@dataclass
class ScheduledSeq:
    """A sequence in a step and how many of its tokens the step feeds to the model."""

    seq: Sequence
    num_new: int

    @property
    def phase(self) -> str:
        """``"prefill"`` for prompt (or recompute) tokens, ``"decode"`` for one new token."""
        return "prefill" if self.num_new > 1 or not self.seq.output_ids else "decode"

    @property
    def samples(self) -> bool:
        """Whether this step reaches the sequence's last known token (so a token is sampled)."""
        return self.seq.num_computed + self.num_new == self.seq.num_tokens


@dataclass
class SchedulerOutput:
    """What the next engine step runs.

    Attributes:
        entries: paged sequences and their new-token counts, packed into one forward pass.
        recompute: sequences without a KV cache (each recomputes its whole sequence).
        preempted: sequences preempted while making room for this step.
    """

    entries: list[ScheduledSeq] = field(default_factory=list)
    recompute: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)


class Scheduler:
    """First come, first served admission with a token budget and a KV block budget.

    Args:
        block_manager: the KV block manager; ``None`` runs one sequence at a time with each
            request's own contiguous cache (for models paged attention does not support).
        max_queue: most requests allowed to wait (``add`` past it raises ``QueueFullError``).
        max_num_seqs: most sequences running at once.
        max_num_batched_tokens: most tokens fed to the model in one step (prefill chunks
            included); longer prompts are split into chunks.
    """

    def __init__(self, block_manager: BlockManager | None, max_queue: int = 32,
                 max_num_seqs: int = 32, max_num_batched_tokens: int = 512):
        self.bm = block_manager
        self.max_queue = max_queue
        self.max_num_seqs = max_num_seqs if block_manager is not None else 1
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        """Queue a new request.

        Raises:
            QueueFullError: ``max_queue`` requests already wait.
        """
        if len(self.waiting) >= self.max_queue:
            raise QueueFullError(
                f"the queue is full ({self.max_queue} requests waiting); try again in a moment")
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def position(self, request_id: str) -> int:
        """Requests ahead of this one: running ones plus those queued before it.

        Returns 0 when it runs, has finished, or is unknown.
        """
        for i, seq in enumerate(self.waiting):
            if seq.request_id == request_id:
                return i + len(self.running)
        return 0

    def all_sequences(self) -> list[Sequence]:
        """Every sequence not yet removed (waiting and running)."""
        return list(self.waiting) + list(self.running)

    def release(self, seq: Sequence) -> None:
        """Return a sequence's KV blocks to the pool (finish, abort, error)."""
        if self.bm is not None and seq.block_table:
            self.bm.free(seq.block_table)
        seq.num_computed = 0
        seq.num_inflight = 0
        seq.first_unkeyed = 0

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        self.release(seq)
        seq.status = SequenceStatus.WAITING
        seq.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)
        out.preempted.append(seq)

    def schedule(self) -> SchedulerOutput | None:
        """Decide the next step (see the module docstring); ``None`` when there is no work."""
        self.running = [s for s in self.running if not s.is_finished]
        self.waiting = deque(s for s in self.waiting if not s.is_finished)
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        for seq in list(self.running):
            if seq not in self.running:  # preempted below to make room
                continue
            if not seq.use_kv_cache:
                out.recompute.append(seq)
                continue
            if self.bm is None:  # one at a time with the request's own cache
                out.entries.append(ScheduledSeq(seq, seq.num_tokens - seq.num_computed))
                continue
            if budget <= 0:
                break
            n = min(seq.num_tokens - seq.num_computed, budget)
            while not self.bm.ensure_capacity(seq.block_table, seq.num_computed + n):
                victim = self.running[-1]
                self._preempt(victim, out)
                if victim is seq:
                    break
            if seq.status is SequenceStatus.RUNNING:
                seq.num_inflight = n
                out.entries.append(ScheduledSeq(seq, n))
                budget -= n
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if not seq.use_kv_cache:
                pass
            elif self.bm is None:
                if budget < seq.num_tokens and out.entries:
                    break
            elif budget <= 0 or not self.bm.can_allocate(seq.all_ids, budget, seq.cache_salt):
                break
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            if not seq.use_kv_cache:
                out.recompute.append(seq)
            elif self.bm is None:
                out.entries.append(ScheduledSeq(seq, seq.num_tokens))
                budget -= seq.num_tokens
            else:
                seq.block_table, seq.num_computed, n = self.bm.allocate(seq.all_ids, budget, seq.cache_salt)
                seq.first_unkeyed = seq.num_computed // self.bm.block_size
                seq.num_inflight = n
                out.entries.append(ScheduledSeq(seq, n))
                budget -= n
        if not out.entries and not out.recompute:
            return None
        return out
