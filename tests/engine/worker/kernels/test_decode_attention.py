"""The paged decode attention kernel: SDPA's result, a row's bits independent of its batch, its
thread count and of whether it is computed as a decode row or inside a prefill chunk; bad tables
refused; a missing compiler leaves the engine on SDPA with the reason."""

import pytest
import torch
import torch.nn.functional as F

from engine.worker.kernels import decode_attention as kernel

BS, KV_HEADS, D, HEADS, BLOCKS = 16, 3, 64, 9, 64


@pytest.fixture(scope="module")
def pool():
    g = torch.Generator().manual_seed(0)
    k = torch.randn(BLOCKS * BS, KV_HEADS, D, generator=g).to(torch.bfloat16)
    v = torch.randn(BLOCKS * BS, KV_HEADS, D, generator=g).to(torch.bfloat16)
    return k, v


def tables(rows: int, width: int = 12) -> torch.Tensor:
    """Distinct, shuffled block ids per row (blocks 1.. of the pool)."""
    g = torch.Generator().manual_seed(rows)
    return torch.stack([torch.randperm(BLOCKS - 1, generator=g)[:width] + 1 for _ in range(rows)])


def reference(q, k_pool, v_pool, table, lens):
    """fp32 SDPA over each row's own keys, gathered slot by slot."""
    out = []
    for i, n in enumerate(lens):
        slots = (table[i][:, None] * BS + torch.arange(BS)).reshape(-1)[:n]
        k = k_pool[slots].float().permute(1, 0, 2)[None]
        v = v_pool[slots].float().permute(1, 0, 2)[None]
        o = F.scaled_dot_product_attention(q[i:i + 1, :, None].float(), k, v, scale=D ** -0.5,
                                           enable_gqa=True)
        out.append(o[0, :, 0])
    return torch.stack(out)


def test_kernel_is_built_and_matches_sdpa(pool):
    assert kernel.unavailable_reason() is None
    q = torch.randn(6, HEADS, D).to(torch.bfloat16)
    table, lens = tables(6), [1, 17, 40, 100, 150, 192]
    got = kernel.paged_decode_attention(q, *pool, table, lens, BS, D ** -0.5)
    want = reference(q, *pool, table, lens)
    assert got.dtype == torch.bfloat16 and got.shape == (6, HEADS, D)
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=1e-2)
    assert (got == want.to(torch.bfloat16)).float().mean() > 0.99   # bf16 roundings of fp32


