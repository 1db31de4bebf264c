"""The block manager's stand-in for the one-request-at-a-time path."""

from __future__ import annotations

from engine.core.block_manager import BlockStats


class ContiguousCacheManager:
    """The block manager's stand-in when each request keeps its own contiguous cache.

    The model runner holds the caches (one transformers ``DynamicCache`` per request), so
    admission is never short of blocks and there is nothing to key or share; every method
    answers as a pool that always has room and no blocks.
    """

    block_size = 1
    enable_prefix_caching = False

    def can_allocate(self, token_ids: list[int], max_new: int, salt: str | None = None) -> bool:
        return True

    def allocate(self, token_ids: list[int], max_new: int,
                 salt: str | None = None) -> tuple[list[int], int, int]:
        """No blocks, nothing cached, up to ``max_new`` tokens to compute."""
        return [], 0, min(len(token_ids), max_new)

    def ensure_capacity(self, table: list[int], num_tokens: int) -> bool:
        return True

    def is_shared(self, table: list[int], position: int) -> bool:
        """Never: nothing is shared without blocks."""
        return False

    def register_full_blocks(self, table, token_ids, num_computed, first_unkeyed, salt=None) -> int:
        return first_unkeyed

    def free(self, table: list[int]) -> None:
        table.clear()

    def utilization(self, tables) -> float:
        return 0.0

    def stats(self) -> BlockStats:
        """An empty pool."""
        return BlockStats(0, 0, 0, 0, 0, 0, 0)
