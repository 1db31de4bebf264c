"""What one batched engine step looked like (for the page's batch strip and block pool panel)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class BatchInfo:
    """One engine step of continuous batching.

    Attributes:
        step_id: the engine's step counter.
        start_s: ``time.perf_counter()`` seconds when the step began.
        request_ids: the sequence ids (:attr:`engine.core.sequence.Sequence.seq_id`) whose
            tokens were in this step's forward pass: a request's id, or a sample's or beam's
            ``"<request id>#<index>"``.
        new_tokens: tokens each of those requests fed (same order): 1 for a decode token, more
            for a prefill chunk.
        phases: ``"prefill"`` or ``"decode"`` for each of those requests.
        prefill_tokens: prompt (or recompute) tokens in the step.
        decode_tokens: single-token decode feeds in the step.
        running, waiting: queue lengths when the step ran.
        blocks_used, blocks_free, blocks_cached: KV block pool occupancy (cached = free blocks
            that still hold a reusable prefix).
        kv_utilization: tokens held / token slots of the blocks running requests use (a shared
            prefix block counted once), in [0, 1].
        preemptions: preemptions so far (engine total).
        prefix_hit_rate: prompt tokens served from cached blocks / prompt tokens looked up.
    """

    step_id: int
    start_s: float
    request_ids: list[str] = field(default_factory=list)
    new_tokens: list[int] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    running: int = 0
    waiting: int = 0
    blocks_used: int = 0
    blocks_free: int = 0
    blocks_cached: int = 0
    kv_utilization: float = 0.0
    preemptions: int = 0
    prefix_hit_rate: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)
