"""The KV block pool: every layer's keys and values for all blocks, allocated once."""

from __future__ import annotations

import torch


class KVPool:
    """Preallocated K and V tensors shared by all sequences through their block tables.

    Per layer, K and V have shape ``[num_blocks × block_size, kv_heads, head_dim]``; token slot
    ``s`` of block ``b`` is row ``b × block_size + s``. The tensors are zero-filled at creation,
    so their memory is committed up front (as a serving engine reserves its KV cache).

    Args:
        layers, kv_heads, head_dim: from the model config.
        num_blocks, block_size: pool geometry.
        dtype, device: those of the model.
    """

    def __init__(self, layers: int, kv_heads: int, head_dim: int, num_blocks: int,
                 block_size: int, dtype: torch.dtype, device):
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (num_blocks * block_size, kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.bytes_per_token = 2 * layers * kv_heads * head_dim * self.k[0].element_size()

    def layer(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V pool tensors of layer ``idx``."""
        return self.k[idx], self.v[idx]

    @property
    def nbytes(self) -> int:
        """Bytes of all pool tensors (measured from the tensors)."""
        return sum(t.nbytes for t in self.k) + sum(t.nbytes for t in self.v)

    @property
    def block_bytes(self) -> int:
        """Bytes one block holds across all layers, K and V."""
        return self.nbytes // self.num_blocks

    @staticmethod
    def blocks_for_budget(budget_bytes: int, bytes_per_token: int, block_size: int) -> int:
        """How many blocks fit in ``budget_bytes``."""
        return max(1, budget_bytes // (bytes_per_token * block_size))
