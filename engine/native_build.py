"""Building the engine's own C and C++ kernels into the cache, once.

Used by :mod:`engine.worker.kernels.decode_attention` (C, loaded with ``ctypes``) and
:mod:`engine.model.quant.int4_kernel` (C++, a torch operator library).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path


def build_cached(stem: str, key: str, command: Callable[[str], list[str]], timeout: float) -> Path:
    """The library ``<cache_dir()>/kernels/<stem>-<key>.so``, compiled first if not there.

    Args:
        stem: the file name's start (``paged_decode``, ``int4_kernel``).
        key: what tells builds apart (a hash of the source, flags, compiler...).
        command: ``command(target_path)`` → the compiler's argument list writing ``target_path``.
        timeout: seconds the compiler may take.

    Raises:
        RuntimeError: the compiler failed (the end of its message is kept).
        subprocess.TimeoutExpired: it took longer than ``timeout``.

    The output is written to a temporary name and renamed into place, so a process starting in
    parallel sees a whole library or none.
    """
    from engine.model.loader import cache_dir

    folder = cache_dir() / "kernels"
    target = folder / f"{stem}-{key}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}-", suffix=".so", dir=folder)
    os.close(fd)
    try:
        done = subprocess.run(command(tmp), capture_output=True, text=True, timeout=timeout)
        if done.returncode:
            raise RuntimeError(f"{command(tmp)[0]} failed: {done.stderr.strip()[-400:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
