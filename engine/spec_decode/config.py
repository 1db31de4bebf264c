"""Options of speculative decoding (no torch needed)."""

from __future__ import annotations

from dataclasses import dataclass

SPECULATIVE_METHODS = ("ngram", "draft")
"""Drafters: ``ngram`` = prompt lookup (the continuation of the longest recent n-gram match);
``draft`` = greedy tokens of a smaller model sharing the tokenizer (``EngineConfig.draft_model``,
:mod:`engine.spec_decode.draft_proposer`)."""

MAX_SPECULATIVE_TOKENS = 16
"""Most draft tokens verified in one step."""

DEFAULT_SPECULATIVE_TOKENS = 3
"""Default ``k``: a verification step of ``1 + k`` rows must cost little more than a one-token
step, and on CPU the int4 and int8 kernels slow down sharply past 4 rows, so 3 drafts is the
most that stays cheap (docs/performance.md, "Measurements behind the constants")."""


@dataclass(frozen=True)
class SpeculativeConfig:
    """How one request drafts and when it stops drafting.

    Attributes:
        method: one of :data:`SPECULATIVE_METHODS`.
        num_speculative_tokens: ``k``, most draft tokens verified per step (1 to
            :data:`MAX_SPECULATIVE_TOKENS`).
        prompt_lookup_min, prompt_lookup_max: shortest and longest n-gram (in tokens) matched
            against the prompt and output (vLLM's names).
        min_acceptance: drafting pauses while the acceptance rate of the last ``window``
            verification steps is below this fraction.
        window: verification steps the acceptance rate is measured over.
        backoff_steps: decode steps without drafting after a low window; doubles each time the
            rate stays low after a pause, up to ``max_backoff_steps``, and resets when it
            recovers.
        max_backoff_steps: the longest pause, in decode steps.

    Raises:
        ValueError: from ``__post_init__``, naming the field, for a value out of range.
    """

    method: str = "ngram"
    num_speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 4
    min_acceptance: float = 0.3
    window: int = 4
    backoff_steps: int = 8
    max_backoff_steps: int = 64

    def __post_init__(self) -> None:
        if self.method not in SPECULATIVE_METHODS:
            raise ValueError(f"speculative must be one of {', '.join(SPECULATIVE_METHODS)}, "
                             f"got {self.method!r}")
        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
            raise ValueError(f"num_speculative_tokens must be an integer in "
                             f"[1, {MAX_SPECULATIVE_TOKENS}], got {k!r}")
        for name in ("prompt_lookup_min", "prompt_lookup_max", "window", "backoff_steps",
                     "max_backoff_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError("prompt_lookup_min must not exceed prompt_lookup_max")
        if not 0.0 <= float(self.min_acceptance) <= 1.0:
            raise ValueError(f"min_acceptance must be in [0, 1], got {self.min_acceptance!r}")
