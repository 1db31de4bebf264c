"""Reproducible experiments behind ``python -m engine bench`` and the page's Lessons tab.

Each experiment is one small module with ``NAME``, ``TITLE``, ``run(loaded, quick, progress,
engine=None, **sizes) -> dict`` (fields documented in its module docstring; common fields in
:mod:`.common`) and ``plot(result, path) -> path`` (a matplotlib PNG). :data:`EXPERIMENTS` is the
registry, in the order the CLI runs them; :data:`NAMES` lists the same names without
importing any experiment (the CLI's ``--help`` needs no torch), and the registry is built on first
use.
"""

from __future__ import annotations

import importlib
import time
import traceback
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

MODULES = ("vs_hf", "kv_cache", "prompt_length", "decode_share", "batch", "roofline",
           "telemetry_cost", "llama_cpp", "quantization", "speculative", "structured",
           "structured_set", "compile")
"""The experiments' modules, in run order; each one's ``NAME`` is its module name with ``-``."""
NAMES = [m.replace("_", "-") for m in MODULES]


@dataclass(frozen=True)
class Experiment:
    """One registered experiment.

    Attributes:
        name: the CLI name (``vs-hf``, ``kv-cache``, ...); title: a one-line heading.
        run: ``run(loaded, quick=False, progress=None, engine=None, **sizes) -> dict``.
        plot: ``plot(result, path) -> str`` writing a PNG.
        served: the module's ``SERVED``: it measures the engine as ``python -m engine serve``
            runs it (the compiled decode step where it applies), so ``bench`` gives it such an
            engine instead of the eager one the other experiments share.
    """

    name: str
    title: str
    run: Callable[..., dict]
    plot: Callable[[dict, str], str]
    served: bool = False


def _entry(mod: ModuleType) -> Experiment:
    return Experiment(mod.NAME, mod.TITLE, mod.run, mod.plot, getattr(mod, "SERVED", False))


def _registry() -> dict[str, Experiment]:
    """Import every experiment of :data:`MODULES` (torch with them) and register it."""
    reg = {}
    for module, name in zip(MODULES, NAMES):
        exp = _entry(importlib.import_module(f"{__name__}.{module}"))
        if exp.name != name:
            raise RuntimeError(f"experiment module {module} is named {exp.name!r}, not {name!r}")
        reg[name] = exp
    return reg


def __getattr__(name: str):
    if name == "EXPERIMENTS":  # ``{name: Experiment}`` in run order, built once on first use
        reg = globals()["EXPERIMENTS"] = _registry()
        return reg
    raise AttributeError(name)


def _experiments() -> dict[str, Experiment]:
    return globals().get("EXPERIMENTS") or __getattr__("EXPERIMENTS")


def names() -> list[str]:
    """Registered experiment names, in run order."""
    return list(_experiments())


def run_experiment(name: str, loaded, quick: bool = False, progress=None, engine=None,
                   **sizes) -> dict:
    """Run one experiment by name and never raise for its own failures.

    Returns:
        The experiment's result dict plus ``elapsed_s`` (wall seconds); on an exception a
        result with ``status: "error"`` and ``error`` (the message and a short traceback).

    Raises:
        KeyError: ``name`` is not registered.
    """
    exp = _experiments()[name]
    t0 = time.perf_counter()
    try:
        res = exp.run(loaded, quick=quick, progress=progress, engine=engine, **sizes)
    except Exception as exc:  # noqa: BLE001 - one failed experiment must not stop the others
        res = {"experiment": name, "title": exp.title, "quick": bool(quick), "status": "error",
               "params": dict(sizes), "error": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc(limit=4), "notes": [],
               "summary": [{"metric": "error", "value": f"{type(exc).__name__}: {exc}"[:200],
                            "unit": ""}]}
    res["elapsed_s"] = time.perf_counter() - t0
    return res


__all__ = ["EXPERIMENTS", "MODULES", "NAMES", "Experiment", "names", "run_experiment"]