@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_has_the_same_bits_alone_and_in_any_batch(pool, threads, monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    q = torch.randn(32, HEADS, D).to(torch.bfloat16)
    table, lens = tables(32), [5 + 6 * i for i in range(32)]
    batch = kernel.paged_decode_attention(q, *pool, table, lens, BS, 0.125)
    for i in (0, 7, 31):
        alone = kernel.paged_decode_attention(q[i:i + 1], *pool, table[i:i + 1], lens[i:i + 1],
                                              BS, 0.125)
        assert torch.equal(alone, batch[i:i + 1])
    part = kernel.paged_decode_attention(q[8:11], *pool, table[8:11], lens[8:11], BS, 0.125)
    assert torch.equal(part, batch[8:11])


def test_prefill_rows_equal_decode_rows_at_the_same_positions(pool):
    """A chunk's query i (shared table, i + 1 keys) has the bits a decode step there has."""
    q = torch.randn(70, HEADS, D).to(torch.bfloat16)
    table = tables(1)[0]
    chunk = kernel.paged_decode_attention(q, *pool, table, list(range(1, 71)), BS, 0.125)
    later = kernel.paged_decode_attention(q[30:], *pool, table, list(range(31, 71)), BS, 0.125)
    assert torch.equal(later, chunk[30:])                 # a second chunk after 30 cached
    for i in (0, 15, 16, 69):
        one = kernel.paged_decode_attention(q[i:i + 1], *pool, table[None], [i + 1], BS, 0.125)
        assert torch.equal(one, chunk[i:i + 1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rows_of_two_prompts_each_with_its_table_equal_the_rows_alone(pool, dtype):
    """The compiled graph's prompt rows: every token a row carrying its sequence's table. Two
    consecutive rows with the same table are computed together (their keys and values read once,
    attend2); rows of different sequences, an odd row out, and a table that differs only past
    the shorter row's blocks each keep the bits of the row alone."""
    k, v = (t.to(dtype) for t in pool)
    q = torch.randn(12, HEADS, D).to(dtype)
    a, b = tables(2)
    c = a.clone()
    c[5:] = b[5:]                        # a's first five blocks, then b's
    rows = torch.stack([a] * 5 + [b] * 4 + [c, a, c])
    lens = [33, 34, 35, 36, 37, 1, 2, 3, 4, 70, 70, 100]
    batch = kernel.paged_decode_attention(q, k, v, rows, lens, BS, 0.125)
    for i in range(12):
        alone = kernel.paged_decode_attention(q[i:i + 1], k, v, rows[i:i + 1], lens[i:i + 1], BS,
                                              0.125)
        assert torch.equal(alone, batch[i:i + 1]), i
    want = reference(q, k, v, rows, lens)
    torch.testing.assert_close(batch.float(), want, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_row_computed_in_a_pair_has_the_bits_of_the_row_alone(pool, dtype):
    """100 rows of one prompt (one table, lengths 1 to 100) run two at a time (attend2) and one
    at a time (attend): the same bits for every row. Built with contraction or reassociation,
    the two paths summed in other orders: 3,960 of 4,000 fp32 rows differed by an ulp, and a
    few bf16 rows in a thousand (enough to turn one prompt's greedy token when it was computed
    beside other prompts, whose rows moved where its pairs began)."""
    k, v = (t.to(dtype) for t in pool)
    g = torch.Generator().manual_seed(1)
    differing = 0
    for trial in range(4):
        q = torch.randn(100, HEADS, D, generator=g).to(dtype)
        table = tables(1 + trial)[0][None].expand(100, -1).contiguous()
        lens = list(range(1, 101))
        paired = kernel.paged_decode_attention(q, k, v, table, lens, BS, 0.125)
        for i in range(100):
            alone = kernel.paged_decode_attention(q[i:i + 1], k, v, table[i:i + 1], lens[i:i + 1],
                                                  BS, 0.125)
            differing += not torch.equal(alone[0], paired[i])
    assert differing == 0, f"{differing} of 400 rows differ from the row alone"


def test_fp16_and_fp32_storage(pool):
    q = torch.randn(3, HEADS, D)
    table, lens = tables(3), [9, 33, 64]
    for dtype in (torch.float16, torch.float32):
        k, v = (t.to(dtype) for t in pool)
        got = kernel.paged_decode_attention(q.to(dtype), k, v, table, lens, BS, 0.125)
        want = reference(q.to(dtype), k, v, table, lens)
        torch.testing.assert_close(got.float(), want, atol=5e-3, rtol=5e-3)


def test_bad_tables_and_lengths_are_refused(pool):
    q = torch.randn(1, HEADS, D).to(torch.bfloat16)
    with pytest.raises(ValueError, match="outside the KV pool"):
        kernel.paged_decode_attention(q, *pool, torch.tensor([[BLOCKS + 5]]), [3], BS, 0.125)
    with pytest.raises(ValueError, match="lens"):
        kernel.paged_decode_attention(q, *pool, torch.tensor([[1]]), [BS + 1], BS, 0.125)
    with pytest.raises(ValueError, match="sizes"):
        kernel.paged_decode_attention(q, *pool, torch.tensor([[1]]), [0], BS, 0.125)


def test_which_models_use_it():
    bf16 = torch.zeros(1, dtype=torch.bfloat16)
    assert kernel.applies(bf16, torch.bfloat16)
    assert not kernel.applies(bf16, torch.uint8)                 # fp8 pool: SDPA, with scales
    assert not kernel.applies(torch.zeros(1), torch.float32)     # fp32: the parity reference


def test_without_a_compiler_the_reason_is_kept(monkeypatch, tmp_path):
    monkeypatch.setattr(kernel, "_state", {})
    monkeypatch.setenv("LLM_PLAYGROUND_CACHE", str(tmp_path))
    monkeypatch.setattr(kernel, "_compiler", lambda: None)
    assert "no C compiler" in kernel.unavailable_reason()
    assert not kernel.applies(torch.zeros(1, dtype=torch.bfloat16), torch.bfloat16)
    with pytest.raises(RuntimeError, match="unavailable"):
        kernel.paged_decode_attention(torch.zeros(1, HEADS, D, dtype=torch.bfloat16),
                                      torch.zeros(BS, KV_HEADS, D, dtype=torch.bfloat16),
                                      torch.zeros(BS, KV_HEADS, D, dtype=torch.bfloat16),
                                      torch.zeros(1, 1, dtype=torch.long), [1], BS, 0.125)


@pytest.mark.slow
def test_a_build_goes_into_the_cache_once(monkeypatch, tmp_path):
    monkeypatch.setattr(kernel, "_state", {})
    monkeypatch.setenv("LLM_PLAYGROUND_CACHE", str(tmp_path))
    assert kernel.unavailable_reason() is None
    built = list((tmp_path / "kernels").glob("paged_decode-*.so"))
    assert len(built) == 1 and not list((tmp_path / "kernels").glob(".*"))


def test_the_cpp_operator_gives_the_python_operators_bits(pool):
    """``attention_op.cpp`` (the compiled step's op where the kernel applies) writes the same
    pool slots and returns the same bits as the Python op it stands in for, refuses a slot
    outside the pool and a length beyond its table by name, and the compiled forward picks it
    for a bf16 pool (the Python op for fp32, the parity reference)."""
    from engine.worker.compiled.attention_op import attention_for, paged_decode_attention

    op = kernel.native_op()
    if op is None:
        pytest.skip(f"C++ attention op unavailable: {kernel.native_op_error()}")
    g = torch.Generator().manual_seed(7)
    rows = 5
    q = torch.randn(rows, HEADS, D, generator=g).to(torch.bfloat16)
    k = torch.randn(rows, KV_HEADS, D, generator=g).to(torch.bfloat16)
    v = torch.randn(rows, KV_HEADS, D, generator=g).to(torch.bfloat16)
    table = tables(rows)
    lens = torch.tensor([1, 17, 40, 100, 12 * BS])
    slots = table[torch.arange(rows), (lens - 1) // BS] * BS + (lens - 1) % BS
    pools_py = [p.clone() for p in pool]
    pools_cpp = [p.clone() for p in pool]
    want = paged_decode_attention(q, k, v, *pools_py, slots, table, lens, BS, D ** -0.5)
    got = op(q, k, v, *pools_cpp, slots, table, lens, BS, D ** -0.5)
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(pools_py, pools_cpp))
    assert torch.equal(pools_cpp[0][slots], k) and torch.equal(pools_cpp[1][slots], v)
    with pytest.raises(RuntimeError, match="slots: .* outside the pool"):
        op(q, k, v, *pools_cpp, slots + BLOCKS * BS, table, lens, BS, D ** -0.5)
    with pytest.raises(RuntimeError, match="lens: a length beyond"):
        op(q, k, v, *pools_cpp, slots, table, lens + 12 * BS, BS, D ** -0.5)
    assert attention_for(q, torch.bfloat16) is op
    assert attention_for(q.float(), torch.float32) is torch.ops.playground.paged_decode_attention
    # rows split over the int4 kernels' pool, where it is built: the same bits as one thread
    from engine.model.quant import int4_kernel

    entry = int4_kernel.pool_entry()
    if entry:
        try:
            torch.ops.playground_attention.set_pool(0)     # no pool: the kernel's own threads
            alone = op(q, k, v, *[p.clone() for p in pool], slots, table, lens, BS, D ** -0.5)
        finally:
            torch.ops.playground_attention.set_pool(entry)
        assert torch.equal(alone, want)
        with pytest.raises(RuntimeError, match="lens: a length beyond"):   # from a pool thread
            op(q, k, v, *pools_cpp, slots, table, lens + 12 * BS, BS, D ** -0.5)
