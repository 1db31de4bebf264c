"""Building the engine's parts from a loaded model and an :class:`EngineConfig`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.config import DEFAULT_KV_BUDGET_CPU, EngineConfig, prefill_chunk_cap
from engine.core.block_manager import BlockManager
from engine.core.contiguous_cache_manager import ContiguousCacheManager
from engine.core.scheduler import Scheduler
from engine.model.families import PAGED_FAMILIES, kv_dtype_needs_paged, paged_unsupported_note
from engine.model.loader import LoadedModel
from engine.worker.kv_calibration import calibrate_kv_scales
from engine.worker.kv_pool import KVPool, resolve_kv_dtype
from engine.worker.backends.eager import EagerBackend
from engine.worker.input_builder import InputBuilder
from engine.worker.model_runner import ModelRunner
from engine.worker.sampler import Sampler
from engine.worker.threads import FEW_ROWS, FEW_ROWS_FLOAT, FEW_ROWS_FLOAT_NATIVE, StepThreads

@dataclass
class EngineParts:
    """The engine's moving parts (see :func:`build_parts`)."""

    paged: bool
    note: str
    pool: KVPool | None
    block_manager: BlockManager | ContiguousCacheManager
    runner: ModelRunner
    scheduler: Scheduler
    gpu: object
    probe: object
    rolling: object
    kv_dtype: torch.dtype | None = None


def build_parts(loaded: LoadedModel, config: EngineConfig, exempt_ids=(),
                runner: ModelRunner | None = None, compile_hooks: dict | None = None) -> EngineParts:
    """The pool, block manager, runner, scheduler and telemetry for ``loaded``.

    With ``config.batching`` on a paged family: a KV pool of ``config.kv_cache_bytes`` (512 MiB
    on CPU, half the free memory on a GPU), capped at :func:`pool_cap_blocks`, its block
    manager and the paged runner. Otherwise
    (or another architecture, with a note saying so) one request at a time, each with its own
    contiguous cache, its prompt in one pass.

    Args:
        exempt_ids: token ids the sampler's penalties never touch.
        runner: a runner to use instead of building one (anything with ``execute``,
            ``info``, ``kv_bytes``, ``kv_cache_bytes``, ``release``, ``close`` and ``device``).
        compile_hooks: keyword arguments for the compiled backend instead of compiling in the
            background with a compile process (the compile process itself passes
            ``background=False``, its ``on_ready`` report and the key it expects:
            :mod:`engine.worker.compiled.compile_process`).
    """
    model_type = getattr(loaded.model.config, "model_type", "")
    paged, note = config.batching, ""
    if paged and model_type not in PAGED_FAMILIES:
        note = paged_unsupported_note(model_type)
        paged = False
    sampler = Sampler(exempt_ids=exempt_ids)
    info, spec = loaded.info, loaded.spec
    pool = None
    model_dtype = next(loaded.model.parameters()).dtype
    if config.kv_cache_dtype != "auto" and not paged:
        raise ValueError(kv_dtype_needs_paged(config.kv_cache_dtype))
    kv_dtype = resolve_kv_dtype(config.kv_cache_dtype, model_dtype)
    if paged:
        budget = config.kv_cache_bytes or default_kv_budget(info.device)
        per_token = spec.kv_bytes_per_token(torch.empty(0, dtype=kv_dtype).element_size())
        num_blocks = max(2, min(KVPool.blocks_for_budget(budget, per_token, config.block_size),
                                pool_cap_blocks(config, info.context_len)))
        pool = KVPool(spec.layers, spec.kv_heads, spec.head_dim, num_blocks, config.block_size,
                      kv_dtype, info.device, compute_dtype=model_dtype)
        static, note_c = static_decode(loaded.model, config, info.device)
        note = note or note_c
        # with static buckets, the pool's last block is the scratch block of their spare rows
        bm = BlockManager(num_blocks - 1 if static else num_blocks, config.block_size,
                          config.enable_prefix_caching)
        runner = runner or ModelRunner(loaded.model, sampler,
                                       **paged_backend(loaded, config, pool, static, compile_hooks))
        if pool.fp8:
            calibrate_kv_scales(loaded.model, loaded.tokenizer, pool)
        scheduler = Scheduler(bm, loaded.eos_token_ids, config.max_queue, config.max_num_seqs,
                              config.max_num_batched_tokens, prefill_chunk_cap(config))
    else:
        bm = ContiguousCacheManager()
        runner = runner or ModelRunner(loaded.model, sampler)
        scheduler = Scheduler(bm, loaded.eos_token_ids, config.max_queue, 1,
                              max(config.max_num_batched_tokens, info.context_len))
    gpu = probe = None
    from engine.telemetry.rolling import RollingStats

    if config.telemetry:
        from engine.telemetry.memory import MemoryProbe
        from engine.telemetry.nvml import GpuMonitor, torch_gpu_uuid

        if info.device.startswith("cuda"):
            gpu = GpuMonitor(torch.device(info.device).index or 0,
                             uuid=torch_gpu_uuid(info.device))
        probe = MemoryProbe(loaded.model, info.device, spec, info.dtype_bytes, gpu=gpu)
    return EngineParts(paged, note, pool, bm, runner, scheduler, gpu, probe, RollingStats(),
                       kv_dtype)


