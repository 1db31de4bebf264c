"""What the scheduler decided for one engine step (read by the runner and the output processor)."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.sequence import Sequence


def phase_of(num_new: int, num_output_tokens: int, use_kv_cache: bool = True) -> str:
    """The phase of a scheduled entry: the one definition the engine, events and page use.

    ``"prefill"`` while the sequence has no output yet, and for a step that feeds a cached
    sequence more than one token (the recomputation of a preempted sequence); ``"decode"``
    for a step that produces a further output token from one new token, or, without a KV
    cache, from the whole sequence recomputed.
    """
    if num_output_tokens == 0 or (use_kv_cache and num_new > 1):
        return "prefill"
    return "decode"


@dataclass
class ScheduledSeq:
    """A sequence in a step and how many of its tokens the step feeds to the model.

    Attributes:
        seq: the sequence.
        num_new: tokens fed this step, from ``seq.num_computed`` on.
        num_computed: ``seq.num_computed`` when scheduled (its cached context, in tokens).
        phase: :func:`phase_of` when scheduled.
        samples: whether the step reaches the sequence's last known token, so a token is
            sampled (False for a prefill chunk that is not the last one).
        block_table: the sequence's blocks for this step (a copy: the scheduler frees the
            sequence's own table when it finishes).
        draft_ids: draft tokens verified this step after the sequence's known tokens
            (speculative decoding; counted in ``num_new``, phase ``decode``).
    """

    seq: Sequence
    num_new: int
    num_computed: int = 0
    phase: str = "prefill"
    samples: bool = True
    block_table: list[int] = field(default_factory=list)
    draft_ids: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, seq: Sequence, num_new: int) -> "ScheduledSeq":
        """An entry with the fields derived from ``seq`` as it is now."""
        return cls(seq, num_new, seq.num_computed,
                   phase_of(num_new, len(seq.output_ids), seq.use_kv_cache),
                   seq.num_computed + num_new == seq.num_tokens, list(seq.block_table))


@dataclass
class SchedulerOutput:
    """What the next engine step runs.

    Attributes:
        entries: sequences with a KV cache and their new-token counts, run in one forward
            pass by the paged runner (one at a time by the contiguous runner).
        recompute: sequences without a KV cache (each recomputes its whole sequence).
        preempted: sequences preempted while making room for this step.
        blocks_to_copy: ``(src, dst)`` KV blocks the runner copies before the forward pass
            (copy-on-write of a block that forked sequences shared).
    """

    entries: list[ScheduledSeq] = field(default_factory=list)
    recompute: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)

    @property
    def all_entries(self) -> list[ScheduledSeq]:
        """``entries`` then ``recompute``."""
        return self.entries + self.recompute

    @property
    def num_tokens(self) -> int:
        """Tokens the step feeds to the model."""
        return sum(e.num_new for e in self.all_entries)
