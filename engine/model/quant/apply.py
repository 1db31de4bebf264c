"""Quantize a loaded float model as it loads: its ``nn.Linear`` layers and embedding swapped
for quantized modules; transformers' model code stays as it is.

``int8``: every linear layer and the LM head per output channel (:class:`.int8.Int8Linear`).
``int4``: the decoder's linear layers in groups of 32 (:class:`.int4.Int4Linear`), the LM head
and embedding in int8 (the LM head decides every logit: at 4 bits it cost the embedded model 13
points of top-1 agreement, at 8 bits 3). A tied input embedding becomes a
:class:`.embedding.QuantEmbedding` reading the LM head's rows, so no full-precision copy stays.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.model.quant import fused
from engine.model.quant.embedding import QuantEmbedding
from engine.model.quant.int4 import GROUP_SIZE, Int4Linear, check_shape
from engine.model.quant.int8 import Int8Linear


def kernel_available(weights: str, device: torch.device) -> tuple[bool, str]:
    """Whether PyTorch's ``weights`` kernel runs on ``device`` (tried on a tiny product).

    Returns:
        ``(ok, why)``: ``why`` names the failure when not ok.
    """
    try:
        lin = nn.Linear(64, 32, bias=False).to(device)
        layer = Int4Linear.from_linear(lin) if weights == "int4" else Int8Linear.from_linear(lin)
        layer(torch.ones(1, 64, device=device))
        return True, ""
    except (RuntimeError, NotImplementedError) as exc:
        return False, str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__


def _set(model: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, child = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def quantize_model(model: nn.Module, weights: str, dtype: torch.dtype) -> list[str]:
    """Replace the model's linear layers (and embedding) by quantized ones, in place.

    Args:
        model: a transformers ``*ForCausalLM`` with float weights, on its final device.
        weights: ``int8`` or ``int4``.
        dtype: compute dtype for what stays float (norms, biases, activations).

    Returns:
        Notes for the page (layers left in float, a missing kernel's fallback).

    Raises:
        ValueError: ``int4`` and a layer whose inputs are not a multiple of 32 (or outputs
            not of 16); the message names the field and the layer.
    """
    device = next(model.parameters()).device
    notes: list[str] = []
    ok, why = kernel_available(weights, device)
    head_ok, head_why = (ok, why) if weights == "int8" else kernel_available("int8", device)
    if not ok:
        _cast_float_parameters(model, dtype)
        return [f"weights={weights}: no {weights} kernel on {device.type} ({why}); the weights "
                f"stay {str(dtype).replace('torch.', '')}"]
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear) and m is not head]
    if weights == "int4":
        for name, m in linears:
            check_shape(name, m.out_features, m.in_features, GROUP_SIZE)
    skipped = [n for n, m in model.named_modules()
               if type(m).__name__ == "Conv1D"]  # GPT-2's transposed linears stay float
    make = Int4Linear.from_linear if weights == "int4" else Int8Linear.from_linear
    for parent in list(model.modules()):
        for names in fused.GROUPS:   # q/k/v and gate/up of a block as one stacked product
            if fused.fusable(parent, names):
                mods = [getattr(parent, n) for n in names]
                fused.install(parent, names, make(_as_linear(torch.cat([m.weight for m in mods]))),
                              [m.out_features for m in mods])
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear) and m is not head]
    for name, m in linears:
        _set(model, name, make(m))
    tied = isinstance(head, nn.Linear) and isinstance(embed, nn.Embedding) and \
        head.weight.data_ptr() == embed.weight.data_ptr()
    if not head_ok:
        notes.append(f"no int8 kernel on {device.type} ({head_why}): the LM head and embedding "
                     f"stay {str(dtype).replace('torch.', '')}")
    elif isinstance(head, nn.Linear):
        q_head = Int8Linear.from_linear(head)
        model.set_output_embeddings(q_head)
        if tied:
            model.set_input_embeddings(QuantEmbedding(q_head, dtype, embed.padding_idx))
    if head_ok and isinstance(embed, nn.Embedding) and not tied:
        table = Int8Linear.from_linear(_as_linear(embed.weight))
        model.set_input_embeddings(QuantEmbedding(table, dtype, embed.padding_idx, owns=True))
    _cast_float_parameters(model, dtype)
    if skipped:
        notes.append(f"{len(skipped)} Conv1D layers stay {str(dtype).replace('torch.', '')}")
    return notes


def _cast_float_parameters(model: nn.Module, dtype: torch.dtype) -> None:
    """Cast what stays a float parameter (norm weights, biases) to the compute dtype; the
    quantized modules' scales and the rotary buffers keep theirs."""
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)


def _as_linear(weight: torch.Tensor) -> nn.Linear:
    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    lin.weight = nn.Parameter(weight.detach(), requires_grad=False)
    return lin