def static_decode(model, config: EngineConfig, device: str) -> tuple[str | None, str]:
    """Which static-bucket decode path the engine takes: ``"compiled"``
    (:func:`compiled_decode`), ``"graphs"`` (CUDA graphs, ``config.cuda_graphs``; on CUDA by
    default) or ``None`` (the eager paged runner), and a note when ``compile`` was asked for
    but can't apply."""
    compiled, note = compiled_decode(model, config, device)
    graphs = config.cuda_graphs if config.cuda_graphs is not None else device.startswith("cuda")
    return ("compiled" if compiled else "graphs" if graphs else None), note


def paged_backend(loaded: LoadedModel, config: EngineConfig, pool: KVPool,
                  static: str | None, compile_hooks: dict | None = None) -> dict:
    """The forward backend of a paged engine's runner, its input builder and the thread
    setting, as :class:`ModelRunner`'s ``backend``, ``inputs`` and ``threads`` arguments: the
    compiled decode step or CUDA graphs (both on static buckets, with the pool's last block as
    their scratch block, each holding the eager backend for the other steps), or the eager
    backend alone (:mod:`engine.worker.backends`). ``compile_hooks``: as :func:`build_parts`'s."""
    info = loaded.info
    device = next(loaded.model.parameters()).device
    max_blocks = -(-info.context_len // config.block_size)
    scratch = pool.num_blocks - 1 if static else None
    inputs = InputBuilder(pool, config.block_size, device, scratch_block=scratch)
    threads = StepThreads(decode_threads(config, info) if device.type == "cpu" else 0,
                          few_rows(info))
    if static == "compiled":
        from engine.worker.compiled.compiled_backend import CompiledBackend

        backend = CompiledBackend(EagerBackend(loaded.model, inputs, threads,
                                               weight_stationary=False),
                                  max_blocks_per_seq=max_blocks,
                                  buckets=tuple(config.compile_batch_sizes),
                                  max_rows=config.max_num_batched_tokens,
                                  load=(loaded.load_args, config), **(compile_hooks or {}))
    elif static == "graphs":
        from engine.worker.backends.cuda_graph import CudaGraphBackend
        from engine.worker.buckets import BATCH_BUCKETS, Buckets, block_buckets

        # the graphs run under PyTorch's own thread setting, as they were captured
        threads = StepThreads()
        backend = CudaGraphBackend(
            EagerBackend(loaded.model, inputs, threads, weight_stationary=False),
            Buckets(BATCH_BUCKETS, block_buckets(max_blocks), config.block_size))
    else:
        backend = EagerBackend(loaded.model, inputs, threads, config.weight_stationary)
    return {"backend": backend, "inputs": inputs, "threads": threads}


def compiled_decode(model, config: EngineConfig, device: str) -> tuple[bool, str]:
    """Whether decode steps take the compiled path, and a note when ``compile`` asked for it
    but the model can't (the reason names what runs instead).

    ``auto`` compiles on CPU only: on CUDA the CUDA-graph runner already removes the per-step
    launches over the same buckets (``on`` compiles there too)."""
    if config.compile == "off" or (config.compile == "auto" and device.startswith("cuda")):
        return False, ""
    from engine.worker.compiled.llama_decode import unsupported_reason

    reason = unsupported_reason(model)
    if config.kv_cache_dtype == "fp8":
        reason = "an fp8 KV cache (per-layer scales) runs the eager decode step"
    if reason:
        return False, f"decode runs eagerly: {reason}" if config.compile == "on" else ""
    return True, ""


INTEGER_WEIGHTS = ("int8", "int4")
ONE_THREAD_WEIGHTS = (*INTEGER_WEIGHTS, "bf16", "fp16")
"""Weights whose few-row steps run on one thread on CPU by default (fp32, the exact reference,
keeps PyTorch's setting)."""


def decode_threads(config: EngineConfig, info) -> int:
    """Intra-op threads for steps of few rows (see :func:`few_rows`): ``config.decode_threads``,
    or when it is 0 (auto) 1 on CPU for :data:`ONE_THREAD_WEIGHTS`, else 0 (PyTorch's own
    setting)."""
    if config.decode_threads:
        return config.decode_threads
    one = getattr(info, "weights", "") in ONE_THREAD_WEIGHTS
    return 1 if one and info.device == "cpu" else 0


def few_rows(info) -> int:
    """The most tokens a step may have to run on :func:`decode_threads`:
    :data:`engine.worker.threads.FEW_ROWS` (8) for int8/int4 weights; for the rest
    :data:`engine.worker.threads.FEW_ROWS_FLOAT_NATIVE` (8) where oneDNN has native
    bf16 products, else :data:`engine.worker.threads.FEW_ROWS_FLOAT` (4), as measured
    on two 2-core machines (docs/performance.md#threads-per-step)."""
    if getattr(info, "weights", "") in INTEGER_WEIGHTS:
        return FEW_ROWS
    return FEW_ROWS_FLOAT_NATIVE if native_bf16() else FEW_ROWS_FLOAT


def native_bf16() -> bool:
    """Whether bf16 layers run on oneDNN's native, pre-packed product on this CPU
    (:func:`engine.model.quant.packed.packing_available`: AVX-512-bf16 or AMX, checked once)."""
    from engine.model.quant.packed import packing_available

    return packing_available()


POOL_HEADROOM = 1.25
"""Blocks beyond what the running sequences can hold at once, kept for the prefix cache."""


def pool_cap_blocks(config: EngineConfig, context_len: int) -> int:
    """Most blocks the scheduler can ever use: ``max_num_seqs`` sequences of a full context
    window each, plus :data:`POOL_HEADROOM` for cached prefixes. Half of an H200's free memory
    would otherwise be about 200,000 blocks of the embedded model, 12 times this."""
    per_seq = -(-context_len // config.block_size)
    return int(config.max_num_seqs * per_seq * POOL_HEADROOM)


def default_kv_budget(device: str) -> int:
    """KV pool bytes: 512 MiB on CPU; on a GPU, half of the memory free after loading."""
    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free * 0.5)
    return DEFAULT_KV_BUDGET_CPU


def note_pool(memory, block_manager) -> None:
    """Say on the memory breakdown's KV part that the paged pool is allocated once."""
    kv = memory.part("kv_cache") if memory is not None and block_manager is not None else None
    if kv is not None:
        b = block_manager.stats()
        kv.note = (f"paged pool allocated once: {b.num_blocks} blocks x {b.block_size} "
                   f"tokens; {b.used} in use, {b.cached} free but holding a prefix")


def release_free_memory(device: str) -> None:
    """Return freed heap pages to the system when the engine goes idle (CPU).

    On Linux with glibc, ``malloc_trim(0)`` gives the heap's free pages back (activations of a
    large batch otherwise stay in the process's RSS). torch's CUDA cache is kept: emptying it
    at every idle makes the next request allocate again, which shows in its latency; it is
    emptied only after an out-of-memory error (:func:`engine.worker.model_runner.after_error`).
    """
    if device.startswith("cuda"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
