"""A request's scheduling state: its tokens, how many are computed, its blocks and status.

What the request shows its caller (detokenized text, stop strings, timings) lives apart, in
:class:`engine.output.output_processor.RequestState`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from engine.params import SamplingParams


SOURCES = ("user", "lesson")  # who sent a request (see Sequence.source)

class SequenceStatus(enum.Enum):
    """Where a sequence is: the waiting queue, the running set, or done."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    """A request as the scheduler and the model runner see it.

    Attributes:
        seq_id: the sequence's unique id: its request's id, or ``"<request id>#<index>"`` for
            a sample or beam of a group. The runner's outputs and caches are keyed by it.
        prompt_ids: prompt token ids, ``[prompt_len]``.
        params: sampling settings.
        use_kv_cache: decode with a KV cache (True) or recompute the whole sequence each step.
        context_len: most tokens (prompt + output) it may reach.
        generator: its seeded ``torch.Generator``, or ``None`` for torch's global one.
        cache_salt: mixed into the prefix-cache keys of its blocks (``None``: shared cache).
        source: who sent it: ``"user"``, or ``"lesson"`` for the page's experiments (kept out
            of the users' latency percentiles).
        output_ids: generated ids so far.
        block_table: physical KV blocks holding its tokens, in order (paged cache).
        num_computed: leading tokens whose keys and values are in the cache.
        num_scheduled: tokens the step now running computes for it (0 between steps).
        num_cached_tokens: prompt tokens found in the prefix cache when it was first scheduled
            (vLLM's ``num_cached_tokens``); ``-1`` until then, 0 without a KV cache.
        first_unkeyed: index of its first block not yet keyed for the prefix cache.
        finish_reason: a :class:`engine.output.events.FinishReason` once finished.
        stop_reason: the EOS / stop token id or stop string that ended it.
        error: the exception that ended it with ``error``.
        group: the :class:`engine.core.sequence_group.SequenceGroup` of a request with several
            samples or beams (``None`` for a one-sequence request); :attr:`request_id` is
            then the group's.
        index: the sample's index in its group (a beam's running number).
        cumulative_logprob: sum of the natural logs of its tokens' probabilities, as the
            sampler chose them (a beam: the sum of log-softmax values beam search ranks by).
        spec: its :class:`engine.spec_decode.spec_state.SpecState` when it may speculate.
        structured: its :class:`engine.structured.state.StructuredState` when its output
            must follow a structure (``params.structured_outputs``).
    """

    seq_id: str
    prompt_ids: list[int]
    params: SamplingParams
    use_kv_cache: bool = True
    context_len: int = 2**31
    generator: object = None
    cache_salt: str | None = None
    source: str = "user"
    status: SequenceStatus = SequenceStatus.WAITING
    output_ids: list[int] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    num_computed: int = 0
    num_scheduled: int = 0
    num_cached_tokens: int = -1
    first_unkeyed: int = 0
    preemptions: int = 0
    finish_reason: object = None
    stop_reason: str | int | None = None
    error: BaseException | None = None
    group: object = None
    index: int = 0
    cumulative_logprob: float = 0.0
    spec: object = None
    structured: object = None

    @property
    def request_id(self) -> str:
        """The id of the request the caller knows (its group's, for a sample or a beam;
        :attr:`seq_id` for a one-sequence request)."""
        return self.group.request_id if self.group is not None else self.seq_id

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens."""
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def all_ids(self) -> list[int]:
        """Prompt then output ids."""
        return self.prompt_ids + self.output_ids

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED
