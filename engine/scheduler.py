"""The scheduler: waiting and running queues, and the decision of what the next step runs."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .sequence import Sequence, SequenceStatus


class QueueFullError(RuntimeError):
    """The waiting queue is at its maximum size; try again later."""


@dataclass
class SchedulerOutput:
    """What the next engine step runs.

    Attributes:
        phase: ``"prefill"`` (new sequences' prompts) or ``"decode"`` (one token each).
        seqs: the sequences in the step.
    """

    phase: str
    seqs: list[Sequence]


class Scheduler:
    """First come, first served, ``max_running`` sequences at a time (1: one request at a time).

    Args:
        max_queue: most requests allowed to wait; ``add`` past it raises :class:`QueueFullError`.
        max_running: most sequences running at once.
    """

    def __init__(self, max_queue: int = 32, max_running: int = 1):
        self.max_queue = max_queue
        self.max_running = max_running
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

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

    def schedule(self) -> SchedulerOutput | None:
        """Pick the next step: admit waiting requests while there is room, else decode."""
        self.running = [s for s in self.running if not s.is_finished]
        self.waiting = deque(s for s in self.waiting if not s.is_finished)
        if self.waiting and len(self.running) < self.max_running:
            seq = self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            return SchedulerOutput("prefill", [seq])
        if self.running:
            return SchedulerOutput("decode", list(self.running))
        return None

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
