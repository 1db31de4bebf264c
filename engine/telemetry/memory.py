"""Memory breakdown per engine step: what the device (or process) memory is spent on.

Definitions: DESIGN.md, "Memory definitions". On CUDA every part is measured (torch.cuda
allocator statistics plus NVML); on CPU the process RSS (psutil) is split into weights, KV
cache, an activation estimate and the rest. Parts are never negative and sum to the total.
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
            allocator_cache, context_other, free; CPU: weights, kv_cache, activations,
            runtime_other. total_bytes: the sum of the parts, in bytes. total_label: what that
            total is ("GPU total (NVML)", "process RSS"...). timestamp: ``perf_counter()`` s.
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

    Args:
        model: the loaded model; its weight bytes are counted once here.
        device: where the model runs (``"cuda"``, ``"cuda:1"``, ``"cpu"``).
        spec, dtype_bytes: for the CPU activation estimate.
        gpu: an NVML monitor for CUDA totals; ``None`` creates one for the CUDA device.
        nvml_interval_s: NVML is read at most this often inside steps (snapshots always read).
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
        self.nvml_interval_s = nvml_interval_s
        self._reading: GpuReading | None = None
        self._proc = psutil.Process()

    def begin_step(self) -> None:
        """Call before a step: on CUDA resets the peak-allocated counter."""
        if self.is_cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def end_step(self, kv_bytes: int, batch: int, tokens: int) -> MemoryBreakdown:
        """The breakdown right after a step that ran ``batch`` × ``tokens`` tokens and left
        ``kv_bytes`` of KV cache (measured tensor bytes)."""
        if self.is_cuda:
            peak = torch.cuda.max_memory_allocated(self.device)
            return self._cuda(kv_bytes, peak, self._gpu_reading(force=False), in_step=True)
        act = activation_estimate(self.spec, self.dtype_bytes, batch, tokens)
        return self._cpu(kv_bytes, act, f"estimate for batch {batch} × {tokens} tokens")

    def snapshot(self, kv_bytes: int = 0) -> MemoryBreakdown:
        """The breakdown outside a step (for a low-rate sampler); NVML is read afresh."""
        if self.is_cuda:
            alloc = torch.cuda.memory_allocated(self.device)
            return self._cuda(kv_bytes, alloc, self._gpu_reading(force=True), in_step=False)
        return self._cpu(kv_bytes, 0, "no step running")

    def _gpu_reading(self, force: bool) -> GpuReading | None:
        if self.gpu is None:
            return None
        r = self._reading
        if force or r is None or time.perf_counter() - r.timestamp >= self.nvml_interval_s:
            self._reading = r = self.gpu.read()
        return r

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

    def _cuda(self, kv: int, high: int, r: GpuReading | None, in_step: bool) -> MemoryBreakdown:
        alloc = torch.cuda.memory_allocated(self.device)
        reserved = torch.cuda.memory_reserved(self.device)
        high = max(high, alloc)
        act = max(0, high - self.weights - kv)
        inside = max(reserved, self.weights + kv + act)
        cache = inside - self.weights - kv - act
        act_note = ("peak allocated during the step − weights − KV cache" if in_step
                    else "allocated now − weights − KV cache (no step running)")
        parts = [
            MemoryPart("weights", self.weights, True, "unique parameter and buffer storages"),
            MemoryPart("kv_cache", kv, True, "sum of nbytes of the cache tensors"),
            MemoryPart("activations", act, True, act_note),
            MemoryPart("allocator_cache", cache, True,
                       "memory_reserved − max(peak, allocated): the step's activations are "
                       "counted above, so they are not counted twice here"),
        ]
        notes: list[str] = []
        if r is not None and r.available and r.mem_total_bytes and r.mem_free_bytes is not None:
            total, free = r.mem_total_bytes, r.mem_free_bytes
            other = max(0, total - free - inside)
            free = min(free, max(0, total - inside - other))
            note = "NVML device used − memory_reserved: CUDA context, non-torch memory, other processes"
            if r.process_bytes is not None:
                note += f"; this process per NVML: {r.process_bytes:,} B"
            parts += [MemoryPart("context_other", other, True, note),
                      MemoryPart("free", free, True, "NVML free")]
            total, label = inside + other + free, "GPU total (NVML)"
            if total != r.mem_total_bytes:
                notes.append(f"torch reserved more than NVML reports used; NVML total "
                             f"{r.mem_total_bytes:,} B")
        else:
            why = r.reason if r is not None else "no GPU monitor"
            parts += [MemoryPart("context_other", 0, False, f"N/A: {why}"),
                      MemoryPart("free", 0, False, f"N/A: {why}")]
            total, label = inside, "memory_reserved (NVML N/A)"
            notes.append(f"NVML N/A ({why}): total is torch's reserved memory")
        return MemoryBreakdown(str(self.device), parts, total, label, time.perf_counter(), notes)
