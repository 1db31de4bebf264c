"""Paged attention on top of transformers' model code, through a registered attention function.

The engine packs every sequence of a step into one row of ``T`` tokens and passes a
:class:`PagedContext` as the extra keyword ``paged`` to the model's forward; transformers hands
it to every attention call. There the new keys and values are written into the block pool at
their slots, each sequence's past keys and values are gathered through its block table, and
attention runs per sequence (prefill chunks) or as one padded batch (decode tokens).

Without a ``paged`` context the function is plain SDPA (transformers' own), so Hugging Face
``generate`` on the same model is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ATTN_NAME = "paged"


@dataclass
class SeqSlice:
    """One sequence's part of a packed step.

    Attributes:
        q_start: index of its first new token in the packed row.
        q_len: new tokens this step (a prefill chunk, or 1 for decode).
        context_len: tokens whose K/V were already in the pool before this step.
        slots: ``[context_len + q_len]`` int64 pool slots of all its tokens, in order.
    """

    q_start: int
    q_len: int
    context_len: int
    slots: torch.Tensor


@dataclass
class PagedContext:
    """Everything the attention function needs for one packed step (built once per step).

    Attributes:
        pool: the :class:`engine.kv_pool.KVPool`.
        new_slots: ``[T]`` int64 pool slot of every new token of the packed row.
        prefills: sequences with more than one new token (or a past to mask), run one by one.
        decode_q: ``[B]`` int64 packed indices of single-token decode queries.
        decode_slots: ``[B, S_max]`` int64 slots of each decode sequence (padded with slot 0).
        decode_mask: ``[B, 1, 1, S_max]`` bool, True where a slot is real; ``None`` at B == 1.
        decode_lens: ``[B]`` int64 tokens of each decode sequence (for sliding windows).
    """

    pool: object
    new_slots: torch.Tensor
    prefills: list[SeqSlice]
    decode_q: torch.Tensor | None
    decode_slots: torch.Tensor | None
    decode_mask: torch.Tensor | None
    decode_lens: torch.Tensor | None = None


def _sdpa():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def _prefix_mask(q_len: int, context_len: int, window: int | None, device) -> torch.Tensor:
    """``[1, 1, q_len, context_len + q_len]`` bool: query j sees keys up to ``context_len + j``."""
    total = context_len + q_len
    q_pos = torch.arange(context_len, total, device=device)[:, None]
    k_pos = torch.arange(total, device=device)[None, :]
    mask = k_pos <= q_pos
    if window:
        mask &= k_pos > q_pos - window
    return mask[None, None]


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                    paged: PagedContext | None = None, **kwargs):
    """Attention for a packed, paged step (or plain SDPA without ``paged``).

    Args:
        module: the attention module (``layer_idx``, ``num_key_value_groups``, maybe
            ``sliding_window``).
        query: ``[1, heads, T, head_dim]`` after rotary embedding.
        key, value: ``[1, kv_heads, T, head_dim]`` of the new tokens.
        attention_mask: ignored in paged mode (each sequence's mask is built here).
        scaling: softmax scale (``head_dim ** -0.5`` for Llama).
        paged: the step's :class:`PagedContext`.

    Returns:
        ``(attn_output [1, T, heads, head_dim], None)``, the layout transformers expects.
    """
    sdpa = _sdpa()
    if paged is None:
        return sdpa(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                    **kwargs)
    layer = module.layer_idx
    k_pool, v_pool = paged.pool.layer(layer)
    # write the new tokens' K/V at their slots: pool layout [slots, kv_heads, head_dim]
    k_pool.index_copy_(0, paged.new_slots, key[0].transpose(0, 1))
    v_pool.index_copy_(0, paged.new_slots, value[0].transpose(0, 1))
    # Mistral passes its window as a keyword; Qwen2 sets it on sliding layers' modules
    window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
    out = torch.empty_like(query)
    for s in paged.prefills:
        q = query[:, :, s.q_start:s.q_start + s.q_len]
        k = k_pool[s.slots].transpose(0, 1)[None]
        v = v_pool[s.slots].transpose(0, 1)[None]
        mask = None
        if s.context_len or (window and s.q_len > window):
            mask = _prefix_mask(s.q_len, s.context_len, window, query.device)
        o, _ = sdpa(module, q, k, v, mask, scaling=scaling, dropout=0.0)
        out[:, :, s.q_start:s.q_start + s.q_len] = o.transpose(1, 2)
    if paged.decode_q is not None:
        q = query[0][:, paged.decode_q].transpose(0, 1)[:, :, None]    # [B, heads, 1, d]
        k = k_pool[paged.decode_slots].permute(0, 2, 1, 3)              # [B, kv_heads, S, d]
        v = v_pool[paged.decode_slots].permute(0, 2, 1, 3)
        mask = paged.decode_mask
        if window and paged.decode_lens is not None and int(paged.decode_lens.max()) > window:
            k_pos = torch.arange(k.shape[2], device=k.device)[None, :]
            recent = k_pos >= (paged.decode_lens[:, None] - window)
            mask = recent[:, None, None] if mask is None else mask & recent[:, None, None]
        o, _ = sdpa(module, q, k, v, mask, scaling=scaling, dropout=0.0)
        out[0][:, paged.decode_q] = o[:, 0].transpose(0, 1)             # o: [B, 1, heads, d]
    return out.transpose(1, 2), None


def register() -> str:
    """Register ``paged`` with transformers' attention and mask interfaces; returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTN_NAME, paged_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_NAME, sdpa_mask)
    return ATTN_NAME
