"""A low-rate background sampler of the device for the Device panel.

One sampler serves every browser session: it reads the engine's GPU monitor (NVML) once a
second, or, without a GPU, the machine's CPU load and this process's RSS (psutil), into a ring
buffer. Pages only draw the buffer, so many open tabs cost no extra device reads.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import psutil


def no_gpu_reason(device: str, gpu_reason: str | None = None) -> str:
    """One line saying why the panel shows no GPU readings.

    Args:
        device: the engine's device (``"cpu"``, ``"mps"``, ``"cuda:0"``...).
        gpu_reason: NVML's own reason when a CUDA device has no readings.
    """
    if device.startswith("cuda"):
        return f"GPU readings N/A: {gpu_reason or 'NVML gave no reading'}"
    if device == "remote":
        return "the engine runs on a remote server: its devices are not visible to this page"
    if device == "mps":
        return "Apple GPU (MPS): NVML readings exist only for NVIDIA GPUs"
    return "no NVIDIA GPU: running on CPU"


class DeviceMonitor:
    """Samples the device every ``interval_s`` seconds on a daemon thread.

    Args:
        gpu: the engine's ``GpuMonitor`` (``read() -> GpuReading``) or ``None``.
        device: the engine's device string.
        interval_s: seconds between samples.
        history_s: seconds of history kept (older samples drop out).
        clock: ``() -> float`` seconds (``time.perf_counter``); tests pass a fake.
    """

    def __init__(self, gpu, device: str, interval_s: float = 1.0, history_s: float = 120.0,
                 clock=time.perf_counter) -> None:
        self.gpu = gpu
        self.device = device
        self.interval_s = interval_s
        self.clock = clock
        self._buf: deque[tuple[float, dict]] = deque(maxlen=max(2, int(history_s / interval_s)))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc = psutil.Process()
        self.gpu_available = False
        self.reason = no_gpu_reason(device)
        self.name = ""

    def sample(self) -> dict:
        """Take one reading now and append it to the buffer.

        Returns:
            ``{"util_pct", "power_w", "temp_c", "mem_used_bytes"}`` with a GPU, else
            ``{"cpu_pct", "rss_bytes"}``.
        """
        reading = self.gpu.read() if self.gpu is not None else None
        if reading is not None and reading.available:
            self.gpu_available, self.name = True, reading.name or ""
            self.reason = "" if reading.reason == "ok" else reading.reason
            row = {"util_pct": reading.util_pct, "power_w": reading.power_w, "temp_c": reading.temp_c,
                   "mem_used_bytes": reading.mem_used_bytes}
        else:
            self.gpu_available = False
            self.reason = no_gpu_reason(self.device, getattr(reading, "reason", None))
            row = {"cpu_pct": psutil.cpu_percent(interval=None), "rss_bytes": self._proc.memory_info().rss}
        with self._lock:
            self._buf.append((self.clock(), row))
        return row

    def samples(self) -> list[dict]:
        """The buffer as dicts with ``t`` = seconds relative to now (negative = in the past)."""
        now = self.clock()
        with self._lock:
            items = list(self._buf)
        return [{"t": round(ts - now, 2), **row} for ts, row in items]

    def start(self) -> "DeviceMonitor":
        """Start the sampling thread (idempotent); returns self."""
        if self._thread is None:
            psutil.cpu_percent(interval=None)  # the first call only sets the baseline
            self._thread = threading.Thread(target=self._run, name="device-monitor", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the sampling thread."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # a broken reading must never take the page down
                self.reason = f"device reading failed: {type(exc).__name__}"
            self._stop.wait(self.interval_s)
