"""The model families (``config.model_type``) each path of the engine supports, and the
messages that name them: the one list every check and message reads.

No torch here: the page and the CLI's argument checks may import it.
"""

from __future__ import annotations

PAGED_FAMILIES: tuple[str, ...] = ("llama", "mistral", "qwen2", "qwen3")
"""Families whose attention goes through transformers' attention interface with the Llama
layout (rotary from position_ids, one attention call per layer): paged attention and continuous
batching work (:func:`engine.wiring.build_parts`). Any other family is served one request at a
time with a contiguous cache."""

COMPILED_FAMILIES: tuple[str, ...] = ("llama", "mistral", "qwen2")
"""Families the compact compiled decode forward computes
(:mod:`engine.worker.compiled.llama_decode`): the same block layout, Qwen2's q/k/v biases in
its linear modules. Qwen3's per-head q/k norms are not in that forward: it runs eager."""


def family_list(families: tuple[str, ...]) -> str:
    """``families`` for a message: ``"llama, mistral and qwen2"``."""
    if len(families) < 2:
        return "".join(families)
    return f"{', '.join(families[:-1])} and {families[-1]}"


def paged_unsupported_note(model_type: str) -> str:
    """Why a ``model_type`` outside :data:`PAGED_FAMILIES` is served one request at a time."""
    return (f"{model_type or 'this'} architecture is served one request at a time: paged "
            f"attention supports {family_list(PAGED_FAMILIES)}")


def kv_dtype_needs_paged(kv_cache_dtype: str) -> str:
    """The error for a ``kv_cache_dtype`` other than ``auto`` without the paged KV cache."""
    return (f"kv_cache_dtype={kv_cache_dtype} needs the paged KV cache (batching on a "
            f"{family_list(PAGED_FAMILIES)} model); use auto here")


def compiled_unsupported_reason(model_type: str) -> str:
    """Why the compiled decode step can't run a ``model_type`` outside :data:`COMPILED_FAMILIES`."""
    return (f"the compiled decode step covers {family_list(COMPILED_FAMILIES)}, "
            f"not {model_type or 'this model'}")
