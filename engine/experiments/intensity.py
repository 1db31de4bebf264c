"""Arithmetic intensity of a decode step, and the ridge points it is compared with.

A roofline (Williams, Waterman and Patterson, "Roofline: an insightful visual performance model
for multicore architectures", CACM 2009) bounds a kernel's speed by
``min(peak FLOP/s, bandwidth × intensity)``, where intensity is FLOPs per byte moved. The two
bounds meet at the *ridge point* ``peak FLOP/s / bandwidth``: below it a step waits for memory
(memory-bound), above it for arithmetic (compute-bound).

One decode step for ``b`` sequences, each with ``c`` tokens in its KV cache:

- FLOPs ≈ ``b × (2 × P + 4 × layers × heads × head_dim × c)``: every parameter is one multiply
  and one add per token (the LM head included; a tied embedding counted once), and attention's
  two products (q·Kᵀ, then the weights times V) read ``c`` cached positions per query head.
- bytes ≈ ``W + b × c × kv_bytes_per_token``: the weights once per step whatever the batch (as
  stored: int4 codes and scales for an int4 model), plus each sequence's own KV cache.
  Activations (a few KB per sequence) are left out.

So intensity grows with ``b`` while the weights dominate the bytes, and levels off at
``(2P / c + 4 × layers × heads × head_dim) / kv_bytes_per_token`` once every sequence's cache
outweighs the weights: long contexts keep decode memory-bound at any batch.

Nothing here imports torch; the page's lessons call these functions directly.
"""

from __future__ import annotations

from dataclasses import dataclass

# Dense 16-bit tensor-core peaks (no sparsity) and memory bandwidth, from each card's NVIDIA
# datasheet (the SXM variants for A100 80 GB, H100 and H200). T4 has no bf16: its fp16 figure.
PUBLISHED_GPUS = (
    {"name": "T4", "tflops": 65.0, "bandwidth_gb_per_s": 320.0, "dtype": "fp16",
     "source": "NVIDIA T4 Tensor Core GPU datasheet: 65 TFLOPS mixed precision (fp16), 320 GB/s GDDR6"},
    {"name": "L4", "tflops": 121.0, "bandwidth_gb_per_s": 300.0, "dtype": "bf16",
     "source": "NVIDIA L4 Tensor Core GPU datasheet: 242 TFLOPS bf16 with sparsity (121 dense), 300 GB/s"},
    {"name": "A100 80 GB SXM", "tflops": 312.0, "bandwidth_gb_per_s": 2039.0, "dtype": "bf16",
     "source": "NVIDIA A100 Tensor Core GPU datasheet: 312 TFLOPS bf16 dense, 2,039 GB/s HBM2e"},
    {"name": "H100 SXM", "tflops": 989.0, "bandwidth_gb_per_s": 3350.0, "dtype": "bf16",
     "source": "NVIDIA H100 Tensor Core GPU datasheet: 1,979 TFLOPS bf16 with sparsity (989 dense), 3.35 TB/s"},
    {"name": "H200 SXM", "tflops": 989.0, "bandwidth_gb_per_s": 4800.0, "dtype": "bf16",
     "source": "NVIDIA H200 Tensor Core GPU datasheet: 1,979 TFLOPS bf16 with sparsity (989 dense), 4.8 TB/s"},
)


@dataclass(frozen=True)
class DecodeShape:
    """What one decode step of a model reads and computes.

    Attributes:
        params: parameters the step multiplies (count; a tied embedding once).
        weight_bytes: bytes of the weights as stored (read once per step).
        kv_bytes_per_token: bytes of one token's keys and values over all layers.
        layers, heads, head_dim: decoder blocks, query heads and their width (attention FLOPs).
    """

    params: int
    weight_bytes: int
    kv_bytes_per_token: int
    layers: int
    heads: int
    head_dim: int

    def flops(self, batch: int, context: int) -> float:
        """FLOPs of one decode step: ``batch × (2 × params + 4 × layers × heads × head_dim × context)``."""
        return float(batch) * (2.0 * self.params + 4.0 * self.layers * self.heads * self.head_dim * context)

    def bytes_read(self, batch: int, context: int) -> float:
        """Bytes one decode step reads: the weights once plus ``batch × context`` cached tokens."""
        return float(self.weight_bytes) + float(batch) * context * self.kv_bytes_per_token

    def intensity(self, batch: int, context: int) -> float:
        """Arithmetic intensity of one decode step, FLOPs per byte read (see the module's formulas)."""
        return self.flops(batch, context) / self.bytes_read(batch, context)

    def intensity_limit(self, context: int) -> float:
        """The intensity a very large batch approaches at this context (FLOPs per byte); infinite
        without a KV cache to read."""
        if self.kv_bytes_per_token <= 0 or context <= 0:
            return float("inf")
        return (2.0 * self.params / context + 4.0 * self.layers * self.heads * self.head_dim) / self.kv_bytes_per_token

    def crossover_batch(self, ridge: float, context: int, largest: int = 1 << 20) -> int | None:
        """The smallest batch whose decode step reaches ``ridge`` FLOPs per byte (turns
        compute-bound), or ``None`` when no batch up to ``largest`` does."""
        if self.intensity(largest, context) < ridge:
            return None
        lo, hi = 1, largest
        if self.intensity(1, context) >= ridge:
            return 1
        while hi - lo > 1:  # intensity grows with the batch: bisect
            mid = (lo + hi) // 2
            if self.intensity(mid, context) >= ridge:
                hi = mid
            else:
                lo = mid
        return hi


def ridge_point(flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Peak FLOP/s ÷ bandwidth in bytes/s: the intensity (FLOPs per byte) where a roofline's
    memory slope meets its compute ceiling.

    Raises:
        ValueError: a bandwidth that is not positive.
    """
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth_bytes_per_s}")
    return flops_per_s / bandwidth_bytes_per_s


def published_ridges() -> list[dict]:
    """:data:`PUBLISHED_GPUS` with each card's ``ridge`` (FLOPs per byte) added."""
    return [{**g, "ridge": ridge_point(g["tflops"] * 1e12, g["bandwidth_gb_per_s"] * 1e9)} for g in PUBLISHED_GPUS]


def shape_of(info, spec, kv_bytes_per_token: int) -> DecodeShape:
    """The :class:`DecodeShape` of a loaded model (``info``: its ``ModelInfo``; ``spec``: its
    ``ModelSpec``; ``kv_bytes_per_token``: the engine's, which follows its KV cache dtype)."""
    return DecodeShape(params=int(info.num_params),
                       weight_bytes=int(getattr(info, "weights_read_bytes", info.weights_bytes)),
                       kv_bytes_per_token=int(kv_bytes_per_token), layers=int(spec.layers),
                       heads=int(spec.heads), head_dim=int(spec.head_dim))
