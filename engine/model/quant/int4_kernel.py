"""4-bit weight-only products on AVX-512-bf16 CPUs: the C++ kernel in ``int4_kernel.cpp``.

Why a kernel of our own: PyTorch's CPU int4 kernel (``_weight_int4pack_mm_for_cpu``) reads the
codes once per row, so its time grows with the rows from the first: on the embedded model's
products (30 layers, one thread, AVX-512-bf16 EPYC) 5.7 / 16.4 / 45.9 ms at 1 / 8 / 32 rows
against oneDNN's bf16 12.5 / 12.3 / 24.7 ms. int4 weights, a quarter of bf16's bytes, then lost to
bf16 from 8 concurrent streams. This kernel turns each code into a bf16 in registers and
multiplies on ``vdpbf16ps`` for four rows at once, so it is bound by the weights' bytes at a few
rows and by bf16 arithmetic at many: 2.7-3.0 / 8.1-11.2 / 24.6-28.5 ms for the same products
(``docs/performance.md`` has the table). Each output element goes through the same instructions
whatever the number of rows, so rows are batch-invariant. Products split their output columns
over a thread pool of their own (``kernel_pool.h``, :func:`set_threads`), not PyTorch's OpenMP
threads, whose helpers sleep between a decode step's small products.

The source is compiled against this torch's headers with the machine's C++ compiler (``$CXX``,
``c++`` or ``g++``; about 10 s, once) into ``<cache_dir()>/kernels/int4_kernel-<hash>.so`` and
loaded with ``torch.ops.load_library``: the op ``playground_int4::int4_mm`` is a C++ operator, so
the compiled decode step calls it at the cost of an ATen op (~2 µs), not a Python one. Without a
compiler, without AVX-512-bf16, or with ``LLM_PLAYGROUND_INT4_KERNEL=0``, int4 layers keep
PyTorch's kernel and :func:`unavailable_reason` says why.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import torch

from engine.native_build import build_torch_library, cpu_flags, cxx_compiler, wait_prebuilt
from engine.native_build import prebuild as native_prebuild

log = logging.getLogger("engine")

SOURCE = Path(__file__).with_name("int4_kernel.cpp")
HEADERS = (Path(__file__).with_name("kernel_pool.h"),)
FLAGS = ("-O3", "-shared", "-fPIC", "-std=c++20", "-pthread", "-ffp-contract=off", "-w")
"""``-ffp-contract=off``: the kernel's order of operations is written out in intrinsics; no
fusing of a multiply and an add that the source keeps apart. ``-pthread``: the products split
their columns over the kernels' own thread pool (``kernel_pool.h``), not OpenMP."""
COLUMNS = 32
"""Output columns per block of the kernel's layout: a layer takes the kernel when its outputs are
a multiple of 32 and its group size is 32."""
GROUP = 32

SPIN_US = 2000
"""Microseconds a helper thread of the kernels' pool keeps spinning (yielding its core to any
other runnable thread) after its last part before it sleeps: a decode step's products come
20-60 µs apart and its steps about 1 ms apart, so while the engine decodes the helpers never
sleep, and an idle engine costs no CPU after 2 ms."""

_lock = threading.Lock()
_state: dict = {}       # "ok": True once loaded, or "error": why not


def _compiler() -> str | None:
    return cxx_compiler()


def _build(compiler: str) -> Path:
    """Compile the source into the cache (if not there yet) and return the library's path."""
    return build_torch_library("int4_kernel", (SOURCE, *HEADERS), FLAGS, compiler)


