"""The KV cache calculator: a model's memory against common GPUs, from the estimator's figures.

Every byte count comes from :func:`engine.telemetry.estimator.estimate`; this module only adds
the GPU table and searches for the largest batch and context that fit each card. No torch.
"""

from __future__ import annotations

from engine.telemetry.estimator import estimate, load_spec

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


def max_batch(spec, dtype: str, seq_len: int, capacity: int) -> int:
    """Most sequences of ``seq_len`` tokens whose estimated total fits in ``capacity`` bytes."""
    return _largest(lambda b: estimate(spec, dtype, b, seq_len).total_bytes <= capacity, MAX_BATCH)


def max_context(spec, dtype: str, batch: int, capacity: int) -> int:
    """Longest sequence (≤ the model's window) for ``batch`` sequences that fits ``capacity``."""
    window = spec.max_positions or 1 << 22
    return _largest(lambda t: estimate(spec, dtype, batch, t).total_bytes <= capacity, window)


def calculate(model, seq_len: int = 2048, batch: int = 1, dtype: str = "fp16") -> dict:
    """Memory of one setting and how it fits each GPU.

    Args:
        model: a table id or alias from ``known_models()``, a ``config.json`` path or folder, or
            a :class:`engine.model.model_spec.ModelSpec`.
        seq_len: tokens per sequence (prompt + output).
        batch: sequences at once.
        dtype: a name from ``DTYPE_BYTES`` (weights, KV cache and activations).

    Returns:
        ``model``, ``dtype``, ``seq_len``, ``batch``, ``max_positions``, ``weights_bytes``,
        ``kv_bytes``, ``kv_bytes_per_token``, ``activation_bytes``, ``total_bytes`` (all equal
        to ``estimate()``'s), ``kv_formula`` and ``gpus``: per GPU ``name``,
        ``memory_bytes``, ``fits`` (total ≤ memory), ``max_batch`` (at ``seq_len``) and
        ``max_context`` (at ``batch``, capped at the model's window).

    Raises:
        LookupError: unknown model; ValueError: unknown dtype or non-positive sizes.
    """
    if seq_len < 1 or batch < 1:
        raise ValueError(f"seq_len and batch must be >= 1, got {seq_len} and {batch}")
    spec = model if hasattr(model, "kv_cache_bytes") else load_spec(str(model))
    est = estimate(spec, dtype, batch, seq_len)
    gpus = [{"name": name, "memory_bytes": cap, "fits": est.total_bytes <= cap,
             "max_batch": max_batch(spec, dtype, seq_len, cap),
             "max_context": max_context(spec, dtype, batch, cap)} for name, cap in GPUS]
    return {"model": spec.name, "dtype": dtype, "seq_len": seq_len, "batch": batch,
            "max_positions": spec.max_positions, "weights_bytes": est.weights_bytes,
            "kv_bytes": est.kv_bytes, "kv_bytes_per_token": est.kv_bytes_per_token,
            "activation_bytes": est.activation_bytes, "total_bytes": est.total_bytes,
            "kv_formula": spec.formula_text(est.dtype_bytes, seq_len, batch), "gpus": gpus}
