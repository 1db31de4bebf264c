"""One request's state inside the engine (prompt, output so far, cache, stopping state)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from .detokenizer import IncrementalDetokenizer, StopStringMatcher
from .kv_cache import KVCache
from .metrics import RequestTimes
from .params import SamplingParams


class SequenceStatus(enum.Enum):
    """Where a sequence is: the waiting queue, the running set, or done."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    """A request as the scheduler and model runner see it.

    Attributes:
        request_id: unique id.
        prompt_ids: prompt token ids, ``[prompt_len]``.
        params: sampling settings.
        use_kv_cache: decode with a KV cache (True) or recompute the whole sequence each step.
        output_ids: generated ids so far.
        kv: this request's own contiguous :class:`KVCache` (one-at-a-time mode), else ``None``.
        block_table: physical KV blocks holding its tokens, in order (paged mode).
        num_computed: leading tokens whose keys/values are in the cache (paged mode).
        num_inflight: tokens the step now running is computing for it (paged mode).
        times: timestamps for :class:`engine.metrics.RequestMetrics`.
    """

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    use_kv_cache: bool
    detok: IncrementalDetokenizer
    times: RequestTimes
    context_len: int
    status: SequenceStatus = SequenceStatus.WAITING
    output_ids: list[int] = field(default_factory=list)
    kv: KVCache | None = None
    generator: torch.Generator | None = None
    stop_matcher: StopStringMatcher | None = None
    emitted_len: int = 0
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    error: str | None = None
    abort_requested: bool = False
    last_kv_bytes: int = 0
    last_memory: object = None
    block_table: list[int] = field(default_factory=list)
    num_computed: int = 0
    num_inflight: int = 0
    first_unkeyed: int = 0
    preemptions: int = 0
    cache_salt: str | None = None

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

    def release_cache(self) -> None:
        """Free this request's KV cache (idempotent), remembering its last size."""
        if self.kv is not None:
            self.last_kv_bytes = self.kv.nbytes()
            self.kv.release()
            self.kv = None
