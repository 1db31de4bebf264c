"""Block pool bookkeeping: allocation on demand, prefix-cache keys, eviction order, release."""

import pytest

from engine.core.block_manager import BlockManager


def test_allocate_grow_and_free_returns_every_block():
    bm = BlockManager(num_blocks=8, block_size=4)
    table, cached, new = bm.allocate(list(range(10)), max_new=100)
    assert cached == 0 and new == 10 and len(table) == 3
    assert bm.num_free == 5
    assert bm.ensure_capacity(table, 13) and len(table) == 4
    assert not bm.ensure_capacity(table, 100) and len(table) == 4
    bm.free(table)
    assert table == [] and bm.num_free == 8 and bm.stats().used == 0


def test_chunk_allocates_only_what_the_budget_allows():
    bm = BlockManager(num_blocks=8, block_size=4)
    table, cached, new = bm.allocate(list(range(10)), max_new=5)
    assert (cached, new, len(table)) == (0, 5, 2)


def test_prefix_hits_need_full_blocks_and_never_the_last_token():
    bm = BlockManager(num_blocks=16, block_size=4)
    prompt = list(range(100, 110))  # 10 tokens: two full blocks
    table, _, _ = bm.allocate(prompt, 100)
    bm.register_full_blocks(table, prompt, num_computed=10, first_unkeyed=0)
    again, cached, new = bm.allocate(prompt + [7, 8], 100)
    assert cached == 8 and new == 4 and again[:2] == table[:2]
    assert bm.blocks[table[0]].ref_count == 2
    exact, cached2, new2 = bm.allocate(list(range(100, 108)), 100)  # 8 tokens, 2 blocks
    assert cached2 == 4 and new2 == 4  # the last token is always computed
    other, cached3, _ = bm.allocate([1, 2, 3, 4, 5], 100)
    assert cached3 == 0
    s = bm.stats()
    assert s.hit_tokens == 12 and s.queried_tokens == 10 + 12 + 8 + 5
    assert s.hit_rate == pytest.approx(12 / 35)


def test_freed_blocks_stay_cached_until_reused_and_cached_blocks_are_evicted_last():
    bm = BlockManager(num_blocks=4, block_size=2)
    prompt = [1, 2, 3, 4, 5]
    table, _, _ = bm.allocate(prompt, 100)
    bm.register_full_blocks(table, prompt, 5, 0)
    keyed = table[:2]
    bm.free(table)
    s = bm.stats()
    assert s.free == 4 and s.cached == 2
    # a request that needs one block takes an unkeyed one first, so the prefix survives
    t2, _, _ = bm.allocate([9], 100)
    assert t2[0] not in keyed
    t3, cached, _ = bm.allocate(prompt, 100)
    assert cached == 4 and t3[:2] == keyed
    # pressure evicts keys: a different prompt that needs every remaining block
    bm.free(t3)
    bm.free(t2)
    t4, _, _ = bm.allocate([7, 7, 7, 7, 7, 7, 7, 7], 100)
    assert len(t4) == 4 and bm.stats().cached == 0
    bm.free(t4)
    _, cached_after, _ = bm.allocate(prompt, 100)
    assert cached_after == 0


def test_can_allocate_counts_revived_cached_blocks():
    bm = BlockManager(num_blocks=3, block_size=2)
    prompt = [1, 2, 3, 4, 5]
    table, _, _ = bm.allocate(prompt, 100)
    bm.register_full_blocks(table, prompt, 5, 0)
    bm.free(table)
    assert bm.can_allocate(prompt, 100)
    busy, _, _ = bm.allocate([8, 8, 8, 8, 8], 100)
    assert not bm.can_allocate([9, 9, 9], 100)
    bm.free(busy)


def test_invalid_sizes():
    with pytest.raises(ValueError):
        BlockManager(0, 16)


def test_cached_count_matches_a_recount_through_random_traffic():
    import random

    rng = random.Random(0)
    bm = BlockManager(num_blocks=24, block_size=4)
    prefixes = [[rng.randrange(50) for _ in range(8)] for _ in range(3)]
    live: list[tuple[list[int], list[int]]] = []
    for _ in range(400):
        if live and (rng.random() < 0.45 or bm.num_free < 6):
            table, _ = live.pop(rng.randrange(len(live)))
            bm.free(table)
        else:
            ids = rng.choice(prefixes) + [rng.randrange(50) for _ in range(rng.randrange(1, 9))]
            if not bm.can_allocate(ids, 100):
                continue
            table, _, new = bm.allocate(ids, 100)
            bm.register_full_blocks(table, ids, len(ids), 0)
            live.append((table, ids))
        recount = sum(1 for b in bm.blocks if b.ref_count == 0 and b.key is not None)
        stats = bm.stats()
        assert stats.cached == recount
        assert stats.used + stats.free == 24
    assert bm.stats().cached > 0  # the traffic did leave prefixes cached
