"""The engine's int4 CPU kernel (``engine/model/quant/int4_kernel``): the fp32 reference's answer,
a row's bits independent of its batch and thread count, its layout read back exactly, bad
tensors refused by name, and the layers that take it (or keep PyTorch's kernel, with the reason).
"""

from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F

from engine.model.quant import int4_kernel as kernel
from engine.model.quant.int4 import Int4Linear, quantize_groups

pytestmark = pytest.mark.skipif(not kernel.available(),
                                reason=f"int4 kernel unavailable: {kernel.unavailable_reason()}")

N, K = 1536, 576          # the embedded model's gate/up outputs and hidden size


@contextmanager
def threads(n: int):
    """PyTorch's intra-op threads and the kernels' own pool set to ``n`` for the block, then
    restored."""
    before, pool = torch.get_num_threads(), kernel.threads()
    torch.set_num_threads(n)
    kernel.set_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        kernel.set_threads(pool)


@pytest.fixture(scope="module")
def weight():
    """Quantized codes, the packed layout and the fp32 weight they stand for."""
    g = torch.Generator().manual_seed(0)
    q, d, m = quantize_groups(torch.randn(N, K, generator=g) * 0.05)
    sz = torch.stack([d, m + 8 * d], -1).transpose(0, 1).to(torch.bfloat16)     # [K/32, N, 2]
    s, z = sz[..., 0].float().T, sz[..., 1].float().T                              # [N, K/32]
    ref_w = ((q.float() - 8).view(N, K // 32, 32) * s[..., None] + z[..., None]).view(N, K)
    codes, packed_sz = kernel.pack(q, sz)
    return q, sz, codes, packed_sz, ref_w


def test_matches_the_dequantized_fp32_product(weight):
    """Against ``x Wᵀ`` in fp32 with W rebuilt from the same bf16 scales and zeros: the only
    differences are bf16 rounding of the activations and of the result, so most outputs are
    the fp32 answer rounded to bf16 and none is off by more than 1% of the largest."""
    *_, codes, sz, ref_w = weight
    g = torch.Generator().manual_seed(1)
    for rows in (1, 3, 4, 7, 32, 100, 131):
        x = torch.randn(rows, K, generator=g).to(torch.bfloat16)
        got = kernel.int4_mm(x, codes, sz)
        ref = F.linear(x.float(), ref_w)
        assert got.dtype == torch.bfloat16 and got.shape == (rows, N)
        assert (got.float() - ref).abs().max() <= 0.01 * ref.abs().max()
        assert (got == ref.to(torch.bfloat16)).float().mean() > 0.9


@pytest.mark.parametrize("n", [1, 2])
def test_a_row_has_the_same_bits_alone_and_in_any_batch(weight, n):
    """Rows are computed 4, 3, 2 or 1 at a time with the same per-row instructions, so a row's
    result does not depend on how many rows share the call, nor on the thread count."""
    *_, codes, sz, _ = weight
    x = torch.randn(37, K).to(torch.bfloat16)
    with threads(n):
        full = kernel.int4_mm(x, codes, sz)
        for m in range(1, 37):
            assert torch.equal(kernel.int4_mm(x[:m], codes, sz), full[:m]), m
        for i in (0, 5, 36):
            assert torch.equal(kernel.int4_mm(x[i:i + 1].contiguous(), codes, sz), full[i:i + 1])
    assert torch.equal(kernel.int4_mm(x, codes, sz), full)   # the other thread count


@pytest.mark.parametrize("n", [1, 2])
def test_a_prompt_widened_once_has_the_same_bits_as_its_rows_alone(weight, n):
    """Above 128 rows a column block's codes are widened once into a tile that every group of
    four rows reads: the same numbers into the same instructions as widening them in the loop,
    so every row of a 203-row prompt has the bits it has alone, at the tile's edge and past it."""
    *_, codes, sz, _ = weight
    x = torch.randn(203, K).to(torch.bfloat16)
    with threads(n):
        full = kernel.int4_mm(x, codes, sz)
        for m in (128, 129, 130, 131, 132, 200):
            assert torch.equal(kernel.int4_mm(x[:m], codes, sz), full[:m]), m
        for i in (0, 127, 128, 202):
            assert torch.equal(kernel.int4_mm(x[i:i + 1].contiguous(), codes, sz), full[i:i + 1]), i
        alone = torch.cat([kernel.int4_mm(x[i:i + 4].contiguous(), codes, sz) for i in range(0, 200, 4)])
        assert torch.equal(alone, full[:200])


def test_the_pool_splits_columns_and_wakes_from_sleep(weight):
    """With three threads a one-row product of 1536 columns is cut into three parts; the bits
    equal the one-thread answer, also after the helpers have gone to sleep (idle longer than
    ``SPIN_US``) and when four Python threads call at once (the pool takes one caller at a time;
    the others run their parts themselves)."""
    import threading
    import time

    *_, codes, sz, _ = weight
    xs = [torch.randn(rows, K).to(torch.bfloat16) for rows in (1, 2, 5, 1)]
    with threads(1):
        want = [kernel.int4_mm(x, codes, sz) for x in xs]
    with threads(3):
        assert kernel.threads() == 3
        for x, w in zip(xs, want):
            assert torch.equal(kernel.int4_mm(x, codes, sz), w)
            time.sleep(3 * kernel.SPIN_US / 1e6)
            assert torch.equal(kernel.int4_mm(x, codes, sz), w)
        bad = []

        def call(i: int):
            for _ in range(30):
                if not torch.equal(kernel.int4_mm(xs[i], codes, sz), want[i]):
                    bad.append(i)

        callers = [threading.Thread(target=call, args=(i,)) for i in range(4)]
        for t in callers:
            t.start()
        for t in callers:
            t.join(60)
        assert not bad and not any(t.is_alive() for t in callers)
    with pytest.raises(ValueError, match="kernel threads"):
        kernel.set_threads(0)


def test_the_layout_is_read_back_exactly(weight):
    q, sz, codes, packed_sz, _ = weight
    back_q, back_sz = kernel.unpack(codes, packed_sz)
    assert torch.equal(back_q.int(), q.int()) and torch.equal(back_sz, sz)
    rows = torch.tensor([0, 15, 16, 31, 32, 700, N - 1])
    some_q, some_sz = kernel.unpack(codes, packed_sz, rows)
    assert torch.equal(some_q.int(), q[rows].int()) and torch.equal(some_sz, sz[:, rows])
    assert codes.numel() == N * K // 2 and packed_sz.numel() == sz.numel()   # the same bytes


def test_bad_tensors_are_refused_by_name(weight):
    *_, codes, sz, _ = weight
    x = torch.randn(2, K).to(torch.bfloat16)
    with pytest.raises(RuntimeError, match="x must be a contiguous 2-D bf16"):
        kernel.int4_mm(x.float(), codes, sz)
    with pytest.raises(RuntimeError, match="x must be a contiguous 2-D bf16"):
        kernel.int4_mm(torch.randn(K, 2).to(torch.bfloat16).T, codes, sz)
    with pytest.raises(RuntimeError, match="x has 608 inputs, codes hold 576"):
        kernel.int4_mm(torch.randn(2, K + 32).to(torch.bfloat16), codes, sz)
    with pytest.raises(RuntimeError, match="codes must be uint8"):
        kernel.int4_mm(x, codes.view(-1, 32).int(), sz)
    with pytest.raises(RuntimeError, match="sz must be bf16"):
        kernel.int4_mm(x, codes, sz[:-1])


def test_layers_take_it_where_it_applies(weight):
    """An ``Int4Linear`` with outputs a multiple of 32 runs on the kernel, answers like the
    reference and dequantizes to its own codes; other widths keep PyTorch's kernel."""
    q, sz, *_, ref_w = weight
    d, z = sz[..., 0].float().T.contiguous(), sz[..., 1].float().T.contiguous()
    layer = Int4Linear(K, N, q, d, z - 8 * d)
    assert layer.layout == "cpu-bf16dot"
    assert layer.weight_packed.shape == (N // 32, K // 2, 32)
    x = torch.randn(5, K)
    y = layer(x)
    assert y.dtype == torch.float32
    assert (y - F.linear(x.to(torch.bfloat16).float(), ref_w)).abs().max() <= 0.01 * y.abs().max()
    assert torch.equal(layer.dequantize().float(), ref_w.to(torch.bfloat16).float())
    odd = Int4Linear(96, 208, torch.randint(0, 16, (208, 96)), torch.ones(208, 3), torch.zeros(208, 3))
    assert odd.layout == "cpu-aten"                       # 208 outputs: not a multiple of 32
    assert not kernel.applies(208, 32) and not kernel.applies(N, 64) and kernel.applies(N, 32)


def test_turned_off_or_without_a_compiler_the_reason_is_kept(monkeypatch):
    monkeypatch.setattr(kernel, "_state", {})
    monkeypatch.setenv("LLM_PLAYGROUND_INT4_KERNEL", "0")
    assert "LLM_PLAYGROUND_INT4_KERNEL=0" in kernel.unavailable_reason()
    layer = Int4Linear(K, 64, torch.randint(0, 16, (64, K)), torch.ones(64, K // 32),
                       torch.zeros(64, K // 32))
    assert layer.layout == "cpu-aten"
    monkeypatch.setattr(kernel, "_state", {})
    monkeypatch.delenv("LLM_PLAYGROUND_INT4_KERNEL")
    monkeypatch.setattr(kernel, "_compiler", lambda: None)
    assert "no C++ compiler" in kernel.unavailable_reason()


@pytest.mark.slow
def test_a_build_goes_into_the_cache_once(monkeypatch, tmp_path):
    monkeypatch.setenv("LLM_PLAYGROUND_CACHE", str(tmp_path))
    first = kernel._build(kernel._compiler())
    assert first.parent == tmp_path / "kernels" and first.name.startswith("int4_kernel-")
    stamp = first.stat().st_mtime_ns
    assert kernel._build(kernel._compiler()) == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == [first.name]   # no temp left


@pytest.fixture(scope="module")
def head():
    """int8 codes and scales of an LM-head-like matrix (576 inputs), packed for ``int8_mm``."""
    g = torch.Generator().manual_seed(2)
    q = torch.randint(-127, 128, (2048, K), generator=g, dtype=torch.int8)
    s = (torch.rand(2048, generator=g) * 0.01).to(torch.bfloat16)
    return q, s, kernel.pack_int8(q)


def test_int8_matches_the_fp32_product_at_every_row_count(head):
    """Row counts on both sides of the switch from widening codes in the loop (up to 8 rows)
    to widening them once into a tile: the fp32 answer rounded to bf16, within 1%."""
    q, s, codes = head
    ref_w = q.float() * s.float()[:, None]
    for rows in (1, 4, 8, 9, 33):
        x = torch.randn(rows, K).to(torch.bfloat16)
        got = kernel.int8_mm(x, codes, s)
        ref = F.linear(x.float(), ref_w)
        assert got.dtype == torch.bfloat16 and got.shape == (rows, 2048)
        assert (got.float() - ref).abs().max() <= 0.01 * ref.abs().max()
        assert (got == ref.to(torch.bfloat16)).float().mean() > 0.9


@pytest.mark.parametrize("n", [1, 2])
def test_int8_rows_have_the_same_bits_alone_and_in_any_batch(head, n):
    q, s, codes = head
    x = torch.randn(37, K).to(torch.bfloat16)
    with threads(n):
        full = kernel.int8_mm(x, codes, s)
        for m in range(1, 37):
            assert torch.equal(kernel.int8_mm(x[:m], codes, s), full[:m]), m
        assert torch.equal(kernel.int8_mm(x[20:21].contiguous(), codes, s), full[20:21])


def test_int8_layout_is_read_back_and_layers_take_it(head):
    from engine.model.quant.int8 import Int8Linear

    q, s, codes = head
    assert torch.equal(kernel.unpack_int8(codes), q)
    rows = torch.tensor([0, 31, 32, 1000, 2047, 5])
    assert torch.equal(kernel.unpack_int8(codes, rows), q[rows])
    layer = Int8Linear(q, s)
    assert layer.layout == "cpu-bf16dot" and layer.weight_int8.shape == (2048 // 32, K // 2, 64)
    assert torch.equal(layer.dequantize(rows), q[rows].to(torch.bfloat16) * s[rows, None])
    x = torch.randn(3, K)
    assert torch.equal(layer(x), kernel.int8_mm(x.to(torch.bfloat16), codes, s).float())
    assert Int8Linear(q[:2000], s[:2000]).layout == "aten"          # 2000 outputs: not a multiple of 32
    with pytest.raises(RuntimeError, match="scales must be bf16"):
        kernel.int8_mm(x.to(torch.bfloat16), codes, s[:-1])
    with pytest.raises(RuntimeError, match="codes must be int8"):
        kernel.int8_mm(x.to(torch.bfloat16), codes.view(torch.uint8), s)
