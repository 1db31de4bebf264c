"""The engine's options in one place, each with its unit and default (no torch needed)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from engine.spec_decode.config import DEFAULT_SPECULATIVE_TOKENS

DEFAULT_KV_BUDGET_CPU = 512 * 2**20
"""KV pool bytes on CPU when ``kv_cache_bytes`` is not given (512 MiB)."""

COMPILE_MODES = ("auto", "on", "off")
"""Choices of ``compile``: ``auto`` = the compiled decode step on CPU for the Llama family (on
CUDA the CUDA-graph runner replays the same buckets); ``on`` = compiled on any device; ``off``
= transformers' model code for every step."""

KV_CACHE_DTYPES = ("auto", "bf16", "fp16", "fp8")
"""Choices of ``kv_cache_dtype``: ``auto`` = the model's compute dtype; ``fp8`` = e4m3 with a
per-layer scale (stored in fp8, attention computes in the model's dtype)."""


@dataclass
class EngineConfig:
    """How an :class:`engine.LLMEngine` schedules and what it keeps.

    Attributes:
        max_queue: requests allowed to wait at once; one more raises ``QueueFullError``.
        max_num_seqs: sequences running at once (continuous batching); 1 without batching.
        max_num_batched_tokens: tokens fed to the model in one step (prefill chunks
            included); longer prompts are prefilled in chunks of at most this many tokens.
        long_prefill_token_threshold: most tokens of one prefill chunk (or one piece of a
            no-cache recompute) per step, vLLM's name; ``None`` = a quarter of
            ``max_num_batched_tokens`` (128 of 512), 0 = no cap beyond the budget. Smaller
            chunks keep each step short, so running decodes and newly arrived requests share
            every step with a long prompt instead of waiting for its whole prefill.
        block_size: tokens per KV block of the paged cache.
        kv_cache_bytes: bytes of the KV block pool; ``None`` = 512 MiB on CPU, half the free
            memory on a GPU.
        batching: continuous batching over the paged KV cache (the families of
            :data:`engine.model.families.PAGED_FAMILIES`); False, or another architecture, serves one request at a time with a
            contiguous cache per request.
        enable_prefix_caching: reuse full KV blocks of a shared prompt prefix.
        telemetry: memory breakdown on every step, rolling latency percentiles, NVML readings.
        weight_stationary: on CPU, run decode steps of 2-4 sequences with the
            weight-stationary linear layout (:mod:`engine.worker.weight_stationary`).
        warmup: on a GPU, run two small forward passes before serving, so the first
            request's time to first token holds no one-time set-up.
        cuda_graphs: replay decode steps of up to 32 sequences from CUDA graphs
            (:mod:`engine.worker.backends.cuda_graph`): ``None`` = on CUDA only; True also on
            CPU, where the same static buffers run eagerly (for tests); False never.
        decode_threads: intra-op threads on CPU for steps of few rows (decode steps of up to
            8 sequences with int8/int4 weights, 4 with bf16/fp16: ``engine.wiring.few_rows``);
            0 = auto: 1 with int8, int4, bf16 or fp16 weights (one-row products take tens of
            µs to a fraction of a ms, about what waking a second thread costs on a shared
            2-core machine: int4 batch-1 decode ran 1.47× faster on one thread there, bf16
            1.30×), else (fp32, the exact reference) PyTorch's setting. Larger steps (prefill,
            more sequences, where the kernels are compute-bound) keep PyTorch's setting; the
            one-request-at-a-time runner (no batching) never changes it. The engine's own
            int4 and int8 kernels do not follow it: they split their columns over a pool of
            their own, one thread per CPU (``engine.model.quant.int4_kernel.set_threads``,
            ``$LLM_PLAYGROUND_KERNEL_THREADS``).
        kv_cache_dtype: storage of the paged KV cache, one of :data:`KV_CACHE_DTYPES`; the KV
            formula's bytes per element follow it (fp8: 1, bf16/fp16: 2). Anything but
            ``auto`` needs the paged cache (``batching`` on a paged family).
        speculative: the default drafter of requests (``"ngram"``: prompt lookup; ``"draft"``:
            a draft model, see ``draft_model``; ``None``: off); a request may choose otherwise
            (``LLMEngine.submit(speculative=...)``). Needs the paged cache; requests without
            one decode plainly.
        num_speculative_tokens: default ``k``, most draft tokens verified per step (3:
            :data:`engine.spec_decode.config.DEFAULT_SPECULATIVE_TOKENS` says why).
        compile: the decode step's path, one of :data:`COMPILE_MODES` (default ``auto``, or
            ``$LLM_PLAYGROUND_COMPILE`` when set): decode-only steps of up to 32 sequences run
            a compact Llama-family forward compiled with ``torch.compile`` per batch bucket
            (:mod:`engine.worker.compiled`), compiled in the background while the eager path
            serves; other architectures, prefill and mixed steps stay on transformers' code.
        compile_batch_sizes: the batch buckets the compiled step compiles, in that order
            (each is one graph; a decode step of ``B`` sequences runs in the smallest bucket
            that holds it, larger ones eagerly).
        draft_model: the draft model of ``speculative="draft"``: an embedded name, a Hub id or
            a local folder of a smaller model with the target's tokenizer; loaded when the
            engine starts (required with ``"draft"``; with another default, requests may still
            ask for ``"draft"``).

    Raises:
        ValueError: from ``__post_init__``, naming the field, for a value out of range.
    """

    max_queue: int = 32
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    long_prefill_token_threshold: int | None = None
    block_size: int = 16
    kv_cache_bytes: int | None = None
    batching: bool = True
    enable_prefix_caching: bool = True
    telemetry: bool = True
    weight_stationary: bool = True
    warmup: bool = True
    cuda_graphs: bool | None = None
    kv_cache_dtype: str = "auto"
    decode_threads: int = 0
    speculative: str | None = None
    num_speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS
    draft_model: str | None = None
    compile: str = field(default_factory=lambda: os.environ.get("LLM_PLAYGROUND_COMPILE", "auto"))
    compile_batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)

    def __post_init__(self) -> None:
        for name in ("max_queue", "max_num_seqs", "max_num_batched_tokens", "block_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        t = self.long_prefill_token_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 0):
            raise ValueError(f"long_prefill_token_threshold must be an integer >= 0 (0 = no cap) "
                             f"or None (a quarter of max_num_batched_tokens), got {t!r}")
        if self.kv_cache_bytes is not None and (
                isinstance(self.kv_cache_bytes, bool) or not isinstance(self.kv_cache_bytes, int)
                or self.kv_cache_bytes < 1):
            raise ValueError(f"kv_cache_bytes must be a positive integer or None, "
                             f"got {self.kv_cache_bytes!r}")
        if isinstance(self.decode_threads, bool) or not isinstance(self.decode_threads, int) \
                or self.decode_threads < 0:
            raise ValueError(f"decode_threads must be an integer >= 0 (0 = auto), "
                             f"got {self.decode_threads!r}")
        if self.speculative is not None:
            from engine.spec_decode.config import SpeculativeConfig

            SpeculativeConfig(self.speculative, self.num_speculative_tokens)  # checks both
        if self.draft_model is not None and (not isinstance(self.draft_model, str)
                                             or not self.draft_model.strip()):
            raise ValueError(f"draft_model must be a model name, Hub id or folder, "
                             f"got {self.draft_model!r}")
        if self.speculative == "draft" and self.draft_model is None:
            raise ValueError("draft_model is required with speculative='draft': give a Hub id "
                             "or a local folder of a smaller model with the same tokenizer")
        sizes = self.compile_batch_sizes
        if not sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes):
            raise ValueError(f"compile_batch_sizes must be positive integers, got {sizes!r}")
        if self.compile not in COMPILE_MODES:
            raise ValueError(f"compile must be one of {', '.join(COMPILE_MODES)}, "
                             f"got {self.compile!r}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, "
                             f"got {self.kv_cache_dtype!r}")


def prefill_chunk_cap(config: EngineConfig) -> int:
    """The scheduler's ``long_prefill_token_threshold`` for ``config``, in tokens (0 = no cap):
    the configured value, or a quarter of ``max_num_batched_tokens`` (at least 1) when ``None``."""
    t = config.long_prefill_token_threshold
    return max(1, config.max_num_batched_tokens // 4) if t is None else t
