"""The block manager: a pool of fixed-size KV blocks, block tables, and prefix caching.

PagedAttention (Kwon et al., SOSP 2023, the vLLM paper) stores each sequence's keys and values
in fixed-size blocks that need not be contiguous; a per-sequence *block table* maps the
sequence's logical blocks to physical blocks of one pool allocated once. Blocks are taken on
demand and returned when a sequence finishes, is aborted or preempted.

Prefix caching (as in vLLM's automatic prefix caching): a *full* block is keyed by a hash of
all the tokens up to its end, so requests sharing a prefix (a system prompt, a lesson's
preamble) reuse its blocks. Freed blocks keep their key until the pool reuses them, least
recently freed last.

Isolation (vLLM's ``cache_salt``): a request may carry a salt that is mixed into its first
block's key, so only requests with the same salt share cached blocks. Without it, one user could
confirm another's prompt prefix by timing a request (a hit prefills far faster).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


FREE, CACHED, USED = 0, 1, 2
STATE_NAMES = ("free", "cached", "used")


@dataclass
class Block:
    """One physical block: ``block_size`` token slots in every layer's K and V pool.

    Attributes:
        block_id: index into the pool.
        ref_count: sequences whose block table holds it.
        key: prefix-cache key (hash of all tokens up to this block's end) once full, else None.
        tokens: the block's token ids when full (checked on a hash hit to rule out collisions).
    """

    block_id: int
    ref_count: int = 0
    key: int | None = None
    tokens: tuple[int, ...] = ()


@dataclass
class BlockStats:
    """Pool occupancy (in blocks) and prefix-cache hit counts (in tokens)."""

    num_blocks: int
    block_size: int
    used: int
    free: int
    cached: int
    hit_tokens: int
    queried_tokens: int

    @property
    def hit_rate(self) -> float:
        """Prompt tokens served from cached blocks / prompt tokens looked up (0 when none)."""
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


def block_key(parent: int | None, tokens: tuple[int, ...], salt: str | None = None) -> int:
    """Prefix-cache key of a full block: a hash of the parent block's key and its own tokens.

    The first block (``parent`` None) also hashes the request's ``salt``, so every later key
    depends on it too.
    """
    return hash((parent, tokens)) if parent is not None else hash((salt, tokens))


class BlockManager:
    """Allocates blocks to sequences and keeps the prefix cache.

    Args:
        num_blocks: blocks in the pool.
        block_size: token slots per block (16 by default in the engine).
        enable_prefix_caching: reuse full blocks keyed by their prefix hash.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be at least 1")
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._by_key: dict[int, int] = {}
        self._cached_free = 0  # free blocks that still hold a prefix key (kept, not recounted)
        self._state = bytearray(num_blocks)  # FREE / CACHED / USED per block, kept as they change
        self.hit_tokens = 0
        self.queried_tokens = 0

    # queries ------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free)

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    def stats(self) -> BlockStats:
        """Current occupancy; ``cached`` counts free blocks that still hold a prefix key."""
        return BlockStats(len(self.blocks), self.block_size, len(self.blocks) - len(self._free),
                          len(self._free), self._cached_free, self.hit_tokens,
                          self.queried_tokens)

    # allocation ---------------------------------------------------------------------------
    def _take_free(self) -> int:
        block_id, _ = self._free.popitem(last=False)
        block = self.blocks[block_id]
        if block.key is not None:  # evict its prefix-cache entry
            self._cached_free -= 1
            if self._by_key.get(block.key) == block_id:
                del self._by_key[block.key]
            block.key, block.tokens = None, ()
        block.ref_count = 1
        self._state[block_id] = USED
        return block_id

    def _cached_prefix(self, token_ids: list[int], max_tokens: int, salt: str | None) -> list[int]:
        """Block ids of the longest run of cached full blocks covering at most ``max_tokens``."""
        hits: list[int] = []
        parent = None
        bs = self.block_size
        for start in range(0, max_tokens - bs + 1, bs):
            tokens = tuple(token_ids[start:start + bs])
            key = block_key(parent, tokens, salt)
            block_id = self._by_key.get(key)
            if block_id is None or self.blocks[block_id].tokens != tokens:
                break
            hits.append(block_id)
            parent = key
        return hits

    def _plan(self, token_ids: list[int], max_new: int,
              salt: str | None) -> tuple[list[int], int, int, int]:
        """(hit blocks, cached tokens, new tokens, fresh blocks needed) for a fresh start."""
        hits = (self._cached_prefix(token_ids, len(token_ids) - 1, salt)
                if self.enable_prefix_caching else [])
        cached = len(hits) * self.block_size
        new = min(len(token_ids) - cached, max_new)
        fresh = self.blocks_needed(cached + new) - len(hits)
        return hits, cached, new, fresh

    def can_allocate(self, token_ids: list[int], max_new: int, salt: str | None = None,
                     reserve: int = 0) -> bool:
        """Whether the sequence can start with up to ``max_new`` computed tokens this step,
        leaving ``reserve`` more blocks free (the forks of a request with several sequences)."""
        hits, _, new, fresh = self._plan(token_ids, max_new, salt)
        revived = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        return new > 0 and fresh + reserve <= self.num_free - revived

    def allocate(self, token_ids: list[int], max_new: int,
                 salt: str | None = None) -> tuple[list[int], int, int]:
        """Build a block table for a sequence that starts (or restarts after preemption).

        Args:
            token_ids: the sequence's tokens (prompt, plus output when recomputing).
            max_new: most tokens it may compute this step (the step's remaining token budget).
            salt: the request's cache salt (only blocks cached under the same salt are reused).

        Returns:
            ``(block_table, cached_tokens, new_tokens)``: the table; how many leading tokens
            are already in cached blocks (never all: the last token is always computed so its
            logits exist); how many to compute now.

        Raises:
            RuntimeError: not enough free blocks (call :meth:`can_allocate` first).
        """
        hits, cached, new, fresh = self._plan(token_ids, max_new, salt)
        revived = sum(1 for b in hits if self.blocks[b].ref_count == 0)
        if fresh > self.num_free - revived:
            raise RuntimeError(f"out of KV blocks: need {fresh}, {self.num_free - revived} free")
        self.queried_tokens += len(token_ids)
        self.hit_tokens += cached
        table = []
        for b in hits:
            block = self.blocks[b]
            if block.ref_count == 0:
                del self._free[b]
                self._cached_free -= 1
                self._state[b] = USED
            block.ref_count += 1
            table.append(b)
        table.extend(self._take_free() for _ in range(fresh))
        return table, cached, new

    def ensure_capacity(self, table: list[int], num_tokens: int) -> bool:
        """Grow ``table`` in place so it holds ``num_tokens``; False (unchanged) if blocks run out."""
        need = self.blocks_needed(num_tokens) - len(table)
        if need > self.num_free:
            return False
        table.extend(self._take_free() for _ in range(max(need, 0)))
        return True

    def fork(self, table: list[int]) -> list[int]:
        """A copy of ``table`` sharing every block (each block's reference count goes up by one).

        PagedAttention's fork (Kwon et al., SOSP 2023, §4.4): a sample or beam that branches
        off shares all the blocks so far; the last, partly filled one is copied only when a
        sibling writes into it (:meth:`copy_on_write`).
        """
        for b in table:
            self.blocks[b].ref_count += 1
        return list(table)

    def is_shared(self, table: list[int], position: int) -> bool:
        """Whether the block that token ``position`` of ``table`` falls in is held by another
        table too (so writing it needs :meth:`copy_on_write` first)."""
        i = position // self.block_size
        return i < len(table) and self.blocks[table[i]].ref_count > 1

    def copy_on_write(self, table: list[int], position: int) -> tuple[int, int] | None:
        """Give ``table`` its own copy of the shared block that token ``position`` falls in.

        Returns:
            ``(src, dst)`` block ids whose contents the runner must copy before the step
            writes, or ``None`` when that block is not shared (nothing to do).

        Raises:
            RuntimeError: no free block (check :attr:`num_free` first).
        """
        if not self.is_shared(table, position):
            return None
        if not self._free:
            raise RuntimeError("out of KV blocks for a copy-on-write")
        i = position // self.block_size
        src = table[i]
        self.blocks[src].ref_count -= 1
        table[i] = self._take_free()
        return src, table[i]

    def truncate(self, table: list[int], num_tokens: int) -> int:
        """Shrink ``table`` in place to the blocks that hold ``num_tokens`` tokens, freeing the
        rest (the rolled-back slots of rejected draft tokens); returns the blocks freed.

        Slots past ``num_tokens`` in the last kept block are simply overwritten later.
        """
        keep = self.blocks_needed(num_tokens)
        tail = table[keep:]
        if tail:
            del table[keep:]
            self.free(tail)
        return len(tail)

    def register_full_blocks(self, table: list[int], token_ids: list[int], num_computed: int,
                             first_unkeyed: int, salt: str | None = None) -> int:
        """Give a prefix-cache key to each block that is now full of computed tokens.

        Args:
            table: the sequence's block table.
            token_ids: its tokens; the first ``num_computed`` have KV in the pool.
            first_unkeyed: index of the first block of ``table`` not yet keyed.
            salt: the request's cache salt (mixed into the first block's key).

        Returns:
            The new ``first_unkeyed``.
        """
        if not self.enable_prefix_caching:
            return first_unkeyed
        bs = self.block_size
        full = num_computed // bs
        parent = self.blocks[table[first_unkeyed - 1]].key if first_unkeyed > 0 else None
        for i in range(first_unkeyed, full):
            tokens = tuple(token_ids[i * bs:(i + 1) * bs])
            key = block_key(parent, tokens, salt)
            block = self.blocks[table[i]]
            if block.key is None:
                block.key, block.tokens = key, tokens
                self._by_key.setdefault(key, block.block_id)
            parent = block.key
        return max(first_unkeyed, full)

    def free(self, table: list[int]) -> None:
        """Return a sequence's blocks; tail blocks are freed first so they are evicted first."""
        for b in reversed(table):
            block = self.blocks[b]
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.key is None:
                    self._free[b] = None
                    self._free.move_to_end(b, last=False)  # no cached content: reuse soonest
                    self._state[b] = FREE
                else:
                    self._free[b] = None
                    self._cached_free += 1
                    self._state[b] = CACHED
        table.clear()

    def block_states(self, max_cells: int = 4096) -> tuple[list[str], int]:
        """The pool's picture: each cell's state in pool order, at most ``max_cells`` cells.

        Returns:
            ``(states, blocks_per_cell)``: ``used``, ``cached`` (free, holding a prefix) or
            ``free`` per cell; a cell of several blocks shows the busiest of them. The states
            are kept as blocks change, so this costs a copy and one vectorised pass, not a
            Python loop over the pool (a GPU pool can hold 200,000 blocks).
        """
        import numpy as np

        state = np.frombuffer(bytes(self._state), dtype=np.uint8)
        per_cell = max(1, -(-len(state) // max_cells))
        if per_cell > 1:
            pad = (-len(state)) % per_cell
            state = np.concatenate([state, np.zeros(pad, np.uint8)]).reshape(-1, per_cell).max(1)
        return [STATE_NAMES[v] for v in state.tolist()], per_cell

    def utilization(self, tables: list[tuple[list[int], int]]) -> float:
        """Tokens held / token slots of the blocks in ``tables``, each physical block once.

        Args:
            tables: ``(block_table, tokens filled)`` of each running sequence.

        Returns:
            A fraction in [0, 1] (0 when no block is in use).
        """
        held: dict[int, int] = {}
        bs = self.block_size
        for table, filled in tables:
            for i, blk in enumerate(table):
                held[blk] = max(held.get(blk, 0), min(bs, max(0, filled - i * bs)))
        return sum(held.values()) / max(1, len(held) * bs)
