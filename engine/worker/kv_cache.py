"""A request's own KV cache: the past keys and values its decode steps reuse."""

from __future__ import annotations

from engine.model.accounting import cache_length, cache_tensor_bytes


class KVCache:
    """Owns one request's past keys/values, measures them, and releases them.

    Wraps a transformers ``DynamicCache`` built from the model config (so sliding-window layers
    keep at most their window). Per layer the keys and values have shape
    ``[batch, kv_heads, tokens, head_dim]``.

    Args:
        config: the model's ``PretrainedConfig``.
    """

    def __init__(self, config):
        from transformers import DynamicCache

        self.cache = DynamicCache(config=config)
        self.released = False

    @property
    def num_tokens(self) -> int:
        """Tokens held (the sequence length of the cached keys)."""
        return 0 if self.released else cache_length(self.cache)

    def nbytes(self) -> int:
        """Measured size: sum of ``nbytes`` of every cached key and value tensor, in bytes."""
        return 0 if self.released else cache_tensor_bytes(self.cache)

    def release(self) -> None:
        """Drop every tensor so its memory returns to the allocator. Safe to call twice."""
        if not self.released:
            self.cache = None
            self.released = True
