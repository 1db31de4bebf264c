"""The embedded GGUF's 4-bit blocks loaded straight into int4 layers (no fp32 model on the way).

``SmolLM2-135M-Instruct.Q4_1.gguf`` stores every linear layer of the decoder as Q4_1 blocks:
32 consecutive weights of one row share an fp16 scale ``d`` and an fp16 minimum ``m``, and
``w = d · q + m`` with ``q`` in 0..15 (ggml's ``block_q4_1``: 2 bytes ``d``, 2 bytes ``m``, 16
bytes of codes, byte ``j`` holding weight ``j`` in its low nibble and weight ``j + 16`` in its
high nibble; ``gguf.quants.Q4_1.dequantize_blocks``). GGUF lists a matrix's shape innermost
first (``[K, N]``); its raw data, read with ``gguf.GGUFReader``, is ``uint8 [N, bytes per
row]``, one output row after another, as PyTorch's ``[N, K]``.

Two details make the layout match transformers' own dequantized model:

- llama.cpp's converter permutes the rows of ``attn_q`` and ``attn_k`` (rotary halves
  interleaved per head); transformers undoes it (``LlamaTensorProcessor._reverse_permute_weights``).
  Rows move whole, so the same permutation is applied to the rows of codes, scales and minimums;
  it is computed by running transformers' own function on row indices.
- GGUF names map to the model's parameter names with transformers'
  ``get_gguf_hf_weights_map`` (the ``gguf`` package's tensor name tables).

The token embedding (also the LM head, tied) is Q8_0 in this file (blocks of 32 int8 codes and
an fp16 scale). PyTorch has no kernel for int8 blocks with a scale per 32 weights, so it is the
one matrix quantized again: to int8 with one scale per row (:class:`~engine.model.quant.int8.Int8Linear`)
from its exact Q8_0 values. Measured on ``assets/quality-text.txt`` against fp32: int4 groups
for this matrix dropped top-1 agreement to 83% (KL 0.055), int8 rows keep 96% (KL 0.003); the
LM head sees every logit, so it is the matrix where bits matter most. F32 tensors (the
RMSNorm weights) are copied in the compute dtype.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from engine.model.gguf_reading import read_gguf
from engine.model.quant import fused
from engine.model.quant.embedding import QuantEmbedding
from engine.model.quant.int4 import GROUP_SIZE, Int4Linear, quantize_groups
from engine.model.quant.int8 import Int8Linear, quantize_rows

Q4_1_BLOCK_BYTES = 20  # fp16 d, fp16 m, 16 bytes of 4-bit codes
Q8_0_BLOCK_BYTES = 34  # fp16 d, 32 int8 codes


def q4_1_blocks(raw: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split Q4_1 rows into codes, scales and minimums.

    Args:
        raw: ``uint8 [N, K/32 × 20]`` (one row of blocks per output).

    Returns:
        ``(q uint8 [N, K] in 0..15, d float16 [N, K/32], m float16 [N, K/32])``.
    """
    n = raw.shape[0]
    blocks = torch.from_numpy(np.array(raw)).view(n, -1, Q4_1_BLOCK_BYTES)
    d = blocks[..., 0:2].contiguous().view(torch.float16)[..., 0]
    m = blocks[..., 2:4].contiguous().view(torch.float16)[..., 0]
    qs = blocks[..., 4:]
    q = torch.cat([qs & 15, qs >> 4], -1)                          # [N, K/32, 32]
    return q.reshape(n, -1), d, m


def q8_0_values(raw: np.ndarray) -> torch.Tensor:
    """Q8_0 rows to their exact values ``d · q`` (float32 ``[N, K]``).

    Args:
        raw: ``uint8 [N, K/32 × 34]``.
    """
    n = raw.shape[0]
    blocks = torch.from_numpy(np.array(raw)).view(n, -1, Q8_0_BLOCK_BYTES)
    d = blocks[..., 0:2].contiguous().view(torch.float16).float()    # [N, K/32, 1]
    q = blocks[..., 2:].contiguous().view(torch.int8).float()         # [N, K/32, 32]
    return (q * d).reshape(n, -1)


def matrix_values(raw: np.ndarray, kind) -> torch.Tensor:
    """A GGUF matrix's exact values as float32 ``[N, K]`` (Q8_0 by :func:`q8_0_values`, other
    block types by ``gguf.quants.dequantize``, F32/F16 as they are)."""
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize

    if kind == T.Q8_0:
        return q8_0_values(raw)
    if kind in (T.F32, T.F16):
        return torch.from_numpy(np.array(raw, dtype=np.float32))
    return torch.from_numpy(np.array(dequantize(raw, kind), dtype=np.float32))


def row_order(name: str, rows: int, config: dict) -> np.ndarray | None:
    """The row permutation transformers applies to a GGUF tensor (``None`` when none).

    Runs ``LlamaTensorProcessor.process`` on a column of row indices, so the order is exactly
    the one transformers gives its own dequantized weights.
    """
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS

    proc = TENSOR_PROCESSORS.get(config.get("model_type", ""))
    if proc is None:
        return None
    idx = np.arange(rows, dtype=np.int64)[:, None]
    out = proc(config=config).process(weights=idx, name=name).weights[:, 0]
    return None if np.array_equal(out, idx[:, 0]) else out


