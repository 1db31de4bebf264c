"""The sampler's per-row results in one C++ operation on the CPU (``row_summary.cpp``).

After the model has produced a step's logits, the sampler reports for every row the greedy
token (argmax), its probability, the top candidates and whether the row is finite, and brings
them to the host in one transfer. Written with PyTorch operations that was about 30 small
operations, and right after a decode step has streamed ~95 MB of weights through the caches
each costs several times what it costs warm: on the embedded model at batch 1, argmax, top-5
and packing took 156 µs after a compiled step (57 µs warm). :func:`row_summary` does it in one
pass over each row (12 µs warm for 49,152 columns, 334 against 421 µs for 32 rows, one
thread); in the engine a batch-1 step's sampling went from 0.34-0.39 to 0.10-0.12 ms. It
selects every value, computing none, so the numbers are those of the PyTorch operations (among
equal probabilities the lower index comes first).

The operator is built with the machine's C++ compiler (about 10 s, cached like the other
kernels) in a background thread that the first :func:`available` call starts, so no request
waits for it: until it is loaded, and without a compiler or on other devices, :func:`available`
is ``False`` and the sampler keeps its PyTorch operations.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import torch

from engine.native_build import build_torch_library, cxx_compiler

log = logging.getLogger("engine")

SOURCE = Path(__file__).with_name("row_summary.cpp")
FLAGS = ("-O3", "-shared", "-fPIC", "-std=c++20", "-w")

_state: dict = {}
_lock = threading.Lock()


def load():
    """The loaded operator, or ``None`` when it can't be built (built and loaded once per
    process; blocks while it is being built; thread-safe)."""
    if "op" in _state or "error" in _state:
        return _state.get("op")
    with _lock:
        if "op" in _state or "error" in _state:
            return _state.get("op")
        try:
            if not hasattr(torch.ops.playground_sampling, "row_summary"):
                compiler = cxx_compiler()
                if compiler is None:
                    raise RuntimeError("no C++ compiler (c++, g++ or $CXX) on this machine")
                torch.ops.load_library(str(build_torch_library("row_summary", (SOURCE,), FLAGS,
                                                               compiler)))
            _state["op"] = torch.ops.playground_sampling.row_summary.default
        except Exception as exc:  # noqa: BLE001 - any failure: the PyTorch operations serve
            _state["error"] = f"{type(exc).__name__}: {exc}"[:400]
            log.info("row summary operator unavailable (%s); the sampler's PyTorch operations "
                     "serve", _state["error"])
        return _state.get("op")


def available(x: torch.Tensor) -> bool:
    """Whether :func:`row_summary` serves logits like ``x`` now: on the CPU, once loaded. Never
    blocks: the first call starts building the operator in a background thread."""
    if x.device.type != "cpu":
        return False
    if "op" in _state:
        return True
    if "error" not in _state and not _state.get("building"):
        with _lock:
            if "op" not in _state and "error" not in _state and not _state.get("building"):
                _state["building"] = True
                threading.Thread(target=load, name="row-summary-build", daemon=True).start()
    return False


def unavailable_reason() -> str | None:
    """Why the operator is not used (``None`` when it is loaded; blocks while it is built)."""
    return None if load() is not None else _state.get("error")


def row_summary(scored: torch.Tensor, probs: torch.Tensor, chosen: torch.Tensor,
                k: int) -> torch.Tensor:
    """Per row: the token (greedy or drawn), its probability, finite flag and the top ``k``
    candidates.

    Args:
        scored: ``[N, V]`` float32 scores the greedy token is the argmax of (the penalised
            logits), contiguous, on the CPU.
        probs: ``[N, V]`` float32 probabilities, shaped like ``scored``.
        chosen: ``[N]`` int64: a sampled row's drawn token, ``-1`` for a greedy row.
        k: candidates per row, ``1 <= k <= V``.

    Returns:
        ``[N, 3 + 2k]`` float64: column 0 the row's token (``chosen``, or where it is ``-1``
        the first index of the row's largest score: ``torch.argmax``'s), 1 ``probs`` there, 2 ``1.0`` when every score of the row is
        finite (else ``0.0``), then the ``k`` indices of the largest probabilities, largest
        first (the lower index first among equal values), then those probabilities.

    Raises:
        RuntimeError: the operator is unavailable (see :func:`available`), or a shape, dtype,
            ``chosen`` index or ``k`` the operator rejects.
    """
    op = load()
    if op is None:
        raise RuntimeError(f"row_summary is unavailable: {_state.get('error')}")
    return op(scored, probs, chosen, k)
