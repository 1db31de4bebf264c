"""Paged attention on top of transformers' model code, through a registered attention function.

The engine packs every sequence of a step into one row of ``T`` tokens and passes a
:class:`PagedContext` as the extra keyword ``paged`` to the model's forward; transformers hands
it to every attention call. There the new keys and values are written into the block pool at
their slots and attention runs: on CPU with a bf16 or fp16 model every query (prefill chunk,
verification or decode) goes to the paged attention kernel
(:mod:`engine.worker.kernels.decode_attention`), which reads keys and values through the block
table; otherwise each sequence's keys and values are gathered block by block and SDPA runs per
prefill chunk, per decode sequence on CPU, and as one padded batch of decode tokens on GPUs.

Without a ``paged`` context the function is plain SDPA (transformers' own), so Hugging Face
``generate`` on the same model is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from engine.worker.kernels import decode_attention as kernel

ATTN_NAME = "paged"


@dataclass
class SeqSlice:
    """One sequence's part of a packed step.

    Attributes:
        q_start: index of its first new token in the packed row.
        q_len: new tokens this step (a prefill chunk, or 1 for decode).
        context_len: tokens whose K/V were already in the pool before this step.
        blocks: ``[ceil((context_len + q_len) / block_size)]`` int64 block ids holding its
            tokens, in order (the first entries of its block table).
        verify: the new tokens are a known token and draft tokens being verified
            (speculative decoding): each query attends exactly as a one-token decode query.
    """

    q_start: int
    q_len: int
    context_len: int
    blocks: torch.Tensor
    verify: bool = False


@dataclass
class PagedContext:
    """Everything the attention function needs for one packed step (built once per step).

    Attributes:
        pool: the :class:`engine.worker.kv_pool.KVPool`.
        new_slots: ``[T]`` int64 pool slot of every new token of the packed row.
        prefills: sequences with more than one new token (or a past to mask), run one by one.
        decode_q: ``[B]`` int64 packed indices of single-token decode queries.
        decode_blocks: ``[B, N_max]`` int64 block tables of the decode sequences, padded with
            block 0 (its slots are masked out).
        decode_mask: ``[B, 1, 1, S_max]`` bool, True where a key is real; ``None`` when every
            decode sequence has ``S_max`` tokens.
        decode_lens: ``[B]`` int64 tokens of each decode sequence (for sliding windows).
        decode_max_len: ``S_max``, the longest decode sequence in tokens.
        decode_lens_host: the same lengths as Python ints (for the per-sequence attention of
            CPU decode steps, :func:`decode_attention_per_sequence`); empty when not known.
    """

    pool: object
    new_slots: torch.Tensor
    prefills: list[SeqSlice]
    decode_q: torch.Tensor | None
    decode_blocks: torch.Tensor | None
    decode_mask: torch.Tensor | None
    decode_lens: torch.Tensor | None = None
    decode_max_len: int = 0
    decode_lens_host: tuple[int, ...] = ()

    @property
    def decode_only(self) -> bool:
        """The step is ``B`` decode tokens and nothing else, in packed order."""
        return self.decode_q is not None and not self.prefills


def gather_blocks(pool_tensor: torch.Tensor, blocks: torch.Tensor, block_size: int) -> torch.Tensor:
    """Copy whole blocks out of one layer's K or V pool.

    One ``index_select`` over rows of ``block_size`` slots moves each block as one contiguous
    piece (``block_size × kv_heads × head_dim`` values), several times faster on CPU than
    indexing slot by slot.

    Args:
        pool_tensor: ``[num_blocks × block_size, kv_heads, head_dim]``.
        blocks: ``[N]`` int64 block ids (any shape; flattened in order).
        block_size: slots per block.

    Returns:
        ``[N × block_size, kv_heads, head_dim]``, block after block.
    """
    slots, kv_heads, head_dim = pool_tensor.shape
    rows = pool_tensor.view(slots // block_size, block_size * kv_heads * head_dim)
    return rows.index_select(0, blocks.reshape(-1)).view(-1, kv_heads, head_dim)


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
                    paged: PagedContext | None = None, kv_probe: dict | None = None, **kwargs):
    """Attention for a packed, paged step (or plain SDPA without ``paged``).

    Args:
        module: the attention module (``layer_idx``, ``num_key_value_groups``, maybe
            ``sliding_window``).
        query: ``[1, heads, T, head_dim]`` after rotary embedding.
        key, value: ``[1, kv_heads, T, head_dim]`` of the new tokens.
        attention_mask: ignored in paged mode (each sequence's mask is built here).
        scaling: softmax scale (``head_dim ** -0.5`` for Llama).
        paged: the step's :class:`PagedContext`.
        kv_probe: without ``paged``, a dict that receives ``layer -> [max |K|, max |V|]``
            (fp8 KV calibration, :mod:`engine.worker.kv_calibration`).

    Returns:
        ``(attn_output [1, T, heads, head_dim], None)``, the layout transformers expects.
    """
    sdpa = _sdpa()
    if paged is None:
        if kv_probe is not None:
            kv_probe[module.layer_idx] = [key.abs().max().item(), value.abs().max().item()]
        return sdpa(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                    **kwargs)
    layer = module.layer_idx
    pool = paged.pool
    k_pool, v_pool = pool.layer(layer)
    # write the new tokens' K/V at their slots: pool layout [slots, kv_heads, head_dim]
    pool.write(layer, paged.new_slots, key[0].transpose(0, 1), value[0].transpose(0, 1))
    # Mistral passes its window as a keyword; Qwen2 sets it on sliding layers' modules
    window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
    out = None if paged.decode_only else torch.empty_like(query)
    bs = paged.pool.block_size
    for s in paged.prefills:
        if not window and kernel.applies(query, k_pool.dtype):
            _prefill_as_decode(query, out, k_pool, v_pool, s, bs, scaling)
            continue
        if s.verify and not window and query.dtype != torch.float32 \
                and query.device.type == "cpu":
            _verify_as_decode(query, out, k_pool, v_pool, pool, layer, s, scaling)
            continue
        q = query[:, :, s.q_start:s.q_start + s.q_len]
        total = s.context_len + s.q_len
        k = pool.decode(layer, "k", gather_blocks(k_pool, s.blocks, bs)[:total]).transpose(0, 1)[None]
        v = pool.decode(layer, "v", gather_blocks(v_pool, s.blocks, bs)[:total]).transpose(0, 1)[None]
        mask = None
        if s.context_len or (window and s.q_len > window):
            mask = _prefix_mask(s.q_len, s.context_len, window, query.device)
        o, _ = sdpa(module, q, k, v, mask, scaling=scaling, dropout=0.0)
        out[:, :, s.q_start:s.q_start + s.q_len] = o.transpose(1, 2)
    if paged.decode_q is not None:
        if paged.decode_only:  # the row is the B decode tokens in order: views, no copies
            q = query[0].transpose(0, 1)[:, :, None]                     # [B, heads, 1, d]
        else:
            q = query[0][:, paged.decode_q].transpose(0, 1)[:, :, None]
        b = paged.decode_blocks.shape[0]
        if not window and kernel.applies(q, k_pool.dtype):  # through the block tables, no gather
            lens = paged.decode_lens_host or tuple(paged.decode_lens.tolist())
            o = kernel.paged_decode_attention(q[:, :, 0], k_pool, v_pool, paged.decode_blocks,
                                              lens, bs, scaling)[:, None]
        else:
            k = gather_blocks(k_pool, paged.decode_blocks, bs).view(b, -1, *k_pool.shape[1:])
            v = gather_blocks(v_pool, paged.decode_blocks, bs).view(b, -1, *v_pool.shape[1:])
            if q.device.type == "cpu":
                lens = paged.decode_lens_host or tuple(paged.decode_lens.tolist())
                o = decode_attention_per_sequence(module, q, k, v, lens, window, scaling,
                                                  lambda which, x: pool.decode(layer, which, x))
            else:
                o = _decode_attention_batched(module, q, k, v, paged, window, pool, layer,
                                              scaling)
        if paged.decode_only:
            return o.reshape(1, b, *o.shape[2:]), None
        out[0][:, paged.decode_q] = o[:, 0].transpose(0, 1)
    return out.transpose(1, 2), None


def decode_attention_per_sequence(module, q, k, v, lens, window, scaling,
                                  decode) -> torch.Tensor:
    """Decode attention on CPU, one sequence at a time over exactly its own keys.

    Batch invariance: PyTorch 2.13's CPU SDPA gives different bits for the same query and keys
    when they are padded to a longer length under a mask, or batched with other sequences
    (checked for 16 to 1,030 keys), so a greedy answer changed with whoever else was decoding.
    Here every sequence makes the call a batch-1 decode step makes (no mask, its own length),
    so its output depends on its own query and keys only; on this CPU the loop of B small calls
    was also faster than one padded batched call (B = 8, 200 keys: 2.6 against 7.5 ms).

    Args:
        q: ``[B, heads, 1, d]``; k, v: ``[B, S_pad, kv_heads, d]`` raw pool rows (gathered
            blocks, padding after each sequence's length).
        lens: ``B`` Python ints, the tokens each sequence attends to (its new one included).
        window: the layer's sliding window in tokens, or ``None``.
        decode: ``decode(which, stored) -> tensor``: pool rows (``which`` is ``"k"`` or
            ``"v"``) back in the compute dtype (:meth:`engine.worker.kv_pool.KVPool.decode`).

    Returns:
        ``[B, 1, heads, d]`` in ``q``'s dtype.
    """
    outs = []
    for i, n in enumerate(lens):
        lo = max(0, n - window) if window else 0
        ki = decode("k", k[i:i + 1, lo:n]).permute(0, 2, 1, 3)           # [1, kv_heads, n, d]
        vi = decode("v", v[i:i + 1, lo:n]).permute(0, 2, 1, 3)
        qi = q[i:i + 1]
        if qi.dtype == torch.float32:
            oi, _ = _sdpa()(module, qi, ki, vi, None, scaling=scaling, dropout=0.0)
        else:  # PyTorch 2.13's CPU kernel runs one bf16 query 5-10x slower than fp32 (620 vs
            # 50 us for 512 keys on one core): decode queries compute in fp32, then cast back
            oi = _fp32_attention(qi, ki, vi, None, scaling)
        outs.append(oi)
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def _decode_attention_batched(module, q, k, v, paged: PagedContext, window, pool, layer: int,
                              scaling) -> torch.Tensor:
    """Decode attention of all ``B`` sequences as one padded, masked SDPA call (GPUs).

    ``k``/``v`` are ``[B, S_pad, kv_heads, d]`` gathered pool rows; returns ``[B, 1, heads, d]``.
    """
    smax = paged.decode_max_len
    k = pool.decode(layer, "k", k[:, :smax]).permute(0, 2, 1, 3)         # [B, kv_heads, S, d]
    v = pool.decode(layer, "v", v[:, :smax]).permute(0, 2, 1, 3)
    mask = paged.decode_mask
    if window and smax > window:
        k_pos = torch.arange(k.shape[2], device=k.device)[None, :]
        recent = k_pos >= (paged.decode_lens[:, None] - window)
        mask = recent[:, None, None] if mask is None else mask & recent[:, None, None]
    o, _ = _sdpa()(module, q, k, v, mask, scaling=scaling, dropout=0.0)  # [B, 1, heads, d]
    return o


def _fp32_attention(q, k, v, mask, scaling) -> torch.Tensor:
    """SDPA computed in fp32 and cast back: ``q [B, heads, Q, d]``, ``k``/``v``
    ``[B, kv_heads, S, d]`` -> ``[B, Q, heads, d]`` in ``q``'s dtype."""
    o = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                       scale=scaling, enable_gqa=True)
    return o.to(q.dtype).transpose(1, 2)


def _prefill_as_decode(query, out, k_pool, v_pool, s: SeqSlice, block_size: int,
                       scaling) -> None:
    """Attention of a prefill chunk or verification slice in the decode kernel: query ``i``
    attends to the first ``context_len + i + 1`` keys of the sequence, with the arithmetic a
    decode step at that position does (:mod:`engine.worker.kernels.decode_attention`). So a
    position's keys, values and logits don't depend on how it was computed: in one prefill, in
    chunks the token budget chose, after a prefix-cache hit, or one token at a time. Costs
    more than SDPA's blocked kernel on long chunks (512 tokens: ~17 against ~10 ms per layer
    on 2 cores), nothing to speak of on short ones.

    Writes ``out[:, :, q_start:q_start + q_len]`` (``out`` is ``[1, heads, T, d]``).
    """
    rows = query[0, :, s.q_start:s.q_start + s.q_len].transpose(0, 1)     # [q_len, heads, d]
    lens = list(range(s.context_len + 1, s.context_len + s.q_len + 1))
    o = kernel.paged_decode_attention(rows, k_pool, v_pool, s.blocks, lens, block_size, scaling)
    out[0, :, s.q_start:s.q_start + s.q_len] = o.transpose(0, 1)


def _verify_as_decode(query, out, k_pool, v_pool, pool, layer: int, s: SeqSlice,
                      scaling) -> None:
    """Attention of a verification slice, one query at a time, each as a batch-1 decode step
    computes it when the attention kernel does not apply (fp32 SDPA without a mask over
    exactly its own keys). On CPU with a bf16 model, the masked multi-query kernel of a
    prefill chunk rounds differently, and a near-tie in bf16 could then flip a greedy token;
    this way speculative greedy tokens equal plain greedy ones at batch 1.

    Writes ``out[:, :, q_start + i]`` (``out`` is ``[1, heads, T, d]``) for each query ``i``.
    """
    bs = pool.block_size
    kb = gather_blocks(k_pool, s.blocks, bs).view(1, -1, *k_pool.shape[1:])
    vb = gather_blocks(v_pool, s.blocks, bs).view(1, -1, *v_pool.shape[1:])
    rows = query[0].transpose(0, 1)[:, :, None]                          # [T, heads, 1, d]
    for i in range(s.q_len):
        n = s.context_len + i + 1
        k = pool.decode(layer, "k", kb[:, :n]).permute(0, 2, 1, 3)       # [1, kv_heads, n, d]
        v = pool.decode(layer, "v", vb[:, :n]).permute(0, 2, 1, 3)
        o = _fp32_attention(rows[s.q_start + i:s.q_start + i + 1], k, v, None, scaling)
        out[0, :, s.q_start + i] = o[0, 0]


def register() -> str:
    """Register ``paged`` with transformers' attention and mask interfaces; returns the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTN_NAME, paged_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTN_NAME, sdpa_mask)
    return ATTN_NAME
