"""Paged decode attention as a ``torch.library`` custom op (opaque to Dynamo and inductor).

The compiled decode graph calls ``torch.ops.playground.paged_decode_attention`` once per layer.
The op writes the step's new keys and values into the KV pool at their slots, gathers each
sequence's blocks and runs :func:`engine.worker.paged_attention.decode_attention_per_sequence`
(one SDPA call per sequence over exactly its own keys: batch-invariant). Because the op is
opaque, the graph around it traces once per batch bucket, whatever the lengths of the
sequences, the width of their block tables or the KV storage dtype (vLLM's CPU backend keeps
its attention out of the graph the same way).

A custom op takes tensors and scalars only, so the pool is named by a small integer from
:func:`register_pool`, as vLLM names its attention layers by string.
"""

from __future__ import annotations

import itertools

import torch

from engine.worker.paged_attention import decode_attention_per_sequence, gather_blocks

_POOLS: dict[int, object] = {}
_IDS = itertools.count()


def register_pool(pool) -> int:
    """Make ``pool`` (an :class:`engine.worker.kv_pool.KVPool`) reachable from the op; returns
    its id. :func:`unregister_pool` forgets it."""
    pool_id = next(_IDS)
    _POOLS[pool_id] = pool
    return pool_id


def unregister_pool(pool_id: int) -> None:
    """Forget a pool registered with :func:`register_pool` (no error if unknown)."""
    _POOLS.pop(pool_id, None)


class _Heads:
    """What :func:`decode_attention_per_sequence` reads of an attention module."""

    def __init__(self, layer: int, groups: int):
        self.layer_idx, self.num_key_value_groups, self.is_causal = layer, groups, True
        self.training = False


@torch.library.custom_op("playground::paged_decode_attention", mutates_args=())
def paged_decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           slots: torch.Tensor, blocks: torch.Tensor, lens: torch.Tensor,
                           pool_id: int, layer: int, scale: float, window: int) -> torch.Tensor:
    """Write one decode step's K/V into the pool and attend, per sequence.

    Args:
        q: ``[B, heads, d]`` rotated queries; k, v: ``[B, kv_heads, d]`` the new token's key
            (rotated) and value, in the model's dtype.
        slots: ``[B]`` int64 pool slot of each new token.
        blocks: ``[B, W]`` int64 block tables (padded past each sequence's blocks).
        lens: ``[B]`` int64 tokens each sequence attends to, its new one included.
        pool_id: from :func:`register_pool`; layer: the layer index.
        scale: softmax scale; window: sliding window in tokens (0: none).

    Returns:
        ``[B, heads, d]`` attention output in ``q``'s dtype.
    """
    pool = _POOLS[pool_id]
    pool.write(layer, slots, k, v)
    k_pool, v_pool = pool.layer(layer)
    b, bs = blocks.shape[0], pool.block_size
    host = lens.tolist()
    width = -(-max(host) // bs)
    kb = gather_blocks(k_pool, blocks[:, :width], bs).view(b, -1, *k_pool.shape[1:])
    vb = gather_blocks(v_pool, blocks[:, :width], bs).view(b, -1, *v_pool.shape[1:])
    heads = _Heads(layer, q.shape[1] // k.shape[1])
    o = decode_attention_per_sequence(heads, q[:, :, None], kb, vb, host, window or None, pool,
                                      layer, scale)                     # [B, 1, heads, d]
    return o[:, 0].contiguous()


@paged_decode_attention.register_fake
def _(q, k, v, slots, blocks, lens, pool_id, layer, scale, window):
    return torch.empty_like(q)
