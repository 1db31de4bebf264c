"""A compact decode forward for the Llama family, on the loaded model's own modules.

transformers' model code is the reference and the general path; for a decode step of a small
model it is also about 450 module calls and 1,700 small operations, which cost more than the
arithmetic. This forward computes the same decode step (one new token per sequence) in about
20 operations per layer, written so that ``torch.compile`` traces it as one graph:

    h = embed(ids)                   (behind a fusion barrier: batch invariance, barrier_op.py)
    for each layer:  x = rms_norm(h);  q, k, v = qkv(x);  rotate q, k;
                     h = h + o_proj(paged_decode_attention(q, k, v))
                     x = rms_norm(h);  h = h + down(silu(gate(x)) * up(x))
    logits = lm_head(rms_norm(h))

Each layer is two calls, :meth:`LlamaDecodeForward._attention_inputs` (up to the rotated
``q, k, v``) and :meth:`LlamaDecodeForward._layer_output` (from the attention's output to the next
``h``), around the attention op; compiled, the two halves are regions traced and generated once
and run for all layers (:data:`REGIONS`).

The compiled graph ends at ``rms_norm(h)`` (:meth:`LlamaDecodeForward.hidden_states`) and the LM
head runs after it, so prompt tokens can be rows of the same graph without paying for logits
nobody reads. It holds no weights of its own: the linear layers are the model's modules (``nn.Linear``,
:class:`engine.model.quant.int4.Int4Linear`, the int8 LM head, a fused q/k/v or gate/up group),
the norms' weights and the rotary table come from the model, and every operation mirrors
transformers' ``LlamaDecoderLayer`` in order and dtype, so in eager mode it gives the same bits
as transformers' forward through the paged attention (checked in the tests).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.model.families import COMPILED_FAMILIES, compiled_unsupported_reason
from engine.model.quant.fused import FusedMember
import engine.worker.compiled.barrier_op  # noqa: F401 - registers the fusion barrier
from engine.worker.compiled.attention_op import attention_for

REGIONS = os.environ.get("LLM_PLAYGROUND_REGIONS", "1") != "0"
"""Compile a layer's two halves once and run them for every layer
(``torch.compiler.nested_compile_region``): the halves before and after the attention op, which
writes the KV pool and so stays in the outer graph (a region may not mutate its inputs). The
embedded model's 30 layers are then one traced and generated pair of subgraphs instead of 30
copies: inductor has a thirtieth of the graph to schedule and fuse (docs/performance.md, "Bucket 1
within a minute", for the compile seconds and the step speed). The bits are the same: where the
inlined graph fuses a layer's last residual add into the next layer's norm, the sum is rounded to
the model's dtype before the norm reads it (``emulate_precision_casts``), as it is between two
regions. ``LLM_PLAYGROUND_REGIONS=0`` inlines every layer (for the before/after benchmark)."""

FAMILIES = COMPILED_FAMILIES
"""``model_type`` values this forward computes (:data:`engine.model.families.COMPILED_FAMILIES`)."""


def unsupported_reason(model) -> str | None:
    """Why :class:`LlamaDecodeForward` can't compute ``model``'s decode step (``None`` if it can)."""
    cfg = model.config
    kind = getattr(cfg, "model_type", "")
    if kind not in FAMILIES:
        return compiled_unsupported_reason(kind)
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True) \
            and cfg.sliding_window < getattr(cfg, "max_position_embeddings", 0):
        return "sliding-window attention runs on the eager path"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act} runs on the eager path"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if rope.get("rope_type", "default") not in ("default", "llama3", "linear"):
        return f"rope type {rope.get('rope_type')} runs on the eager path"
    return None


def _split(first, names, parent):
    """A callable ``x -> tuple of projections`` for sibling projections (fused or not)."""
    if isinstance(first, FusedMember):
        group = first.group
        layer, bounds = group.layer, group.bounds
        return lambda x: tuple(y for y in _columns(layer(x), bounds))
    mods = [getattr(parent, n) for n in names]
    return lambda x: tuple(m(x) for m in mods)


def _columns(y: torch.Tensor, bounds):
    return [y[..., lo:hi] for lo, hi in bounds]


@dataclass
class _Layer:
    ln1: torch.Tensor
    ln2: torch.Tensor
    qkv: object
    o_proj: object
    gate_up: object
    down: object


class LlamaDecodeForward:
    """The decode step of a loaded Llama-family model over the paged KV pool.

    Args:
        model: a transformers ``LlamaForCausalLM`` (or Mistral / Qwen2), as loaded by
            :func:`engine.model.loader.load_model` (any ``weights`` option).
        pool: the :class:`engine.worker.kv_pool.KVPool` (bf16, fp16 or fp32 storage; fp8's
            per-layer scales keep it on the eager path).
        max_positions: rows of the rotary table (the context window in tokens).

    Raises:
        ValueError: the model is not one :func:`unsupported_reason` accepts.
    """

    def __init__(self, model, pool, max_positions: int):
        reason = unsupported_reason(model)
        if reason:
            raise ValueError(reason)
        cfg, inner = model.config, model.model
        self.dtype = inner.embed_tokens(torch.zeros(1, dtype=torch.long,
                                                    device=model.device)).dtype
        self.vocab_size = cfg.vocab_size
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = inner.norm.variance_epsilon
        if pool.fp8:
            raise ValueError("an fp8 KV cache runs the eager decode step")
        self.k_pool, self.v_pool, self.block_size = pool.k, pool.v, pool.block_size
        self.embed, self.lm_head, self.norm = inner.embed_tokens, model.lm_head, inner.norm.weight
        self.layers = []
        for block in inner.layers:
            att, mlp = block.self_attn, block.mlp
            self.layers.append(_Layer(
                block.input_layernorm.weight, block.post_attention_layernorm.weight,
                _split(att.q_proj, ("q_proj", "k_proj", "v_proj"), att), att.o_proj,
                _split(mlp.gate_proj, ("gate_proj", "up_proj"), mlp), mlp.down_proj))
        self.scale = float(inner.layers[0].self_attn.scaling)
        positions = torch.arange(max_positions, device=model.device)[None]
        probe = torch.empty(1, dtype=self.dtype, device=model.device)
        with torch.inference_mode():
            cos, sin = inner.rotary_emb(probe, positions)                # [1, P, d]
        self.cos, self.sin = cos[0].clone(), sin[0].clone()
        self.attend = attention_for(probe, self.k_pool[0].dtype)   # C++ op where it applies
        self.regions = REGIONS

    def _rms_norm(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """transformers' ``LlamaRMSNorm``: fp32 statistics, the weight applied in ``h``'s dtype."""
        x = h.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x.to(h.dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotary embedding as transformers applies it: ``x·cos + rotate_half(x)·sin``."""
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _attention_inputs(self, layer: _Layer, h: torch.Tensor, cos: torch.Tensor,
                          sin: torch.Tensor):
        """A layer's first half: ``h [B, hidden]`` → rotated ``q [B, heads, d]``, ``k`` and
        ``v [B, kv_heads, d]``."""
        b = h.shape[0]
        x = self._rms_norm(h, layer.ln1)
        q, k, v = layer.qkv(x)
        q = self._rotate(q.view(b, self.heads, self.head_dim), cos, sin)
        k = self._rotate(k.view(b, self.kv_heads, self.head_dim), cos, sin)
        return q, k, v.reshape(b, self.kv_heads, self.head_dim)

    def _layer_output(self, layer: _Layer, h: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """A layer's second half: the residual stream ``h [B, hidden]`` and the attention's
        output ``o [B, heads, d]`` → the next layer's ``h``."""
        b = h.shape[0]
        h = h + layer.o_proj(o.reshape(b, self.heads * self.head_dim))
        x = self._rms_norm(h, layer.ln2)
        gate, up = layer.gate_up(x)
        return h + layer.down(F.silu(gate) * up)

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                 blocks: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """One decode token per row: :meth:`hidden_states`, then the LM head.

        Returns:
            ``[B, vocab]`` logits in the model's dtype.
        """
        return self.lm_head(self.hidden_states(input_ids, positions, slots, blocks, lens))

    def hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                      blocks: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """Every row's last hidden state, after the final norm (what the LM head reads).

        A row is one token: a sequence's decode token, a draft it verifies, or a prompt token
        of a prefill chunk. The attention op writes every row's key and value into the pool
        before any row attends, and each row attends to its own ``lens`` tokens through its own
        block table, so the rows of one prompt chunk see each other causally (the same kernel
        and bits as a decode row: batch- and chunk-invariant). The compiled graph is this
        method; the LM head runs after it on the rows that sample only
        (:meth:`engine.worker.compiled.compiled_backend.CompiledBackend.run_rows`).

        Args:
            input_ids, positions, slots, lens: ``[B]`` int64 (the row's token, its position,
                its pool slot, the tokens it attends to including itself).
            blocks: ``[B, W]`` int64 block tables.

        Returns:
            ``[B, hidden]`` in the model's dtype.
        """
        # the lookup is kept out of the norms' kernels: batch invariance (barrier_op.py)
        h = torch.ops.playground.fusion_barrier(self.embed(input_ids))     # [B, hidden]
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]   # [B, 1, d]
        first, second = ((_attention_inputs, _layer_output) if self.regions else
                         (LlamaDecodeForward._attention_inputs, LlamaDecodeForward._layer_output))
        for i, layer in enumerate(self.layers):
            q, k, v = first(self, layer, h, cos, sin)
            o = self.attend(q, k, v, self.k_pool[i], self.v_pool[i], slots, blocks, lens,
                            self.block_size, self.scale)
            h = second(self, layer, h, o)
        return self._rms_norm(h, self.norm)


@torch.compiler.nested_compile_region
def _attention_inputs(forward: LlamaDecodeForward, layer: _Layer, h: torch.Tensor,
                      cos: torch.Tensor, sin: torch.Tensor):
    """:meth:`LlamaDecodeForward._attention_inputs` as a region compiled once for every layer
    (:data:`REGIONS`); the layer's weights are the region's inputs."""
    return forward._attention_inputs(layer, h, cos, sin)


@torch.compiler.nested_compile_region
def _layer_output(forward: LlamaDecodeForward, layer: _Layer, h: torch.Tensor,
                  o: torch.Tensor) -> torch.Tensor:
    """:meth:`LlamaDecodeForward._layer_output` as a region compiled once for every layer
    (:data:`REGIONS`)."""
    return forward._layer_output(layer, h, o)
