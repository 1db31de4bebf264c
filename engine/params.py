"""Sampling parameters of one request (field names follow vLLM's ``SamplingParams``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SAMPLING_EPS = 1e-5
"""Temperatures below this are greedy (as in vLLM): dividing logits by 1e-37 overflows fp32."""


@dataclass
class SamplingParams:
    """How to pick each next token, and when to stop.

    Field names and meanings follow vLLM so that numbers and settings compare with the field.

    Attributes:
        temperature: divides the logits before softmax; ``0`` (or anything below
            :data:`SAMPLING_EPS` = 1e-5) means greedy (argmax). Range ``>= 0``.
        top_p: nucleus sampling; keep the smallest set of tokens whose probability mass reaches
            ``top_p``. ``1.0`` is off. Range ``(0, 1]``. At least one token always survives.
        top_k: keep the ``top_k`` most likely tokens. ``0`` or ``-1`` is off; a value larger than
            the vocabulary behaves as off. Range ``-1`` or ``>= 0``.
        min_p: drop tokens whose probability is below ``min_p`` times the top token's probability.
            ``0`` is off. Range ``[0, 1]``.
        repetition_penalty: CTRL-style penalty (Keskar et al., 2019, as in Hugging Face's
            ``RepetitionPenaltyLogitsProcessor``) over every token of the prompt and the output:
            a positive logit is divided by it, a negative logit is multiplied by it. ``1.0`` is off.
            Range ``> 0``. Prompt tokens count (Hugging Face's rule); EOS, stop tokens and the
            tokenizer's special tokens (chat-template markers) are never penalised.
        presence_penalty: subtracted once from the logit of every token already generated
            (OpenAI / vLLM definition, output tokens only). Range ``[-2, 2]``.
        frequency_penalty: subtracted from a token's logit once per time it was generated.
            Range ``[-2, 2]``.
        max_tokens: most new tokens to generate; ``None`` means up to the context window.
            Range ``>= 1``.
        seed: seed of this request's own ``torch.Generator``; the same seed and inputs give the
            same tokens. ``None`` draws from the global generator.
        stop: strings that end generation; the stop string itself is not part of the output text.
            A single string is taken as a list of one.
        stop_token_ids: extra token ids that end generation (besides the model's EOS ids).
        ignore_eos: keep generating past EOS (for benchmarks that need a fixed token count).

    Raises:
        ValueError: from ``__post_init__``, naming the field and its allowed range.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    max_tokens: int | None = 256
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop is not None and not isinstance(self.stop, (list, tuple)):
            raise ValueError(f"stop must be a string or a list of strings, got {self.stop!r}")
        for s in self.stop or []:
            if not isinstance(s, str):
                raise ValueError(f"stop must be a list of strings, got {s!r} in it")
        self.stop = [s for s in (self.stop or []) if s]
        if self.stop_token_ids is not None and not isinstance(self.stop_token_ids, (list, tuple)):
            raise ValueError(f"stop_token_ids must be a list of token ids, got {self.stop_token_ids!r}")
        self.stop_token_ids = list(self.stop_token_ids or [])
        _check_float("temperature", self.temperature, lambda v: v >= 0, ">= 0")
        _check_float("top_p", self.top_p, lambda v: 0 < v <= 1, "in (0, 1]")
        _check_float("min_p", self.min_p, lambda v: 0 <= v <= 1, "in [0, 1]")
        _check_float("repetition_penalty", self.repetition_penalty, lambda v: v > 0, "> 0")
        _check_float("presence_penalty", self.presence_penalty, lambda v: -2 <= v <= 2, "in [-2, 2]")
        _check_float("frequency_penalty", self.frequency_penalty, lambda v: -2 <= v <= 2, "in [-2, 2]")
        _check_int("top_k", self.top_k, lambda v: v == -1 or v >= 0, "-1 (off), 0 (off) or >= 1")
        if self.max_tokens is not None:
            _check_int("max_tokens", self.max_tokens, lambda v: v >= 1, ">= 1")
        if self.seed is not None:
            _check_int("seed", self.seed, lambda v: 0 <= v < 2**63, "in [0, 2**63)")
        for tid in self.stop_token_ids:
            _check_int("stop_token_ids", tid, lambda v: v >= 0, "token ids >= 0")

    @property
    def greedy(self) -> bool:
        """True when the next token is the argmax (temperature below :data:`SAMPLING_EPS`)."""
        return self.temperature < SAMPLING_EPS


def _check_float(name: str, value, ok, allowed: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number {allowed}, got {_short(value)}")
    try:
        fine = math.isfinite(float(value)) and ok(value)
    except OverflowError:  # an integer too large for a float
        fine = False
    if not fine:
        raise ValueError(f"{name} must be {allowed}, got {_short(value)}")


def _short(value) -> str:
    """``repr`` of a refused value, cut to 40 characters (a 400-digit number stays readable)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_int(name: str, value, ok, allowed: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer ({allowed}), got {_short(value)}")
    if not ok(value):
        raise ValueError(f"{name} must be {allowed}, got {_short(value)}")
