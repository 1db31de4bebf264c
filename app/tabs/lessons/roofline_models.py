"""The roofline lesson's arithmetic for any model of the calculator's list or a pasted config.json:
its decode step (:class:`engine.experiments.intensity.DecodeShape`) and its prefill.

Roofline model: Williams, Waterman and Patterson, "Roofline: an insightful visual performance
model for multicore architectures", CACM 2009 (intensity = FLOPs per byte moved; the ridge =
peak FLOP/s ÷ bandwidth). The FLOP counts: 2 per parameter per token for the matrix products
(a multiply and an add; Kaplan et al., "Scaling laws for neural language models", 2020, §2.1),
plus attention's two products, q·k and the weights times V, 2 × d FLOPs each per query-key pair
and head (as :mod:`engine.experiments.intensity` counts them):

- decode, ``b`` sequences with ``c`` cached tokens each: FLOPs = ``b × (2P + 4·L·H·d·c)``,
  bytes = ``W + b·c·kv_bytes_per_token`` (``DecodeShape``);
- prefill of one prompt of ``T`` tokens: FLOPs = ``2P·T + 4·L·H·d·T(T+1)/2`` (causal: query
  ``t`` meets ``t`` keys), bytes = ``W + T·kv_bytes_per_token`` (the weights read once, the
  prompt's keys and values written once; activations left out).

So decode's intensity is about the batch (× 2 ÷ bytes per weight) and prefill's about the
prompt length: a prompt of a few hundred tokens is compute-bound on an H100 while decoding it
at batch 1 is not. Llama-2-7B in fp16: 6,738,415,616 parameters, 13.48 GB of weights, 13.48
GFLOPs per token: 1 FLOP per byte at batch 1, 512 at batch 512 (weights alone), and an H100's
ridge (989 TFLOP/s ÷ 3.35 TB/s = 295 FLOPs per byte) from batch 296.

No torch, no Gradio.
"""

from __future__ import annotations

from engine.experiments.intensity import DecodeShape
from engine.telemetry.estimator import DTYPE_BYTES, estimate

WEIGHT_DTYPES = ("fp16", "bf16", "fp8", "int8", "int4", "fp32")
KV_DTYPES = ("fp16", "bf16", "fp8", "fp32")


def spec_shape(spec, weights: str = "fp16", kv_dtype: str = "fp16") -> DecodeShape:
    """The :class:`DecodeShape` of a :class:`engine.model.model_spec.ModelSpec` with its
    weights stored as ``weights`` (bytes from :func:`engine.telemetry.estimator.estimate`:
    params × bytes per weight, or the int4/int8 layout with its scales) and its KV cache in
    ``kv_dtype`` (``spec.kv_bytes_per_token``: 2 × layers × kv_heads × head_dim × bytes).

    Raises:
        ValueError: a dtype not in :data:`WEIGHT_DTYPES` / :data:`KV_DTYPES`, naming the field.
    """
    if weights not in WEIGHT_DTYPES:
        raise ValueError(f"weights dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {weights!r}")
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"KV cache dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}")
    compute = weights if weights in ("fp32", "fp16", "bf16") else "bf16"
    est = estimate(spec, compute, 1, 1, weights=weights, kv_dtype=kv_dtype)
    return DecodeShape(params=int(spec.weight_count()), weight_bytes=int(est.weights_bytes),
                       kv_bytes_per_token=int(spec.kv_bytes_per_token(DTYPE_BYTES[kv_dtype])),
                       layers=int(spec.layers), heads=int(spec.heads), head_dim=int(spec.head_dim))


def prefill_flops(shape: DecodeShape, tokens: int) -> float:
    """FLOPs of prefilling one prompt of ``tokens`` tokens: ``2P·T + 4·L·H·d·T(T+1)/2``."""
    t = float(tokens)
    return 2.0 * shape.params * t + 4.0 * shape.layers * shape.heads * shape.head_dim * t * (t + 1) / 2


def prefill_bytes(shape: DecodeShape, tokens: int) -> float:
    """Bytes a prefill of ``tokens`` tokens moves: the weights once plus the prompt's KV written."""
    return float(shape.weight_bytes) + float(tokens) * shape.kv_bytes_per_token


def prefill_intensity(shape: DecodeShape, tokens: int) -> float:
    """FLOPs per byte of one prompt's prefill (:func:`prefill_flops` ÷ :func:`prefill_bytes`)."""
    return prefill_flops(shape, tokens) / prefill_bytes(shape, tokens)


def prefill_crossover(shape: DecodeShape, ridge: float, largest: int = 1 << 20) -> int | None:
    """The shortest prompt (tokens) whose prefill reaches ``ridge`` FLOPs per byte, or ``None``
    when none up to ``largest`` does (the intensity grows with the prompt: bisection)."""
    if prefill_intensity(shape, largest) < ridge:
        return None
    if prefill_intensity(shape, 1) >= ridge:
        return 1
    lo, hi = 1, largest
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if prefill_intensity(shape, mid) >= ridge:
            hi = mid
        else:
            lo = mid
    return hi
