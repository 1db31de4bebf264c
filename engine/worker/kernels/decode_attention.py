"""Paged decode attention on the CPU: the C kernel in ``paged_decode.c``, built once and cached.

Why a kernel of our own: a decode step attends one query per sequence to that sequence's keys.
PyTorch's CPU SDPA gives a row other bits when it is padded or batched with other rows, so the
engine called it once per sequence over exactly its own keys (batch-invariant), after gathering
the sequence's blocks: 8 small operator calls per sequence per layer. At 32 sequences that was
about 100 ms of a decode step (30 layers × 32 × 8 calls), more than the weights' products. The
kernel reads keys and values where they lie in the pool, through the block table, and computes
every (sequence, KV head) pair on one thread in a fixed order, so a sequence's output depends
only on its own query, keys and length, as before, at a few milliseconds per step (vLLM's CPU
backend also runs its own paged attention kernel).

The source is compiled with the machine's C compiler (``$CC``, ``cc`` or ``gcc``; ``-O3
-fopenmp`` without reassociation or contraction, for this CPU's x86-64 level, or through
``target_clones`` for any x86-64 CPU where the level is unknown: :func:`build_flags`) into
``<cache_dir()>/kernels/paged_decode-<hash>.so`` the first time it is needed (2-3 s)
and loaded with ``ctypes``. Its OpenMP runtime is the one torch already loaded (same soname),
so the two share one thread pool. Without a compiler the engine keeps PyTorch's SDPA per
sequence (also batch-invariant, slower) and :func:`unavailable_reason` says why.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import threading
from pathlib import Path

import torch

from engine.native_build import (build_cached, build_torch_library, cxx_compiler, wait_prebuilt,
                                 x86_64_level)
from engine.native_build import prebuild as native_prebuild

log = logging.getLogger("engine")

SOURCE = Path(__file__).with_name("paged_decode.c")
FLAGS = ("-O3", "-fopenmp", "-shared", "-fPIC", "-std=gnu11", "-fno-math-errno", "-fno-trapping-math",
         "-ffp-contract=off", "-Wno-psabi")
"""No reassociation and no contraction of a multiply and an add (``-ffp-contract=off``; gcc's
default for ``gnu11`` contracts where it likes): the kernel's order of operations is the
source's in every inlined copy, so the one-row and two-row paths give a row the same bits. With
either allowed, ``attend2`` gave a row other bits than ``attend`` now and then (in fp32 nearly
always, by an ulp; in bf16 a few rows in a thousand): a prompt's rows computed beside other
prompts' rows got other logits than alone. The softmax's sum is vectorized by hand
(``softmax_row``). Not ``-ffast-math``: with gcc 12 it links ``crtfastmath.o`` into a shared
library, which flushes denormals for the whole process on load."""
KINDS = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
"""Storage dtypes the kernel reads (fp8 pools, with their per-layer scales, stay on SDPA)."""

_lock = threading.Lock()
_state: dict = {}      # "lib": the loaded CDLL, or "error": why there is none


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def build_flags() -> tuple[str, ...]:
    """:data:`FLAGS`, and where this CPU's x86-64 level is known
    (:func:`engine.native_build.x86_64_level`) code for that level only: ``-march=<level>``
    with ``ONE_TARGET`` defined, which leaves out ``target_clones``. gcc 12 took 13.8 s to
    compile the three clones (AVX-512, AVX2, plain) on this project's 2-core machine, and 2.3 s
    for the AVX-512 one alone, at the same step speed and with the same tokens; the kernel's
    build is on a first start's path to serving (docs/performance.md, "Bucket 1 within a minute").
    The level is in the flags, so in the cache's key: a cache carried to another CPU (a Docker
    image built elsewhere) builds its own."""
    level = x86_64_level()
    return (*FLAGS, f"-march={level}", "-DONE_TARGET") if level else FLAGS


def _build(compiler: str) -> Path:
    """Compile the source into the cache (if not there yet) and return the library's path.
    A compiler that does not know this CPU's level (older than gcc 11 or clang 12) builds the
    clones instead."""
    flags = build_flags()
    try:
        return _build_with(compiler, flags)
    except RuntimeError:
        if flags == FLAGS:
            raise
        return _build_with(compiler, FLAGS)


def _build_with(compiler: str, flags: tuple[str, ...]) -> Path:
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join((compiler, *flags)).encode()).hexdigest()[:16]
    return build_cached("paged_decode", key,
                        lambda tmp: [compiler, *flags, "-o", tmp, str(SOURCE), "-lm"], 120)


def prebuild() -> None:
    """Start compiling this kernel's C library and its C++ operator into the cache in the
    background, without loading them (:func:`engine.native_build.prebuild`: on a first start
    the compiler's seconds hide behind the model's loading; the first :func:`_load` waits for
    it). Nothing when the kernel is turned off or has been loaded."""
    if "lib" in _state or "error" in _state or os.environ.get("LLM_PLAYGROUND_ATTENTION_KERNEL", "1") == "0":
        return

    def build():
        compiler, cxx = _compiler(), cxx_compiler()
        if compiler:
            _build(compiler)
        if cxx:
            build_torch_library("attention_op", (OP_SOURCE,), OP_FLAGS, cxx)

    native_prebuild("attention", build)


def _load():
    """The loaded library, building it on the first call; ``None`` (and the reason kept for
    :func:`unavailable_reason`) when it can't be had. Thread-safe; tries once per process.
    Called for every layer of every step: once loaded, no lock is taken."""
    lib = _state.get("lib")
    if lib is not None:
        return lib
    wait_prebuilt("attention")
    with _lock:
        if "lib" in _state or "error" in _state:
            return _state.get("lib")
        if os.environ.get("LLM_PLAYGROUND_ATTENTION_KERNEL", "1") == "0":
            _state["error"] = "turned off by LLM_PLAYGROUND_ATTENTION_KERNEL=0"
            return None
        compiler = _compiler()
        try:
            if compiler is None:
                raise RuntimeError("no C compiler (cc, gcc or $CC) on this machine")
            lib = ctypes.CDLL(str(_build(compiler)))
            fn = lib.paged_decode_attention
            i64, ptr = ctypes.c_int64, ctypes.c_void_p
            fn.argtypes = [ptr, ptr, ptr, ptr, i64, i64, ptr, i64, ctypes.c_int, ctypes.c_int,
                           ctypes.c_int, i64, i64, ctypes.c_int, ctypes.c_float, ctypes.c_int, ptr]
            fn.restype = ctypes.c_int
            _state["lib"] = lib
        except Exception as exc:  # noqa: BLE001 - any failure: stay on SDPA, say why
            _state["error"] = f"{type(exc).__name__}: {exc}"[:400]
            log.warning("paged decode attention kernel unavailable (%s); using SDPA per sequence",
                        _state["error"])
        return _state.get("lib")


OP_SOURCE = Path(__file__).with_name("attention_op.cpp")
OP_FLAGS = ("-O2", "-shared", "-fPIC", "-std=c++20", "-w")


def native_op():
    """``torch.ops.playground_attention.paged_decode_attention`` (``attention_op.cpp``): the
    compiled decode step's attention as a C++ operator over this kernel, with the schema and the
    arithmetic of :func:`engine.worker.compiled.attention_op.paged_decode_attention`'s kernel
    branch; ``None`` when the kernel or a C++ compiler is missing (the Python op serves then,
    and :func:`native_op_error` says why). Built once into the cache (about 15 s), thread-safe,
    tried once per process. Where the int4 kernel's library is available its thread pool runs
    the rows of a step (each row on one thread, start to end: the same bits), else the C kernel
    runs on PyTorch's intra-op thread count."""
    if "op" in _state:
        return _state["op"]
    if _load() is None:
        return None
    with _lock:
        if "op" in _state or "op_error" in _state:
            return _state.get("op")
        try:
            compiler = cxx_compiler()
            if compiler is None:
                raise RuntimeError("no C++ compiler (c++, g++ or $CXX) on this machine")
            if not hasattr(torch.ops.playground_attention, "set_kernel"):
                torch.ops.load_library(str(build_torch_library("attention_op", (OP_SOURCE,),
                                                               OP_FLAGS, compiler)))
                torch.library.register_fake("playground_attention::paged_decode_attention")(
                    lambda q, *_: torch.empty_like(q))      # its shape, for tracing
            address = ctypes.cast(_state["lib"].paged_decode_attention, ctypes.c_void_p).value
            torch.ops.playground_attention.set_kernel(address)
            from engine.model.quant import int4_kernel

            pool = int4_kernel.pool_entry()     # rows over the kernels' own threads, if built
            if pool:
                torch.ops.playground_attention.set_pool(pool)
            _state["op"] = torch.ops.playground_attention.paged_decode_attention.default
        except Exception as exc:  # noqa: BLE001 - any failure: the Python op serves
            _state["op_error"] = f"{type(exc).__name__}: {exc}"[:400]
            log.info("C++ attention op unavailable (%s); the Python op serves",
                     _state["op_error"])
        return _state.get("op")


