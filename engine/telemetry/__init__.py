"""Telemetry: observes the engine's steps and the devices; never changes what the engine computes.

- :mod:`.estimator`: weights / KV cache / activation bytes of a model from its config.
- :mod:`.memory`: the per-step memory breakdown (CUDA allocator + NVML, or CPU RSS).
- :mod:`.nvml`: GPU readings that never raise.
- :mod:`.rolling`: p50/p90/p99 of TTFT, TPOT and e2e over recent requests.
- :mod:`.trace`: a request's steps as JSON and CSV.
"""

from engine.model.model_spec import ModelSpec
from engine.telemetry.estimator import (DTYPE_BYTES, MemoryEstimate, activation_estimate, dtype_bytes, estimate,
                        known_models, load_spec)
from engine.telemetry.memory import MemoryBreakdown, MemoryPart, MemoryProbe
from engine.telemetry.nvml import GpuMonitor, GpuReading
from engine.telemetry.rolling import RollingStats, percentiles
from engine.telemetry.trace import trace_rows, trace_to_csv, trace_to_json, write_trace

__all__ = [
    "DTYPE_BYTES", "GpuMonitor", "GpuReading", "MemoryBreakdown", "MemoryEstimate", "MemoryPart",
    "MemoryProbe", "ModelSpec", "RollingStats", "activation_estimate", "dtype_bytes", "estimate",
    "known_models", "load_spec", "percentiles", "trace_rows", "trace_to_csv", "trace_to_json",
    "write_trace",
]