def _cpu_has_bf16_dot() -> bool:
    return {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"} <= cpu_flags()


def prebuild() -> None:
    """Start compiling the kernel's library into the cache in the background, without loading
    it (:func:`engine.native_build.prebuild`; :func:`available` waits for it). Nothing where
    the kernel can't run or is turned off."""
    if "ok" in _state or "error" in _state or os.environ.get("LLM_PLAYGROUND_INT4_KERNEL", "1") == "0":
        return
    compiler = _compiler()
    if compiler and _cpu_has_bf16_dot():
        native_prebuild("int4_kernel", lambda: _build(compiler))


def available() -> bool:
    """Whether the kernel is built, loaded and runs on this CPU (tried once per process,
    thread-safe; the first call may compile for about 10 s)."""
    if "ok" in _state:
        return True
    wait_prebuilt("int4_kernel")
    with _lock:
        if "ok" in _state or "error" in _state:
            return "ok" in _state
        try:
            if os.environ.get("LLM_PLAYGROUND_INT4_KERNEL", "1") == "0":
                raise RuntimeError("turned off by LLM_PLAYGROUND_INT4_KERNEL=0")
            if not _cpu_has_bf16_dot():
                raise RuntimeError("this CPU has no AVX-512-bf16 (vdpbf16ps)")
            compiler = _compiler()
            if compiler is None:
                raise RuntimeError("no C++ compiler (c++, g++ or $CXX) on this machine")
            if not hasattr(torch.ops.playground_int4, "int4_mm"):
                torch.ops.load_library(str(_build(compiler)))
            if not torch.ops.playground_int4.available():
                raise RuntimeError("the kernel's CPU check failed")
            _register_fake()
            set_threads(_default_threads())
            _state["ok"] = True
        except Exception as exc:  # noqa: BLE001 - any failure: keep PyTorch's kernel, say why
            _state["error"] = f"{type(exc).__name__}: {exc}"[:400]
            log.info("int4 kernel unavailable (%s); int4 layers use PyTorch's kernel",
                     _state["error"])
        return "ok" in _state


def _default_threads() -> int:
    """``$LLM_PLAYGROUND_KERNEL_THREADS``, else the CPUs this process may run on."""
    env = os.environ.get("LLM_PLAYGROUND_KERNEL_THREADS", "")
    if env.strip().isdigit() and int(env) >= 1:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def set_threads(n: int) -> int:
    """Let the int4 and int8 products use ``n`` threads in all (the calling thread and ``n - 1``
    helpers of the kernels' own pool, ``kernel_pool.h``), whatever PyTorch's intra-op thread
    count is; returns the count in use. Results do not depend on it: threads split output
    columns, and every column is computed by one thread in the same order.

    Raises:
        ValueError: ``n`` below 1.
        RuntimeError: the kernel is not loaded (see :func:`available`).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"kernel threads must be an integer >= 1, got {n!r}")
    return int(torch.ops.playground_int4.set_threads(n, SPIN_US))


def pool_entry() -> int | None:
    """The address of the kernels' pool's C entry point (``playground_pool_parallel_for`` in
    ``int4_kernel.cpp``), for other libraries of the engine to run their parts on the same
    threads (the compiled step's attention operator); ``None`` when the kernel is unavailable."""
    return int(torch.ops.playground_int4.pool_entry()) if available() else None


def threads() -> int:
    """Threads the products use (1 when the kernel is unavailable)."""
    return int(torch.ops.playground_int4.threads()) if available() else 1


def unavailable_reason() -> str | None:
    """Why the kernel is not used (``None`` when it is)."""
    return None if available() else _state.get("error")


def applies(out_features: int, group_size: int) -> bool:
    """Whether a CPU layer of ``out_features`` outputs in groups of ``group_size`` takes it."""
    return out_features % COLUMNS == 0 and group_size == GROUP and available()


def pack(q: torch.Tensor, scales_and_zeros: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's layout from codes and PyTorch's int4 scales.

    Args:
        q: ``[N, K]`` codes in 0..15 (any integer dtype), ``N`` a multiple of 32, ``K`` of 32.
        scales_and_zeros: ``bf16 [K/32, N, 2]``, (scale, zero) with ``w = (q - 8)·scale + zero``.

    Returns:
        ``codes uint8 [N/32, K/2, 32]`` (for block ``b`` and input pair ``i``, byte ``2j + e``
        holds column ``32b + j``'s code of input ``2i + e`` in its low nibble and column
        ``32b + 16 + j``'s in its high nibble) and ``sz bf16 [N/32, K/32, 2, 32]`` (the block's
        32 scales, then its 32 zeros, per group): the same bytes as PyTorch's layout.
    """
    n, k = q.shape
    qb = q.to(torch.uint8).view(n // COLUMNS, 2, 16, k // 2, 2)
    lo = qb[:, 0].permute(0, 2, 1, 3).reshape(n // COLUMNS, k // 2, COLUMNS)
    hi = qb[:, 1].permute(0, 2, 1, 3).reshape(n // COLUMNS, k // 2, COLUMNS)
    codes = (lo | (hi << 4)).contiguous()
    sz = scales_and_zeros.to(torch.bfloat16).view(k // GROUP, n // COLUMNS, COLUMNS, 2)
    return codes, sz.permute(1, 0, 3, 2).contiguous()


def unpack(codes: torch.Tensor, sz: torch.Tensor, rows: torch.Tensor | None = None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`pack` undone: ``(q uint8 [N, K] or [R, K], scales_and_zeros bf16 [K/32, N or R, 2])``
    for all outputs or the outputs ``rows [R]`` (int64)."""
    blocks, pairs, _ = codes.shape
    k = pairs * 2
    lo, hi = codes & 15, codes >> 4                                  # [B, K/2, 32] each
    both = torch.stack([lo, hi], 1).view(blocks, 2, pairs, 16, 2)     # [B, half, i, j, e]
    q = both.permute(0, 1, 3, 2, 4).reshape(blocks * COLUMNS, k)
    s = sz.permute(1, 0, 3, 2).reshape(k // GROUP, blocks * COLUMNS, 2)
    if rows is not None:
        q, s = q[rows], s[:, rows]
    return q, s


def int4_mm(x: torch.Tensor, codes: torch.Tensor, sz: torch.Tensor) -> torch.Tensor:
    """``y [M, N] = x [M, K] · Wᵀ`` in bf16 for weights in :func:`pack`'s layout.

    The products are exact in fp32 and summed per group of 32 inputs in fp32 (two chains of
    ``vdpbf16ps``), scaled per group (``16·scale·D + (zero - 24·scale)·Σx``, the derivation in
    ``int4_kernel.cpp``), and rounded once to bf16 (nearest even).

    Args:
        x: ``bf16 [M, K]`` contiguous on the CPU.
        codes, sz: from :func:`pack`.

    Raises:
        RuntimeError: the kernel is unavailable (check :func:`available`), or a tensor of
            another dtype or shape (the message names it).
    """
    return torch.ops.playground_int4.int4_mm(x, codes, sz)


def pack_int8(q: torch.Tensor) -> torch.Tensor:
    """The int8 kernel's layout: ``int8 [N/32, K/2, 64]`` from codes ``int8 [N, K]`` (``N`` a
    multiple of 32, ``K`` even): for block ``b`` and input pair ``i``, byte ``2j + e`` holds
    column ``32b + j``'s code of input ``2i + e``. The same bytes."""
    n, k = q.shape
    return q.view(n // COLUMNS, COLUMNS, k // 2, 2).permute(0, 2, 1, 3).reshape(
        n // COLUMNS, k // 2, 2 * COLUMNS).contiguous()


def unpack_int8(codes: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`pack_int8` undone: ``int8 [N, K]``, or ``[R, K]`` for the outputs ``rows [R]``
    (only those rows are gathered: an embedding lookup reads a few rows of the LM head)."""
    blocks, pairs, _ = codes.shape
    if rows is None:
        return codes.view(blocks, pairs, COLUMNS, 2).permute(0, 2, 1, 3).reshape(
            blocks * COLUMNS, pairs * 2)
    picked = codes[rows // COLUMNS].view(-1, pairs, COLUMNS, 2)          # [R, K/2, 32, 2]
    cols = (rows % COLUMNS).view(-1, 1, 1, 1).expand(-1, pairs, 1, 2)
    return picked.gather(2, cols).view(-1, pairs * 2)


def int8_mm(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``y [M, N] = (x [M, K] · qᵀ) · s`` in bf16 for int8 codes in :func:`pack_int8`'s layout
    and ``scales bf16 [N]``: exact products, fp32 sums (two chains of ``vdpbf16ps``), one
    multiply by the scale and one rounding to bf16. Errors as :func:`int4_mm`."""
    return torch.ops.playground_int4.int8_mm(x, codes, scales)


def _register_fake() -> None:
    """Shapes for tracing (``torch.compile``): ``[M, N]`` bf16."""
    @torch.library.register_fake("playground_int4::int4_mm")
    def _(x, codes, sz):
        return x.new_empty(x.shape[0], codes.shape[0] * COLUMNS)

    @torch.library.register_fake("playground_int4::int8_mm")
    def _(x, codes, scales):
        return x.new_empty(x.shape[0], codes.shape[0] * COLUMNS)
