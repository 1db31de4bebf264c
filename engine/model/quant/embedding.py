"""A token embedding whose rows are dequantized on lookup from a quantized matrix.

With tied embeddings (SmolLM2, most small models) the input embedding is also the LM head. The
quantized LM head (:class:`engine.model.quant.int4.Int4Linear` or
:class:`engine.model.quant.int8.Int8Linear`) keeps the only copy of the matrix; a lookup of
``T`` tokens dequantizes just those ``T`` rows, so no full-precision copy of the
``vocab × hidden`` matrix is kept.
"""

from __future__ import annotations

import torch
from torch import nn


class QuantEmbedding(nn.Module):
    """``embedding(ids) = W[ids]`` with ``W`` held by a quantized linear layer ``source``.

    Args:
        source: a module with ``dequantize(rows [R]) -> [R, hidden]`` (bf16), ``out_features``
            (vocabulary) and ``in_features`` (hidden size); unless ``owns``, it is not registered
            as a submodule, so its buffers are counted once (as the LM head's).
        dtype: the dtype of the returned embeddings (the model's activation dtype).
        padding_idx: kept for code that reads it (``nn.Embedding``'s attribute).
        owns: register ``source`` as this module's submodule ``table`` (untied embeddings, where
            nothing else holds it).
    """

    def __init__(self, source: nn.Module, dtype: torch.dtype, padding_idx: int | None = None,
                 owns: bool = False):
        super().__init__()
        self._source = (source,)  # a tuple: not a submodule (the LM head owns it when tied)
        if owns:
            self.table = source
        self.num_embeddings, self.embedding_dim = source.out_features, source.in_features
        self.dtype, self.padding_idx = dtype, padding_idx

    @property
    def source(self) -> nn.Module:
        """The quantized matrix's module (the LM head when the embeddings are tied)."""
        return self._source[0]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``input_ids [...]`` int64 → ``[..., hidden]`` in ``dtype``."""
        rows = self.source.dequantize(input_ids.reshape(-1))
        return rows.to(self.dtype).view(*input_ids.shape, self.embedding_dim)

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, {self.embedding_dim}, rows dequantized on lookup from "
                f"{type(self.source).__name__}")
