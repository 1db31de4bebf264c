"""Where the model runs and in which precision: device and dtype choices, with what they saw."""

from __future__ import annotations

import logging

import torch

from engine.errors import ModelLoadError

log = logging.getLogger("engine")

DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "fp16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}


def resolve_device(device: str = "auto") -> str:
    """``auto`` picks cuda, then mps, then cpu; anything else is checked and returned.

    ``auto`` on a machine whose GPU torch cannot start (a driver too old for the wheel) falls
    back to CPU with a warning in the log, not silently.

    Raises:
        ModelLoadError: when the asked device is not available.
    """
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return "mps"
        seen = nvml_gpu_count()
        if seen:
            log.warning("NVML sees %d NVIDIA GPU(s) but torch cannot use CUDA (torch built for "
                        "CUDA %s; is the driver older than the wheel needs?): running on CPU",
                        seen, torch.version.cuda)
        return "cpu"
    kind = device.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} asked for, but torch sees no CUDA device")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ModelLoadError(f"device {device!r} asked for, but MPS is not available")
    if kind not in ("cpu", "cuda", "mps"):
        raise ModelLoadError(f"unknown device {device!r}: use auto, cpu, cuda[:N] or mps")
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """``auto`` picks bf16 on GPUs with native bf16 (compute capability 8.0 and up: A100, L4,
    A10G, H100...), fp16 on older GPUs (T4 is 7.5, V100 7.0: bf16 there is emulated, without
    tensor cores), fp16 on MPS and fp32 on CPU.

    The capability is read from ``device`` itself (``cuda:1`` is asked about GPU 1, not the
    current one).

    Raises:
        ModelLoadError: for an unknown dtype name.
    """
    if dtype == "auto":
        if device.startswith("cuda"):
            major, _ = torch.cuda.get_device_capability(torch.device(device))
            return torch.bfloat16 if major >= 8 else torch.float16
        if device == "mps":
            return torch.float16
        return torch.float32
    if dtype not in DTYPES:
        raise ModelLoadError(f"unknown dtype {dtype!r}: use auto, {', '.join(sorted(DTYPES))}")
    return DTYPES[dtype]


def nvml_gpu_count() -> int:
    """NVIDIA GPUs the driver reports through NVML (0 without NVML or a driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no library, no driver: no GPU to speak of
        return 0


def cuda_report(device: str) -> str:
    """One line for the start-up log: the GPU, its compute capability, torch's CUDA and the
    driver."""
    idx = torch.device(device).index or 0
    name = torch.cuda.get_device_name(idx)
    major, minor = torch.cuda.get_device_capability(idx)
    driver = "N/A"
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # noqa: BLE001 - the line says N/A instead
        pass
    return (f"GPU {idx}: {name}, compute capability {major}.{minor}; torch {torch.__version__} "
            f"built for CUDA {torch.version.cuda}; driver {driver}")
