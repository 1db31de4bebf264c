"""What the model runner returns for one step: plain data that flows from the worker to the
scheduler and the output processor (no torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class SampleResult:
    """The sampler's choice for one sequence at one step.

    Attributes:
        token_id: the chosen token.
        prob: its probability after the filters (1.0 for a greedy pick of a peaked distribution).
        top_ids, top_probs: up to 5 most likely tokens after the filters (tokens the filters
            removed, probability 0, are left out), most likely first.
    """

    token_id: int
    prob: float
    top_ids: list[int]
    top_probs: list[float]

    @property
    def logprob(self) -> float:
        """Natural log of :attr:`prob` (``-inf`` for 0)."""
        return math.log(self.prob) if self.prob > 0 else float("-inf")


@dataclass
class ModelRunnerOutput:
    """One step's results, keyed by sequence id (:attr:`engine.core.sequence.Sequence.seq_id`).

    Attributes:
        start_s, end_s: ``time.perf_counter()`` seconds around the forward pass and sampling.
        sampled: the token sampled for each sequence whose step reached its last known token.
        errors: the exception of each sequence whose forward pass or sampling failed (the
            others of the step are unaffected).
        kv_tokens: tokens each scheduled sequence holds in the KV cache after the step
            (0 without a cache).
        kv_bytes: bytes those tokens take, measured from the cache tensors.
        spans: ``(start_s, end_s)`` of the forward pass and sampling that computed each
            scheduled sequence (the packed pass, or its own pass when run alone).
        batch_size: sequences that shared the packed forward pass (1 when run one at a time).
        group_samples: for the first token of a request with several samples, keyed by the
            sequence that was prefilled: ``best_of`` draws from its one logits row, draw ``k``
            with sample ``k``'s generator.
        beam_candidates: for each beam that reached its last token, its ``2 × num_beams`` or
            more best next tokens and their log-softmax values (fp32 of the raw logits, best
            first): ``(token_ids, logprobs)``.
        spec_accepted: for a sequence that verified draft tokens, the accepted drafts in order
            (``sampled`` then holds the model's own token that follows them).
    """

    start_s: float
    end_s: float
    sampled: dict[str, SampleResult] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)
    kv_tokens: dict[str, int] = field(default_factory=dict)
    kv_bytes: dict[str, int] = field(default_factory=dict)
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    batch_size: int = 1
    group_samples: dict[str, list[SampleResult]] = field(default_factory=dict)
    beam_candidates: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    spec_accepted: dict[str, list[SampleResult]] = field(default_factory=dict)
