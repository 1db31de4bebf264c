"""A fusion barrier for the compiled decode step: ``torch.ops.playground.fusion_barrier(x)``
returns a copy of ``x`` through a ``torch.library`` custom op, which inductor cannot see into,
so ``x`` is computed into a buffer of its own and the kernels after the op read that buffer.

Why the decode step needs one, after its token embedding: a lookup traced into the graph is
fused by inductor into every kernel that reads the embeddings (the first RMS norm and the
first two residual adds). For the quantized embedding
(:class:`engine.model.quant.embedding.QuantEmbedding`, rows unpacked from the int8 LM head's
interleaved layout) the only index of those kernels that is contiguous in memory is the row's
token id, so inductor vectorized their sums of squares *across the rows of the batch*: a row's
576 squares added one at a time, in order, where the one-row graph adds them 32 lanes at a time
and then across the lanes. The two orders round differently; in about one row in 60 of a
batch-8 step a norm's bf16 output then differed from the same row's alone, and so did its
logits (random K/V, docs/compiled-decode.md, "Batch invariance inside the graph"). Behind the
barrier the norms read a buffer whose hidden dimension is contiguous, and every bucket sums a
row in the same order.

Cost: one dispatch and a copy of ``B × hidden`` values per step.
"""

from __future__ import annotations

import torch

_LIB = torch.library.Library("playground", "FRAGMENT")
_LIB.define("fusion_barrier(Tensor x) -> Tensor")


def fusion_barrier(x: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``x`` (any shape and dtype), computed where inductor cannot fuse."""
    return x.clone(memory_format=torch.contiguous_format)


_LIB.impl("fusion_barrier", fusion_barrier, "CPU")
_LIB.impl("fusion_barrier", fusion_barrier, "CUDA")


@torch.library.register_fake("playground::fusion_barrier")
def _(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)
