"""Plain data the engine streams: one ``StepEvent`` per step, one ``RequestOutput`` per request."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from engine.core.finish_reason import FinishReason
from engine.output.metrics import RequestMetrics

__all__ = ["Candidate", "CompletionOutput", "FinishReason", "RequestOutput", "StepEvent"]


@dataclass
class Candidate:
    """One of the top candidate tokens the sampler saw at a step.

    Attributes:
        token_id: vocabulary id.
        text: the token's text as the tokenizer decodes it alone (may be a partial character).
        prob: probability after temperature, top-k, top-p and min-p (renormalised), in [0, 1].
        logprob: natural log of ``prob`` (``-inf`` for a filtered-out token).
    """

    token_id: int
    text: str
    prob: float
    logprob: float


@dataclass
class StepEvent:
    """What one engine step did for one request.

    Attributes:
        request_id: the request this step belongs to.
        phase: ``"prefill"`` (the prompt, in one forward pass or in chunks: ``num_steps``) or
            ``"decode"`` (one token).
        step: 0 for prefill, then 1, 2, ... for each decode step.
        token_id: the token sampled at this step.
        token_text: that token decoded alone (special tokens included, for inspection).
        text_delta: new, complete text for the user (never a partial character, never a stop
            string, never a special token); may be ``""`` while a character is incomplete.
        token_prob: probability of the chosen token after the sampling filters.
        top_candidates: up to 5 :class:`Candidate` objects, most likely first.
        start_s, end_s: ``time.perf_counter()`` seconds around the step's model forward and
            sampling (from the first chunk's start when a prefill ran in several chunks).
        num_tokens: tokens processed since the last event (the prompt tokens computed at
            prefill, all chunks together; 1 at decode with a KV cache, the whole sequence
            without one).
        num_steps: engine steps (forward passes) that computed ``num_tokens``: 1, or a
            prefill's chunks (a no-cache recompute's pieces).
        kv_tokens: tokens held in this request's KV cache after the step (0 without a cache).
        kv_bytes: bytes of the cache tensors after the step, measured as the sum of ``nbytes``.
        batch_size: sequences in the forward pass (1 with the one-at-a-time scheduler).
        finish_reason: set on the request's last event: a :class:`FinishReason`.
        memory: the memory breakdown telemetry took of this step (shared by the step's
            events), or ``None``.
        batch: the :class:`engine.core.batch_info.BatchInfo` of the step: one object shared by
            every event of the step.
        block_table: physical KV blocks of this request after the step (paged KV cache).
        index: which sample of the request the token belongs to (0 for one-sequence requests).
        beams: with beam search, the beam view after the step (live beams, pruned ones,
            finished hypotheses, shared blocks and logical vs physical KV tokens: see
            :func:`engine.core.sequence_group.beam_view`); ``None`` otherwise.
        cached_tokens: on the prefill event, prompt tokens whose keys and values came from the
            prefix cache rather than being computed (0 on decode events).
        num_drafted: draft tokens the step's forward pass verified for this request
            (speculative decoding; 0 for a plain step).
        draft_accepted: this token is an accepted draft (False for the model's own token).
        tokens_in_step: output tokens the step produced for this request (1 without
            speculation; a verified step's events share it and its ``start_s``/``end_s``).
        forced: with structured output, the grammar allowed only this token.
        jumped: a forced token appended without a forward pass of its own (jump-forward).
        allowed_tokens: with structured output, how many ids the mask allowed at this step
            (``None`` without a structure, or for a jumped token).
        mask_detail: with structured output, ``{"vocab_size", "removed_mass", "removed_top"}``:
            the mask's width and, with ``structured_outputs.explain``, the probability it
            removed and the most likely removed tokens as ``[text, prob]`` (before the mask).
    """

    request_id: str
    phase: str
    step: int
    token_id: int
    token_text: str
    text_delta: str
    token_prob: float
    top_candidates: list[Candidate]
    start_s: float
    end_s: float
    num_tokens: int
    kv_tokens: int
    kv_bytes: int
    num_steps: int = 1
    batch_size: int = 1
    finish_reason: FinishReason | None = None
    memory: Any = None
    batch: Any = None
    block_table: list[int] = field(default_factory=list)
    index: int = 0
    beams: Any = None
    cached_tokens: int = 0
    num_drafted: int = 0
    draft_accepted: bool = False
    tokens_in_step: int = 1
    forced: bool = False
    jumped: bool = False
    allowed_tokens: int | None = None
    mask_detail: dict | None = None

    @property
    def duration_s(self) -> float:
        """Seconds the step took (``end_s - start_s``)."""
        return self.end_s - self.start_s

    def to_dict(self) -> dict:
        """A JSON-ready dict (the memory snapshot as its own ``to_dict()`` when it has one)."""
        d = asdict(self)
        mem = self.memory
        d["memory"] = mem.to_dict() if hasattr(mem, "to_dict") else None
        d["batch"] = self.batch.to_dict() if hasattr(self.batch, "to_dict") else None
        return d


@dataclass
class CompletionOutput:
    """One returned sample or beam of a request (vLLM's ``CompletionOutput``).

    Attributes:
        index: the sample's index (a beam's rank, best first).
        text: its text (special tokens skipped, stop string cut off).
        token_ids: its generated ids, an EOS included when it ended the answer.
        cumulative_logprob: sum of the natural logs of its tokens' probabilities (samples: as
            the sampler drew them; beams: log-softmax of the raw logits).
        finish_reason: ``stop``, ``length``, ``abort`` or ``error``.
        score: beam search's ranking score, ``cumulative_logprob / len ** length_penalty``
            (``None`` for samples).
    """

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float
    finish_reason: FinishReason
    score: float | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        d = asdict(self)
        d["finish_reason"] = str(FinishReason(self.finish_reason).value) \
            if self.finish_reason is not None else None
        return d


@dataclass
class RequestOutput:
    """The finished request.

    Attributes:
        request_id: the id given by ``LLMEngine.submit``.
        prompt_token_ids: the prompt after the chat template and tokenizer, ``[prompt_len]``.
        token_ids: generated ids in order, an EOS or stop token included when it ended the request.
        text: the output text (special tokens skipped, stop string cut off).
        finish_reason: a :class:`FinishReason` (``stop``, ``length``, ``abort``, ``error``).
        error: the message when ``finish_reason == "error"`` (or refused input), else ``None``.
        metrics: timings and token counts (:class:`RequestMetrics`).
        kv_cache_bytes: bytes the request's KV cache held at its end, before it was released.
        stop_reason: the stop string or token id that ended the request, if any.
        use_kv_cache: whether the request decoded with a KV cache.
        memory: the last memory breakdown telemetry recorded for the request, if any.
        outputs: every returned sample or beam (:class:`CompletionOutput`); the top-level
            ``text`` and ``token_ids`` are the first of them (the best beam, or sample 0).
        source: who sent it, ``"user"`` or ``"lesson"`` (``LLMEngine.submit``).
        speculative: its speculative decoding figures
            (:meth:`engine.spec_decode.spec_state.SpecState.summary`), ``None`` without.
        structured: its structured-output figures (forced and jumped tokens, mask time:
            :meth:`engine.structured.state.StructuredState.summary`), ``None`` without.
    """

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: FinishReason
    metrics: RequestMetrics
    error: str | None = None
    kv_cache_bytes: int = 0
    stop_reason: str | int | None = None
    use_kv_cache: bool = True
    memory: Any = None
    deltas: list[str] = field(default_factory=list)
    outputs: list[CompletionOutput] = field(default_factory=list)
    source: str = "user"
    speculative: dict | None = None
    structured: dict | None = None

    @property
    def finished_ok(self) -> bool:
        """True when the request ended by ``stop`` or ``length``."""
        return FinishReason(self.finish_reason).ok