def native_op_error() -> str | None:
    """Why :func:`native_op` is ``None`` (``None`` when it is there)."""
    return None if native_op() is not None else (_state.get("op_error") or _state.get("error"))


def unavailable_reason() -> str | None:
    """Why the kernel is not used (``None`` when it is built and loaded)."""
    return None if _load() is not None else _state.get("error")


def applies(q: torch.Tensor, pool_dtype: torch.dtype) -> bool:
    """Whether decode attention for query ``q`` over a pool stored in ``pool_dtype`` runs in the
    kernel: CPU, a bf16 or fp16 model whose pool has its own dtype, and the library loaded.
    fp32 models keep PyTorch's SDPA (their decode is the exact reference for parity with
    transformers' ``generate``); fp8 pools keep it for their scales."""
    return (q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16)
            and pool_dtype == q.dtype and _load() is not None)


def paged_decode_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                           table: torch.Tensor, lens, block_size: int,
                           scale: float) -> torch.Tensor:
    """Each row's query against its own keys and values in one layer's pool.

    Args:
        q: ``[N, heads, d]`` queries (rotated), bf16 / fp16 / fp32 on the CPU.
        k_pool, v_pool: the layer's ``[slots, kv_heads, d]`` pool tensors, ``q``'s dtype.
        table: ``[N, W]`` int64 block ids per row, or ``[W]``: one table every row shares
            (the queries of one sequence's verification pass). Blocks past a row's length are
            not read.
        lens: ``N`` ints (a list, or an int64 tensor ``[N]`` read in place), the keys each row
            attends to (its own token included), each ``<= W × block_size``.
        block_size: tokens per block; scale: the softmax scale (``d ** -0.5`` for Llama).

    Returns:
        ``[N, heads, d]`` in ``q``'s dtype: ``softmax(scale · q Kᵀ) V`` computed in fp32, the
        cast to ``q``'s dtype rounding to nearest even as PyTorch's does.

    Raises:
        RuntimeError: the kernel is unavailable (check :func:`applies` first).
        ValueError: a length beyond its table, a block id outside the pool, or sizes the kernel
            does not take (head_dim over 256, more than 16 query heads per KV head).
    """
    lib = _load()
    if lib is None:
        raise RuntimeError(f"paged decode attention kernel unavailable: {_state.get('error')}")
    rows, heads, d = q.shape
    table = table if table.dtype == torch.long and table.is_contiguous() else \
        table.to(torch.long).contiguous()
    if isinstance(lens, torch.Tensor):
        lens_t = lens if lens.dtype == torch.long and lens.is_contiguous() else \
            lens.to(torch.long).contiguous()
    else:
        lens_t = torch.tensor(lens, dtype=torch.long)
    if lens_t.shape != (rows,):
        raise ValueError(f"lens: {rows} lengths expected, got {tuple(lens_t.shape)}")
    q = q.contiguous()
    out = torch.empty((rows, heads, d), dtype=torch.bfloat16 if q.dtype == torch.bfloat16
                      else torch.float32)
    width = table.shape[-1]
    rc = lib.paged_decode_attention(
        q.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr(), table.data_ptr(),
        width if table.dim() == 2 else 0, width, lens_t.data_ptr(), rows, heads,
        k_pool.shape[1], d, block_size, k_pool.shape[0], KINDS[q.dtype], scale,
        torch.get_num_threads(), out.data_ptr())
    if rc:
        raise ValueError({-1: "sizes the kernel does not take (head_dim over 256, more than 16 "
                                "query heads per KV head, or a length below 1)",
                          -2: "out of memory for the attention scores",
                          -3: "a block table points outside the KV pool",
                          -4: f"lens: a length beyond its table's {width * block_size} "
                              f"slots"}.get(rc, f"error {rc}"))
    return out if out.dtype == q.dtype else out.to(q.dtype)