def _set(model: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, child = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def load_q4_model(gguf_path: str, folder: str, dtype: torch.dtype, device="cpu",
                  progress=None) -> nn.Module:
    """Build the model from its config and fill it from the GGUF's blocks, in int4.

    Args:
        gguf_path: the ``.gguf`` file.
        folder: a folder with the model's ``config.json``.
        dtype: compute dtype (activations, norms).
        device: where the model runs (the int4 packing differs between CPU and CUDA).
        progress: ``progress(message)`` or ``None``.

    Returns:
        The ``*ForCausalLM`` in eval mode on ``device``: every GGUF matrix an
        :class:`~engine.model.quant.int4.Int4Linear`, the input embedding a
        :class:`~engine.model.quant.embedding.QuantEmbedding` reading the LM head's rows.

    Raises:
        ValueError: parameters the file leaves unset (tensors whose names don't map are
            skipped, as transformers skips them).
    """
    from accelerate import init_empty_weights
    from gguf import GGMLQuantizationType as T
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    with init_empty_weights(include_buffers=False):   # parameters on "meta", rotary buffers real
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    cfg = config.to_dict()
    names = gguf_names(model, config)
    reader = read_gguf(gguf_path)
    params = dict(model.named_parameters(remove_duplicate=False))
    done: set[str] = set()
    blocks: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    embed_key = "model.embed_tokens.weight"
    for t in reader.tensors:
        hf = names.get(t.name)
        if hf is None:
            continue
        done.add(hf)
        raw = t.data
        if raw.ndim == 1:     # vectors (norm weights, biases): plain parameters
            value = torch.from_numpy(np.array(raw, dtype=np.float32)).reshape(params[hf].shape)
            _set(model, hf, nn.Parameter(value.to(device, dtype), requires_grad=False))
            continue
        order = row_order(t.name, raw.shape[0], cfg)
        if hf == embed_key:   # embedding and tied LM head: int8 rows from the exact values
            w = matrix_values(raw, t.tensor_type)
            q8, s8 = quantize_rows(w if order is None else w[order])
            layer = Int8Linear(q8.to(device), s8.to(device))
            tied = bool(config.tie_word_embeddings)
            if tied:
                _set(model, "lm_head", layer)
                done.add("lm_head.weight")
            _set(model, "model.embed_tokens",
                 QuantEmbedding(layer, dtype, getattr(config, "pad_token_id", None), owns=not tied))
            continue
        if t.tensor_type == T.Q4_1:
            q, d, m = q4_1_blocks(raw)
        else:                 # another matrix type: its exact values, quantized to int4 groups
            q, d, m = quantize_groups(matrix_values(raw, t.tensor_type), GROUP_SIZE)
        if order is not None:
            q, d, m = q[order], d[order], m[order]
        blocks[hf.removesuffix(".weight")] = (q.to(device), d.to(device), m.to(device))
    _install_int4(model, blocks)
    missing = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    if missing:
        raise ValueError(f"the GGUF file leaves {len(missing)} parameters unset, e.g. {missing[0]}")
    if progress is not None:
        progress(f"read {sum(1 for t in reader.tensors if t.name in names)} GGUF tensors straight "
                 "into int4 layers (no fp32 copy)")
    model.to(device)   # the rotary buffers (the rest is there already)
    model.eval()
    return model


def _install_int4(model: nn.Module, blocks: dict) -> None:
    """Put the int4 layers in place: q/k/v and gate/up of each block as one stacked product
    (:mod:`engine.model.quant.fused`), every other matrix alone."""
    for path in sorted({p.rpartition(".")[0] for p in blocks}):
        parent = model.get_submodule(path)
        for names in fused.GROUPS:
            keys = [f"{path}.{n}" for n in names]
            if all(k in blocks for k in keys) and fused.fusable(parent, names):
                q, d, m = (torch.cat([blocks[k][i] for k in keys]) for i in range(3))
                fused.install(parent, names, Int4Linear(q.shape[1], q.shape[0], q, d, m),
                              [blocks[k][0].shape[0] for k in keys])
                for k in keys:
                    del blocks[k]
    for path, (q, d, m) in blocks.items():
        _set(model, path, Int4Linear(q.shape[1], q.shape[0], q, d, m))


def gguf_names(model: nn.Module, config) -> dict[str, str]:
    """GGUF tensor name → the model's parameter name (``blk.0.attn_q.weight`` →
    ``model.layers.0.self_attn.q_proj.weight``), from the ``gguf`` package's name tables, as
    transformers' ``get_gguf_hf_weights_map`` reads them (built once here, not per submodule)."""
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

    arch = next((k for k, v in MODEL_ARCH_NAMES.items() if v == config.model_type), None)
    if arch is None:
        raise ValueError(f"the gguf package has no tensor names for {config.model_type!r}")
    table = get_tensor_name_map(arch, config.num_hidden_layers)
    out = {}
    for name, _ in model.named_parameters(remove_duplicate=False):
        stem, _, suffix = name.rpartition(".")
        gguf = table.get_name(stem)
        if gguf is not None:
            out[f"{gguf}.{suffix}"] = name
    return out
