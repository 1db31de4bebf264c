"""GPU readings through NVML (``import pynvml``, from the ``nvidia-ml-py`` package).

Every NVML call can fail: no library, no driver, MIG slices answering NotSupported, containers
whose PIDs differ from the host's, ZeroGPU processes without a real GPU. A failure leaves that
field ``None`` and says why; :meth:`GpuMonitor.read` never raises.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, field

NOT_IN_LIST = "this process not in NVML's list (container PID namespace?)"


@dataclass
class GpuReading:
    """One NVML sample of one GPU.

    Attributes:
        available: NVML answered for this GPU (individual fields may still be ``None``).
        reason: ``"ok"``, or why the reading is missing or partial.
        name: the GPU's name. util_pct: GPU utilization over NVML's last sample period, 0-100.
        mem_used_bytes, mem_total_bytes, mem_free_bytes: device memory in bytes (all processes).
        power_w: board power in watts. temp_c: GPU temperature in °C.
        process_bytes: GPU memory NVML attributes to this process, in bytes.
        timestamp: ``time.perf_counter()`` seconds when read.
        field_errors: field name -> why it is ``None`` (``"memory"`` covers the three memory
            fields).
    """

    available: bool
    reason: str
    name: str | None = None
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    mem_free_bytes: int | None = None
    power_w: float | None = None
    temp_c: float | None = None
    process_bytes: int | None = None
    timestamp: float = 0.0
    field_errors: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """A JSON-ready dict with the field names above."""
        return asdict(self)


def describe_error(exc: BaseException, nvml=None) -> str:
    """A short reason for an NVML exception; NotSupported (typical of MIG) is named as such."""
    not_supported = getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)
    text = str(exc) or type(exc).__name__
    if (getattr(exc, "value", None) == not_supported or "NotSupported" in type(exc).__name__
            or "not supported" in text.lower()):
        return "NotSupported (MIG, or this GPU does not report it)"
    return text


class GpuMonitor:
    """Reads one GPU through NVML; safe to call from several threads.

    The GPU is found by its UUID when one is given (:func:`torch_gpu_uuid`): torch's device
    index counts only the GPUs ``CUDA_VISIBLE_DEVICES`` shows, while NVML counts every GPU of
    the machine, and a MIG slice is only reachable by its own UUID. Without a UUID, or when
    NVML does not know it, the index is used.

    Args:
        index: NVML device index (the fallback).
        nvml_module: a module with pynvml's functions (tests pass a fake); default ``pynvml``.
        uuid: the GPU's UUID as torch reports it (with or without the ``GPU-`` / ``MIG-``
            prefix).
    """

    def __init__(self, index: int = 0, nvml_module=None, uuid: str | None = None):
        self.index = index
        self.uuid = uuid
        self.found_by = None
        self._nvml = nvml_module
        self._handle = None
        self._failure: str | None = None
        self._initialised = False
        self._lock = threading.Lock()

    def _ensure(self) -> bool:
        """Initialise NVML and get the device handle once; remember a failure."""
        if self._handle is not None or self._failure is not None:
            return self._handle is not None
        if self._nvml is None:
            try:
                import pynvml
            except Exception as exc:  # ImportError, or a broken install
                self._failure = f"nvidia-ml-py not installed ({type(exc).__name__})"
                return False
            self._nvml = pynvml
        try:
            self._nvml.nvmlInit()
            self._initialised = True
        except Exception as exc:
            self._failure = f"no NVIDIA driver (NVML init failed: {describe_error(exc, self._nvml)})"
            return False
        if self.uuid:
            bare = self.uuid.split("-", 1)[1] if self.uuid.startswith(("GPU-", "MIG-")) else self.uuid
            for name in (self.uuid, f"GPU-{bare}", f"MIG-{bare}"):
                try:
                    self._handle = self._nvml.nvmlDeviceGetHandleByUUID(name)
                    self.found_by = f"UUID {name}"
                    return True
                except Exception:  # noqa: BLE001 - try the next spelling, then the index
                    continue
        try:
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(self.index)
            self.found_by = f"index {self.index}"
        except Exception as exc:
            self._failure = f"no GPU {self.index} in NVML ({describe_error(exc, self._nvml)})"
            return False
        return True

    def _process_bytes(self, nv, h) -> int:
        """This process's GPU memory; raises ``LookupError`` when NVML does not list it."""
        pid = os.getpid()
        for proc in nv.nvmlDeviceGetComputeRunningProcesses(h):
            if proc.pid == pid:
                used = getattr(proc, "usedGpuMemory", None)
                if used is None:
                    raise LookupError("the driver does not report per-process memory")
                return int(used)
        raise LookupError(NOT_IN_LIST)

    def read(self) -> GpuReading:
        """Sample name, memory, utilization, power (mW -> W), temperature and this process's
        memory. Never raises: failures become ``None`` fields with a reason."""
        now = time.perf_counter()
        with self._lock:
            if not self._ensure():
                return GpuReading(available=False, reason=self._failure or "N/A", timestamp=now)
            nv, h, r = self._nvml, self._handle, GpuReading(available=True, reason="ok", timestamp=now)
            temp_kind = getattr(nv, "NVML_TEMPERATURE_GPU", 0)
            calls = {
                "name": lambda: _text(nv.nvmlDeviceGetName(h)),
                "memory": lambda: nv.nvmlDeviceGetMemoryInfo(h),
                "util_pct": lambda: float(nv.nvmlDeviceGetUtilizationRates(h).gpu),
                "power_w": lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
                "temp_c": lambda: float(nv.nvmlDeviceGetTemperature(h, temp_kind)),
                "process_bytes": lambda: self._process_bytes(nv, h),
            }
            for key, call in calls.items():
                try:
                    value = call()
                except LookupError as exc:
                    r.field_errors[key] = str(exc)
                    continue
                except Exception as exc:
                    r.field_errors[key] = describe_error(exc, nv)
                    continue
                if key == "memory":
                    r.mem_used_bytes, r.mem_total_bytes = int(value.used), int(value.total)
                    r.mem_free_bytes = int(value.free)
                else:
                    setattr(r, key, value)
            if r.field_errors:
                r.reason = "partial: " + "; ".join(f"{k}: {v}" for k, v in r.field_errors.items())
            return r

    def close(self) -> None:
        """Shut NVML down if this monitor initialised it (errors ignored)."""
        with self._lock:
            if self._initialised:
                try:
                    self._nvml.nvmlShutdown()
                except Exception:
                    pass
            self._initialised, self._handle = False, None
            self._failure = "closed"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def torch_gpu_uuid(device) -> str | None:
    """The UUID torch reports for a CUDA device (``None`` where it reports none)."""
    try:
        import torch

        uuid = getattr(torch.cuda.get_device_properties(torch.device(device)), "uuid", None)
    except Exception:  # noqa: BLE001 - no CUDA, or an old torch
        return None
    return str(uuid) if uuid else None
