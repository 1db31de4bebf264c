"""Paged decode attention as a ``torch.library`` custom op (opaque to Dynamo and inductor).

The compiled decode graph calls ``torch.ops.playground.paged_decode_attention`` once per layer.
The op writes the step's new keys and values into that layer's K and V pool tensors at their
slots (it declares the mutation, so the compiler orders it and copies nothing) and attends with
the C kernel :mod:`engine.worker.kernels.decode_attention` (bf16 / fp16 models: each sequence
read through its block table, batch-invariant), or else gathers each sequence's blocks and runs
:func:`engine.worker.paged_attention.decode_attention_per_sequence` (one SDPA call per sequence
over exactly its own keys: batch-invariant too). Because the op is opaque, the graph around it
traces once per batch bucket, whatever the lengths of the sequences or the width of their block
tables (vLLM's CPU backend keeps its attention out of the graph the same way). Where the C
kernel applies, the graph calls the same op written in C++ instead (:func:`attention_for`,
``engine/worker/kernels/attention_op.cpp``).
"""

from __future__ import annotations

import torch

from engine.worker.kernels import decode_attention as kernel
from engine.worker.paged_attention import decode_attention_per_sequence, gather_blocks


class _Heads:
    """What transformers' SDPA function reads of an attention module."""

    def __init__(self, groups: int):
        self.num_key_value_groups, self.is_causal, self.training = groups, True, False


_LIB = torch.library.Library("playground", "FRAGMENT")
_LIB.define("paged_decode_attention(Tensor q, Tensor k, Tensor v, Tensor(a!) k_pool, "
            "Tensor(b!) v_pool, Tensor slots, Tensor blocks, Tensor lens, int block_size, "
            "float scale) -> Tensor")
# (torch.library's low-level registration: the higher-level ``custom_op`` wrapper added about
# 0.4 ms of Python per call here, 30 calls a step)


def paged_decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           k_pool: torch.Tensor, v_pool: torch.Tensor, slots: torch.Tensor,
                           blocks: torch.Tensor, lens: torch.Tensor, block_size: int,
                           scale: float) -> torch.Tensor:
    """Write one decode step's K/V into a layer's pool and attend, per sequence.

    Args:
        q: ``[B, heads, d]`` rotated queries; k, v: ``[B, kv_heads, d]`` the new token's key
            (rotated) and value, in the model's dtype.
        k_pool, v_pool: the layer's ``[slots, kv_heads, d]`` pool tensors (bf16/fp16/fp32
            storage; written in place at ``slots``).
        slots: ``[B]`` int64 pool slot of each new token.
        blocks: ``[B, W]`` int64 block tables (padded past each sequence's blocks).
        lens: ``[B]`` int64 tokens each sequence attends to, its new one included.
        block_size: tokens per block; scale: the softmax scale.

    Returns:
        ``[B, heads, d]`` attention output in ``q``'s dtype.
    """
    k_pool.index_copy_(0, slots, k.to(k_pool.dtype))
    v_pool.index_copy_(0, slots, v.to(v_pool.dtype))
    if kernel.applies(q, k_pool.dtype):     # lens read in place: no host list per layer
        return kernel.paged_decode_attention(q, k_pool, v_pool, blocks, lens, block_size, scale)
    b = blocks.shape[0]
    host = lens.tolist()
    width = -(-max(host) // block_size)
    kb = gather_blocks(k_pool, blocks[:, :width], block_size).view(b, -1, *k_pool.shape[1:])
    vb = gather_blocks(v_pool, blocks[:, :width], block_size).view(b, -1, *v_pool.shape[1:])
    to_compute = lambda which, x: x if x.dtype == q.dtype else x.to(q.dtype)  # noqa: E731
    o = decode_attention_per_sequence(_Heads(q.shape[1] // k.shape[1]), q[:, :, None], kb, vb,
                                      host, None, scale, to_compute)    # [B, 1, heads, d]
    return o[:, 0].contiguous()


_LIB.impl("paged_decode_attention", paged_decode_attention, "CPU")
_LIB.impl("paged_decode_attention", paged_decode_attention, "CUDA")


@torch.library.register_fake("playground::paged_decode_attention")
def _(q, k, v, k_pool, v_pool, slots, blocks, lens, block_size, scale):
    return torch.empty_like(q)


def attention_for(q_probe: torch.Tensor, pool_dtype: torch.dtype):
    """The op a compiled graph calls for queries like ``q_probe`` over a pool of
    ``pool_dtype``: the C++ operator of :func:`engine.worker.kernels.decode_attention.native_op`
    where the C kernel applies and that operator could be built (the same arithmetic and bits,
    about 8 µs less per call: 10.3 against 18.7 µs for one row of 100 keys, docs/compiled-decode.md),
    else ``torch.ops.playground.paged_decode_attention``."""
    op = kernel.native_op() if kernel.applies(q_probe, pool_dtype) else None
    return torch.ops.playground.paged_decode_attention if op is None else op
