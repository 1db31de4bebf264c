"""Building the engine's own C and C++ kernels into the cache, once.

Used by :mod:`engine.worker.kernels.decode_attention` (C, loaded with ``ctypes``, and its C++
operator) and :mod:`engine.model.quant.int4_kernel` (C++, a torch operator library).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
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
    from engine.model.embedded import cache_dir

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


X86_64_LEVELS = (
    ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
    ("x86-64-v3", {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
    ("x86-64-v2", {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}),
)
"""The x86-64 psABI's microarchitecture levels, highest first, each with the ``/proc/cpuinfo``
flags it adds to the level below it (``abm`` is LZCNT)."""


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags from ``/proc/cpuinfo`` (Linux), read once per process; empty
    where it can't be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[-1].split())
    except OSError:
        pass
    return frozenset()


def x86_64_level(flags: frozenset[str] | set[str] | None = None) -> str | None:
    """The highest x86-64 microarchitecture level (``"x86-64-v4"`` ... ``"x86-64-v2"``) whose
    flags, and those of every level below it, this CPU has (:data:`X86_64_LEVELS`); ``None``
    on another architecture, or when ``/proc/cpuinfo`` can't be read."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    have = cpu_flags() if flags is None else flags
    needed: set[str] = set()
    found = None
    for level, added in reversed(X86_64_LEVELS):     # v2, then v3, then v4
        needed |= added
        if not needed <= have:
            break
        found = level
    return found


def cxx_compiler() -> str | None:
    """``$CXX``, else ``c++`` or ``g++`` on the PATH; ``None`` when there is none."""
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


def build_torch_library(stem: str, sources: tuple[Path, ...], flags: tuple[str, ...],
                        compiler: str, timeout: float = 300) -> Path:
    """A torch operator library (``TORCH_LIBRARY``) compiled from ``sources`` (the first is
    compiled, the rest are headers it includes) against this torch's headers and libraries, in
    the cache (:func:`build_cached`); the key covers the sources, the flags, the compiler and the
    torch build. Load it with ``torch.ops.load_library``.

    Raises:
        RuntimeError, subprocess.TimeoutExpired: as :func:`build_cached`.
    """
    import sysconfig

    import torch
    from torch.utils import cpp_extension

    lib = Path(torch.__file__).parent / "lib"
    key = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + " ".join(
        (compiler, *flags, torch.__version__, str(lib))).encode()).hexdigest()[:16]
    abi = int(torch.compiled_with_cxx11_abi())

    def command(target: str) -> list[str]:
        return [compiler, *flags, f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
                *(f"-I{p}" for p in cpp_extension.include_paths()),
                f"-I{sysconfig.get_paths()['include']}", str(sources[0]), "-o", target,
                f"-L{lib}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{lib}"]

    return build_cached(stem, key, command, timeout)


def import_setuptools() -> None:
    """Import ``torch.utils.cpp_extension`` (and so setuptools) on the calling thread, before a
    background thread that builds or compiles starts. Importing setuptools puts a finder at the
    head of ``sys.meta_path`` and takes it out again; an import running meanwhile on another
    thread walks that list and can step over the path finder, so a module that is installed is
    reported missing (``No module named 'regex'`` while the app loaded transformers in CI,
    ``cannot import name 'version' from 'packaging'`` here, both during a kernel prebuild).
    Imported once, setuptools leaves the list alone."""
    import sysconfig  # noqa: F401

    from torch.utils import cpp_extension  # noqa: F401

    from engine.model.embedded import cache_dir  # noqa: F401


_PREBUILDS: dict[str, threading.Thread] = {}
_PREBUILD_LOCK = threading.Lock()


def prebuild(name: str, build: Callable[[], object]) -> None:
    """Run ``build()`` (compiling a kernel into the cache, without loading it) on a background
    thread, once per process for ``name``: on a first start the compiler then works on one core
    while the model loads on the other. A failure is dropped: the loading call builds again and
    reports it. :func:`wait_prebuilt` lets that call wait instead of compiling the same file.

    What the build imports is imported here first, on the calling thread (:func:`import_setuptools`)."""
    import_setuptools()
    with _PREBUILD_LOCK:
        if name in _PREBUILDS:
            return

        def run():
            try:
                build()
            except Exception:  # noqa: BLE001 - see above
                pass

        _PREBUILDS[name] = thread = threading.Thread(target=run, name=f"build-{name}", daemon=True)
    thread.start()


def wait_prebuilt(name: str) -> None:
    """Wait for :func:`prebuild`'s ``name`` to end (at once when none was started)."""
    thread = _PREBUILDS.get(name)
    if thread is not None and thread is not threading.current_thread():
        thread.join()
