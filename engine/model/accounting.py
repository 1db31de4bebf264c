"""Byte accounting of tensors the engine owns: model weights and KV cache tensors."""

from __future__ import annotations

import torch


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters and buffers, each storage counted once.

    Storages are deduplicated by ``data_ptr`` so tied weights (an input embedding shared with
    the LM head) count once, as docs/metrics.md ("Memory breakdown") defines. A module's opaque
    weight that is not a buffer (oneDNN's packed bf16 layout,
    :class:`engine.model.quant.packed.PackedLinear`) counts through its ``packed_bytes``.

    Returns:
        Total bytes (int).
    """
    seen: dict[int, int] = {}
    for t in list(model.parameters()) + list(model.buffers()):
        if t.device.type == "meta":
            continue
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    packed = sum(getattr(m, "packed_bytes", 0) for m in model.modules())
    return sum(seen.values()) + packed


def lookup_only_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights a decode step does not read in full: the input embedding's dense table
    when the LM head multiplies with a packed copy of it
    (:class:`engine.model.quant.packed.PackedLinear` with ``tied_copy``). The lookup reads one
    row per token; the copy is what streams through every step. 0 for every other model.

    Returns:
        Bytes (int).
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if not getattr(head, "tied_copy", False) or embed is None:
        return 0
    return embed.weight.untyped_storage().nbytes()


def parameter_count(model: torch.nn.Module) -> int:
    """Number of unique parameters (tied weights once); a quantized matrix
    (:mod:`engine.model.quant`, stored as buffers) counts its ``num_weights`` logical elements."""
    seen: dict[int, int] = {}
    for p in model.parameters():
        seen[p.data_ptr()] = p.numel()
    for m in model.modules():
        if hasattr(m, "num_weights") and not isinstance(m, torch.nn.Parameter):
            seen[id(m)] = m.num_weights
    return sum(seen.values())


def cache_tensor_bytes(cache) -> int:
    """Measured KV cache size: the sum of ``nbytes`` of every key and value tensor.

    Args:
        cache: a transformers ``Cache`` (``.layers`` with ``.keys``/``.values``), or ``None``.

    Returns:
        Bytes (int); 0 for ``None`` or an empty cache.
    """
    if cache is None:
        return 0
    total = 0
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                total += t.nbytes
    return total


def cache_length(cache) -> int:
    """Tokens held by the cache (``get_seq_length()``), 0 for ``None``."""
    if cache is None:
        return 0
    return int(cache.get_seq_length())
