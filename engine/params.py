"""Sampling parameters of one request (field names follow vLLM's ``SamplingParams``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SAMPLING_EPS = 1e-5
"""Temperatures below this are greedy (as in vLLM): dividing logits by 1e-37 overflows fp32."""
MAX_TEMPERATURE = 100.0
"""Highest temperature accepted. At 100 the distribution over a 49,152-token vocabulary is
already close to uniform; far above it a structure's masked logits (-1e20) divided by the
temperature come near real ones (from about 1e20 the mask stopped holding)."""
REPETITION_PENALTY_RANGE = (0.01, 100.0)
"""Lowest and highest ``repetition_penalty``: dividing a logit by 1e-300 gives inf, and the
sampler NaN; a masked logit multiplied by 1e30 is -inf in fp32."""


@dataclass
class SamplingParams:
    """How to pick each next token, and when to stop.

    Field names and meanings follow vLLM so that numbers and settings compare with the field.

    Attributes:
        temperature: divides the logits before softmax; ``0`` (or anything below
            :data:`SAMPLING_EPS` = 1e-5) means greedy (argmax). Range ``[0, 100]``
            (:data:`MAX_TEMPERATURE`; vLLM sets no upper limit).
        top_p: nucleus sampling; keep the smallest set of tokens whose probability mass reaches
            ``top_p``. ``1.0`` is off. Range ``(0, 1]``. At least one token always survives.
        top_k: keep the ``top_k`` most likely tokens. ``0`` or ``-1`` is off; a value larger than
            the vocabulary behaves as off. Range ``-1`` or ``>= 0``.
        min_p: drop tokens whose probability is below ``min_p`` times the top token's probability.
            ``0`` is off. Range ``[0, 1]``.
        repetition_penalty: CTRL-style penalty (Keskar et al., 2019, as in Hugging Face's
            ``RepetitionPenaltyLogitsProcessor``) over every token of the prompt and the output:
            a positive logit is divided by it, a negative logit is multiplied by it. ``1.0`` is off.
            Range ``[0.01, 100]`` (:data:`REPETITION_PENALTY_RANGE`; vLLM asks only ``> 0``). Prompt tokens count (Hugging Face's rule); EOS, stop tokens and the
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
            A single string is taken as a list of one. At most :data:`MAX_STOP_STRINGS`
            strings of at most :data:`MAX_STOP_STRING_CHARS` characters each: every new token
            is searched for each of them, and the longest is held back from the stream.
        stop_token_ids: extra token ids that end generation (besides the model's EOS ids), at
            most :data:`MAX_STOP_TOKEN_IDS`.
        ignore_eos: keep generating past EOS (for benchmarks that need a fixed token count).
        n: how many answers to return (samples, or beams with beam search). Range
            ``[1, MAX_SEQS_PER_REQUEST]``; with sampling ``n > 1`` needs ``temperature > 0``.
        best_of: samples drawn before the ``n`` with the highest cumulative logprob are kept
            (vLLM's meaning); ``None`` means ``n``. Range ``[n, MAX_SEQS_PER_REQUEST]``.
            Sample ``k`` (0-based) draws from its own generator seeded with
            :func:`sample_seed` ``(seed, k)``, so with a seed it equals a one-sequence request
            with that seed.
        num_beams: beam width; ``> 1`` runs beam search (Hugging Face's algorithm, deterministic:
            needs ``temperature == 0`` and no penalties, filters or stop strings). Range
            ``[1, MAX_SEQS_PER_REQUEST]``.
        length_penalty: beam search ranks a finished beam by ``sum of logprobs / L ** length_penalty``
            where ``L`` counts its generated tokens, EOS included (Hugging Face's rule).
        early_stopping: beam search's stopping rule, Hugging Face's meanings: ``True`` ends as
            soon as ``num_beams`` beams have finished; ``False`` also ends when no running beam
            can beat the worst finished one at its current length; ``"never"`` assumes the
            longest possible length for that check when ``length_penalty > 0``.
        structured_outputs: a structure the output must follow (vLLM's name): a
            :class:`engine.structured.params.StructuredOutputsParams` or a dict of one of its
            fields, ``json`` (a JSON schema), ``json_object``, ``regex``, ``choice`` or
            ``grammar``; ``None`` for free text. Each step masks the tokens that would break
            it; the request ends with ``stop`` when the structure is complete. Not with
            ``ignore_eos``. Whether it compiles is checked at submit.

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
    n: int = 1
    best_of: int | None = None
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    structured_outputs: object = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop is not None and not isinstance(self.stop, (list, tuple)):
            raise ValueError(f"stop must be a string or a list of strings, got {_short(self.stop)}")
        for s in self.stop or []:
            if not isinstance(s, str):
                raise ValueError(f"stop must be a list of strings, got {_short(s)} in it")
        self.stop = [s for s in (self.stop or []) if s]
        _check_stop_strings(self.stop)
        if self.stop_token_ids is not None and not isinstance(self.stop_token_ids, (list, tuple)):
            raise ValueError("stop_token_ids must be a list of token ids, got "
                             f"{_short(self.stop_token_ids)}")
        self.stop_token_ids = list(self.stop_token_ids or [])
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise ValueError(f"stop_token_ids must hold at most {MAX_STOP_TOKEN_IDS} token ids, "
                             f"got {len(self.stop_token_ids)}")
        _check_float("temperature", self.temperature, lambda v: 0 <= v <= MAX_TEMPERATURE,
                     f"in [0, {MAX_TEMPERATURE:g}]")
        _check_float("top_p", self.top_p, lambda v: 0 < v <= 1, "in (0, 1]")
        _check_float("min_p", self.min_p, lambda v: 0 <= v <= 1, "in [0, 1]")
        low, high = REPETITION_PENALTY_RANGE
        _check_float("repetition_penalty", self.repetition_penalty,
                     lambda v: low <= v <= high, f"in [{low:g}, {high:g}]")
        _check_float("presence_penalty", self.presence_penalty, lambda v: -2 <= v <= 2, "in [-2, 2]")
        _check_float("frequency_penalty", self.frequency_penalty, lambda v: -2 <= v <= 2, "in [-2, 2]")
        _check_int("top_k", self.top_k, lambda v: v == -1 or v >= 0, "-1 (off), 0 (off) or >= 1")
        if self.max_tokens is not None:
            _check_int("max_tokens", self.max_tokens, lambda v: v >= 1, ">= 1")
        if self.seed is not None:
            _check_int("seed", self.seed, lambda v: 0 <= v < 2**63, "in [0, 2**63)")
        for tid in self.stop_token_ids:
            _check_int("stop_token_ids", tid, lambda v: v >= 0, "token ids >= 0")
        self._check_group()
        if self.structured_outputs is not None:
            from engine.structured.params import StructuredOutputsParams

            self.structured_outputs = StructuredOutputsParams.coerce(self.structured_outputs)
            if self.ignore_eos:
                raise ValueError("ignore_eos must be false with structured_outputs: a complete "
                                 "structure ends with EOS")

    def _check_group(self) -> None:
        """Checks of ``n``, ``best_of`` and the beam search settings."""
        most = MAX_SEQS_PER_REQUEST
        _check_int("n", self.n, lambda v: 1 <= v <= most, f"in [1, {most}]")
        _check_int("num_beams", self.num_beams, lambda v: 1 <= v <= most, f"in [1, {most}]")
        if self.best_of is not None:
            _check_int("best_of", self.best_of, lambda v: self.n <= v <= most,
                       f"in [n, {most}] (n = {self.n})")
        _check_float("length_penalty", self.length_penalty, lambda v: True, "finite")
        if self.early_stopping not in (True, False, "never") or isinstance(self.early_stopping, int) \
                and not isinstance(self.early_stopping, bool):
            raise ValueError(f"early_stopping must be true, false or \"never\", got "
                             f"{_short(self.early_stopping)}")
        if self.use_beam_search:
            if not self.greedy:
                raise ValueError("temperature must be 0 with beam search (num_beams > 1): beams "
                                 f"are ranked by their log-probabilities, not sampled; got "
                                 f"{self.temperature}")
            if self.best_of is not None:
                raise ValueError("best_of does not apply to beam search: num_beams is the width")
            if self.n > self.num_beams:
                raise ValueError(f"n must be at most num_beams ({self.num_beams}) with beam "
                                 f"search, got {self.n}")
            for name, value, off in (("top_k", self.top_k, (0, -1)), ("top_p", self.top_p, (1.0,)),
                                     ("min_p", self.min_p, (0.0,)),
                                     ("repetition_penalty", self.repetition_penalty, (1.0,)),
                                     ("presence_penalty", self.presence_penalty, (0.0,)),
                                     ("frequency_penalty", self.frequency_penalty, (0.0,))):
                if value not in off:
                    raise ValueError(f"{name} is not supported with beam search (num_beams > 1)")
            if self.stop:
                raise ValueError("stop strings are not supported with beam search (num_beams > 1)")
        elif self.group_width > 1 and self.greedy:
            raise ValueError("n and best_of above 1 need temperature > 0 (greedy samples would "
                             "all be the same); use num_beams for several deterministic answers")

    @property
    def use_beam_search(self) -> bool:
        """True when ``num_beams > 1``."""
        return self.num_beams > 1

    @property
    def group_width(self) -> int:
        """Sequences the request runs at once: ``num_beams`` with beam search, else ``best_of``
        (``n`` when unset)."""
        return self.num_beams if self.use_beam_search else (self.best_of or self.n)

    @property
    def greedy(self) -> bool:
        """True when the next token is the argmax (temperature below :data:`SAMPLING_EPS`)."""
        return self.temperature < SAMPLING_EPS


MAX_SEQS_PER_REQUEST = 16
"""Most samples (``best_of``) or beams (``num_beams``) of one request."""

MAX_STOP_STRINGS = 16
"""Most stop strings of one request (OpenAI allows 4; vLLM sets no limit). Each new token is
searched for every stop string, so a request with 100,000 of them would slow every request
that shares its steps."""
MAX_STOP_STRING_CHARS = 256
"""Longest stop string, in characters (the stream holds back up to this many characters)."""
MAX_STOP_TOKEN_IDS = 64
"""Most ``stop_token_ids`` of one request."""


def _check_stop_strings(stops: list[str]) -> None:
    """Refuse more than :data:`MAX_STOP_STRINGS` stop strings or one longer than
    :data:`MAX_STOP_STRING_CHARS`.

    Raises:
        ValueError: naming ``stop`` and the limit.
    """
    if len(stops) > MAX_STOP_STRINGS:
        raise ValueError(f"stop must hold at most {MAX_STOP_STRINGS} strings, got {len(stops)}")
    for i, s in enumerate(stops):
        if len(s) > MAX_STOP_STRING_CHARS:
            raise ValueError(f"stop must be strings of at most {MAX_STOP_STRING_CHARS} "
                             f"characters, got {len(s)} characters in stop[{i}]")


def sample_seed(seed: int, index: int) -> int:
    """The seed of sample ``index`` of a request seeded with ``seed``: ``(seed + index) mod 2**63``
    (sample 0 uses the request's seed itself)."""
    return (seed + index) % 2**63


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
    """``repr`` of a refused value, cut to 40 characters (a 400-digit number stays readable;
    a long list is named by its length, never printed whole)."""
    if isinstance(value, (list, tuple, dict)) and len(value) > 8:
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_int(name: str, value, ok, allowed: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer ({allowed}), got {_short(value)}")
    if not ok(value):
        raise ValueError(f"{name} must be {allowed}, got {_short(value)}")
