"""The KV cache calculator: a model's memory against common GPUs, from the estimator's figures.

Every byte count comes from :func:`engine.telemetry.estimator.estimate`; this module only adds
the GPU table and searches for the largest batch and context that fit each card. No torch.
"""

from __future__ import annotations

from engine.telemetry.estimator import estimate, load_spec, quantized_weight_parts

# Nominal memory of common data-centre GPUs, in decimal bytes (1 GB = 1e9 B). Usable memory is
# a little less: the CUDA context and the allocator take some.
GPUS: list[tuple[str, int]] = [
    ("T4 16 GB", 16 * 10**9),
    ("L4 24 GB", 24 * 10**9),
    ("A10G 24 GB", 24 * 10**9),
    ("A100 40 GB", 40 * 10**9),
    ("A100 80 GB", 80 * 10**9),
    ("H100 80 GB", 80 * 10**9),
    ("H200 141 GB", 141 * 10**9),
]
MAX_BATCH = 1 << 20


def _largest(fits, hi: int) -> int:
    """The largest n in [1, hi] with ``fits(n)`` true (``fits`` monotone decreasing), else 0."""
    if hi < 1 or not fits(1):
        return 0
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


BLOCK_SIZE = 16  # tokens per KV block, as vLLM's default and this engine's


def max_batch(spec, dtype: str, seq_len: int, capacity: int, **opts) -> int:
    """Most sequences of ``seq_len`` tokens whose estimated total fits in ``capacity`` bytes
    (``opts``: the other :func:`engine.telemetry.estimator.estimate` options)."""
    return _largest(lambda b: estimate(spec, dtype, b, seq_len, **opts).total_bytes <= capacity, MAX_BATCH)


def max_context(spec, dtype: str, batch: int, capacity: int, **opts) -> int:
    """Longest sequence (≤ the model's window) for ``batch`` sequences that fits ``capacity``."""
    window = spec.max_positions or 1 << 22
    return _largest(lambda t: estimate(spec, dtype, batch, t, **opts).total_bytes <= capacity, window)


def compute_dtype(weights: str) -> str:
    """The dtype activations run in for weights stored as ``weights``: the same for fp32, fp16
    and bf16; bf16 for int8, int4 and fp8 weights (dequantized on the fly into bf16 products)."""
    return weights if weights in ("fp32", "fp16", "bf16") else "bf16"


def calculate(model, seq_len: int = 2048, batch: int = 1, dtype: str = "fp16", *,
              weights: str | None = None, kv_dtype: str | None = None,
              chunk_tokens: int | None = None, overhead_bytes: int = 0, samples: int = 1,
              prompt_tokens: int = 0, block_sharing: bool = True) -> dict:
    """Memory of one setting and how it fits each GPU.

    Args:
        model: a table id or alias from ``known_models()``, a ``config.json`` path or folder, or
            a :class:`engine.model.model_spec.ModelSpec`.
        seq_len: tokens per sequence (prompt + output).
        batch: sequences (requests) at once.
        dtype: a name from ``DTYPE_BYTES``: the weights', KV cache's and activations' dtype
            unless ``weights`` or ``kv_dtype`` say otherwise.
        weights: the weights' storage (``int4``, ``int8``, ``fp8``, ``bf16``...); activations
            then run in :func:`compute_dtype` of it.
        kv_dtype: the KV cache's dtype.
        chunk_tokens: chunked prefill's tokens per forward pass (activations), ``None`` for one
            unchunked prefill of every sequence at once.
        overhead_bytes: framework overhead (CUDA context, allocator cache), added to the total.
        samples: answers per request (beam width or parallel samples); each holds its own KV.
        prompt_tokens: the part of ``seq_len`` that is the prompt, which ``block_sharing``
            stores once for all the answers of a request (in blocks of :data:`BLOCK_SIZE`).

    Returns:
        ``model``, ``dtype`` (activations), ``weights_dtype``, ``kv_dtype``, ``seq_len``,
        ``batch``, ``samples``, ``max_positions``, ``weights_bytes``, ``kv_bytes``,
        ``params`` (parameters), ``weights_parts`` (for int4/int8 weights the stored parts,
        :func:`~engine.telemetry.estimator.quantized_weight_parts`, summing to
        ``weights_bytes``; empty otherwise), ``kv_bytes_unshared`` and ``kv_bytes_shared`` (the KV cache without and with block
        sharing), ``shared_tokens`` (prompt tokens stored once in the counted total) and
        ``kv_shareable_tokens`` (those block sharing would store once), ``kv_bytes_per_token``, ``activation_bytes``, ``overhead_bytes``,
        ``total_bytes`` (all equal to ``estimate()``'s), ``chunk_tokens``, ``kv_formula`` (the
        product ``kv_bytes`` comes from: :meth:`ModelSpec.formula_text`) and
        ``gpus``: per GPU ``name``, ``memory_bytes``, ``fits`` (total ≤ memory), ``max_batch``
        (at ``seq_len``) and ``max_context`` (at ``batch``, capped at the model's window).

    Raises:
        LookupError: unknown model; ValueError: unknown dtype or non-positive sizes.
    """
    if seq_len < 1 or batch < 1 or samples < 1:
        raise ValueError(f"seq_len, batch and samples must be >= 1, got {seq_len}, {batch} and {samples}")
    spec = model if hasattr(model, "kv_cache_bytes") else load_spec(str(model))
    act_dtype = compute_dtype(weights) if weights else dtype
    kv_dtype = kv_dtype or dtype
    opts = {"weights": weights, "kv_dtype": kv_dtype, "chunk_tokens": chunk_tokens,
            "overhead_bytes": overhead_bytes, "samples": samples, "prompt_tokens": prompt_tokens}
    shared = estimate(spec, act_dtype, batch, seq_len, **opts, block_size=BLOCK_SIZE)
    unshared = estimate(spec, act_dtype, batch, seq_len, **opts)
    est = shared if block_sharing else unshared
    opts["block_size"] = BLOCK_SIZE if block_sharing else None
    gpus = [{"name": name, "memory_bytes": cap, "fits": est.total_bytes <= cap,
             "max_batch": max_batch(spec, act_dtype, seq_len, cap, **opts),
             "max_context": max_context(spec, act_dtype, batch, cap, **opts)} for name, cap in GPUS]
    return {"model": spec.name, "dtype": act_dtype, "weights_dtype": weights or dtype, "kv_dtype": kv_dtype,
            "seq_len": seq_len, "batch": batch, "samples": est.samples,
            "prompt_tokens": min(max(0, int(prompt_tokens)), seq_len), "shared_tokens": est.shared_tokens, "kv_shareable_tokens": shared.shared_tokens,
            "block_sharing": bool(block_sharing), "chunk_tokens": chunk_tokens,
            "max_positions": spec.max_positions, "weights_bytes": est.weights_bytes,
            "params": spec.weight_count(),
            "weights_parts": (quantized_weight_parts(spec, weights, est.dtype_bytes)
                              if weights in ("int4", "int8") else []),
            "kv_bytes": est.kv_bytes, "kv_bytes_shared": shared.kv_bytes,
            "kv_bytes_unshared": unshared.kv_bytes, "kv_bytes_per_token": est.kv_bytes_per_token,
            "activation_bytes": est.activation_bytes, "overhead_bytes": est.overhead_bytes,
            "total_bytes": est.total_bytes,
            "kv_formula": spec.formula_text(est.kv_dtype_bytes, seq_len, batch, est.samples, est.shared_tokens),
            "gpus": gpus}
