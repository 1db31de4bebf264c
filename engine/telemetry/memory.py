"""Memory breakdown per engine step: what the device (or process) memory is spent on.

Definitions: docs/metrics.md, "Memory breakdown". On CUDA every part is measured from torch's
allocator statistics (read once per step) and ``torch.cuda.mem_get_info`` (total and free of the
device this process sees, a MIG slice included); NVML is never read on the engine thread. On
CPU the process RSS (psutil) is split into weights, KV cache, an activation estimate and the
rest. Parts are never negative and sum to the total.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import psutil
import torch

from engine.model.accounting import weight_bytes
from engine.model.model_spec import ModelSpec
from engine.telemetry.estimator import activation_estimate
from engine.telemetry.nvml import GpuMonitor, GpuReading


@dataclass
class MemoryPart:
    """One slice of memory: ``bytes`` (>= 0), ``measured`` (False: an estimate or unknown)."""

    name: str
    bytes: int
    measured: bool
    note: str = ""


@dataclass
class MemoryBreakdown:
    """Memory split into parts that sum to ``total_bytes``.

    Attributes:
        device: ``"cuda:0"``, ``"cpu"``... parts: CUDA: weights, kv_cache, activations,
            workspaces, allocator_cache, context_other, free; CPU: weights, kv_cache,
            activations, runtime_other. total_bytes: the sum of the parts, in bytes.
            total_label: what that total is ("GPU total", "process RSS"...). timestamp:
            ``perf_counter()`` s.
        notes: caveats (NVML unavailable, clamped values...).
    """

    device: str
    parts: list[MemoryPart]
    total_bytes: int
    total_label: str
    timestamp: float
    notes: list[str] = field(default_factory=list)

    def part(self, name: str) -> MemoryPart | None:
        """The part called ``name``, or ``None``."""
        return next((p for p in self.parts if p.name == name), None)

    def to_dict(self) -> dict:
        """A JSON-ready dict; ``parts`` as a list of dicts in display order."""
        return asdict(self)


class MemoryProbe:
    """Builds a :class:`MemoryBreakdown` after each step and on demand.

    On CUDA a step's activations are its peak allocation minus what was allocated when it
    began, so cuBLAS workspaces and other long-lived allocations (their own part,
    ``workspaces``) are not taken for activations. Totals come from ``mem_get_info``; NVML
    (this process's memory as the driver sees it) only annotates, from the last reading
    :meth:`snapshot` took on its caller's thread.

    Args:
        model: the loaded model; its weight bytes are counted once here.
        device: where the model runs (``"cuda"``, ``"cuda:1"``, ``"cpu"``).
        spec, dtype_bytes: for the CPU activation estimate.
        gpu: an NVML monitor read by :meth:`snapshot`; ``None`` creates one for a CUDA device.
    """

    def __init__(self, model, device: str, spec: ModelSpec, dtype_bytes: float,
                 gpu: GpuMonitor | None = None, nvml_interval_s: float = 0.5):
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        if self.is_cuda and self.device.index is None:
            self.device = torch.device("cuda", 0)
        self.spec, self.dtype_bytes = spec, dtype_bytes
        self.weights = weight_bytes(model)
        self.gpu = gpu if gpu is not None or not self.is_cuda else GpuMonitor(self.device.index)
        self._reading: GpuReading | None = None
        self._step_start_alloc = 0
        self._proc = psutil.Process()

    def begin_step(self) -> None:
        """Call before a step: on CUDA resets the peak counter and notes what is allocated."""
        if self.is_cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            self._step_start_alloc = torch.cuda.memory_allocated(self.device)

    def end_step(self, kv_bytes: int, batch: int, tokens: int) -> MemoryBreakdown:
        """The breakdown right after a step that ran ``batch`` × ``tokens`` tokens and left
        ``kv_bytes`` of KV cache (measured tensor bytes). Reads the allocator once."""
        if self.is_cuda:
            st = torch.cuda.memory_stats(self.device)
            return self._cuda(kv_bytes, st.get("allocated_bytes.all.current", 0),
                              st.get("reserved_bytes.all.current", 0),
                              st.get("allocated_bytes.all.peak", 0), self._step_start_alloc,
                              in_step=True)
        act = activation_estimate(self.spec, self.dtype_bytes, batch, tokens)
        return self._cpu(kv_bytes, act, f"estimate for batch {batch} × {tokens} tokens")

    def snapshot(self, kv_bytes: int = 0) -> MemoryBreakdown:
        """The breakdown outside a step (for a low-rate sampler on its own thread); NVML is
        read afresh here, never on the engine thread."""
        if self.is_cuda:
            if self.gpu is not None:
                self._reading = self.gpu.read()
            alloc = torch.cuda.memory_allocated(self.device)
            reserved = torch.cuda.memory_reserved(self.device)
            return self._cuda(kv_bytes, alloc, reserved, alloc, alloc, in_step=False)
        return self._cpu(kv_bytes, 0, "no step running")

    def _cpu(self, kv: int, act: int, act_note: str) -> MemoryBreakdown:
        rss = self._proc.memory_info().rss
        notes = []
        known = self.weights + kv + act
        total, label = rss, "process RSS"
        if known > rss:  # freed activations no longer in RSS, or weights not resident yet
            total, label = known, "weights + KV + activations (above process RSS)"
            notes.append(f"process RSS {rss:,} B is below the parts' sum; total shows the sum")
        parts = [
            MemoryPart("weights", self.weights, True, "unique parameter and buffer storages"),
            MemoryPart("kv_cache", kv, True, "sum of nbytes of the cache tensors"),
            MemoryPart("activations", act, False, act_note),
            MemoryPart("runtime_other", total - known, False,
                       "RSS minus the parts above: Python, torch runtime, allocator, tokenizer"),
        ]
        return MemoryBreakdown(str(self.device), parts, total, label, time.perf_counter(), notes)

    def _cuda(self, kv: int, alloc: int, reserved: int, peak: int, start: int,
              in_step: bool) -> MemoryBreakdown:
        peak = max(peak, alloc, start)
        workspaces = max(0, start - self.weights - kv)
        act = max(0, peak - max(start, self.weights + kv + workspaces))
        inside = max(reserved, self.weights + kv + workspaces + act)
        cache = inside - self.weights - kv - workspaces - act
        act_note = ("peak allocated during the step − allocated when it began" if in_step
                    else "none: no step running")
        parts = [
            MemoryPart("weights", self.weights, True, "unique parameter and buffer storages"),
            MemoryPart("kv_cache", kv, True, "sum of nbytes of the cache tensors"),
            MemoryPart("activations", act, True, act_note),
            MemoryPart("workspaces", workspaces, True,
                       "allocated outside a step − weights − KV cache: cuBLAS workspaces and "
                       "other long-lived buffers"),
            MemoryPart("allocator_cache", cache, True,
                       "memory_reserved − the parts above: held by torch's allocator, unused"),
        ]
        notes: list[str] = []
        try:
            free, total = torch.cuda.mem_get_info(self.device)
        except Exception as exc:  # noqa: BLE001 - telemetry never fails a step
            free = total = None
            notes.append(f"mem_get_info failed ({type(exc).__name__}): total is torch's reserved")
        if total:
            other = max(0, total - free - inside)
            free = min(free, max(0, total - inside - other))
            note = "device used (mem_get_info) − memory_reserved: CUDA context, other processes"
            r = self._reading
            if r is not None and r.process_bytes is not None:
                note += f"; this process per NVML (last reading): {r.process_bytes:,} B"
            parts += [MemoryPart("context_other", other, True, note),
                      MemoryPart("free", free, True, "mem_get_info free")]
            total, label = inside + other + free, "GPU total (mem_get_info)"
        else:
            parts += [MemoryPart("context_other", 0, False, "N/A: no device totals"),
                      MemoryPart("free", 0, False, "N/A: no device totals")]
            total, label = inside, "memory_reserved (device totals N/A)"
        return MemoryBreakdown(str(self.device), parts, total, label, time.perf_counter(), notes)
