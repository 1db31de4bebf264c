"""A description of the machine and software a benchmark ran on (for ``results.json``)."""

from __future__ import annotations

import os
import platform
import sys
from datetime import datetime, timezone


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def describe(loaded=None) -> dict:
    """CPU, cores, RAM, GPU, OS, versions, load, time and (when given) the model.

    Returns:
        A JSON-ready dict: ``cpu``, ``logical_cores``, ``physical_cores``, ``torch_threads``,
        ``ram_bytes``, ``gpu`` (name or ``None``), ``os``, ``python``, ``torch``,
        ``transformers``, ``load_average`` (1/5/15 min, or ``None``), ``timestamp`` (UTC, ISO
        8601) and ``model`` (name, source, device, dtype, parameters, weights bytes, weights option).
    """
    import psutil
    import torch
    import transformers

    gpu = None
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    out = {
        "cpu": cpu_model(), "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False), "torch_threads": torch.get_num_threads(),
        "ram_bytes": psutil.virtual_memory().total, "gpu": gpu,
        "os": f"{platform.system()} {platform.release()}", "python": sys.version.split()[0],
        "torch": torch.__version__, "transformers": transformers.__version__,
        "load_average": load,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if loaded is not None:
        i = loaded.info
        out["model"] = {"name": i.name, "source": i.source, "device": i.device, "dtype": i.dtype,
                        "num_params": i.num_params, "weights_bytes": i.weights_bytes,
                        "weights": getattr(i, "weights", ""), "weights_note": getattr(i, "weights_note", "")}
    return out
