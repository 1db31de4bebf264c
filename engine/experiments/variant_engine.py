"""A second engine on another variant of a served model: other weights, another KV cache dtype.

The page's Compare tab runs one side on the served engine and, where that side asks for weights
or a KV cache dtype the served engine lacks (the KV dtype is a property of the whole block pool),
on an engine built here from the same model name and device. Building one loads the model again
(int4 reads the embedded GGUF directly; bf16 casts the cached fp32 weights), a few seconds on
two cores.
"""

from __future__ import annotations

VARIANT_KV_BYTES = 64 * 2**20
"""The KV pool of a variant engine (64 MiB): room for a few comparisons' answers, not a class."""


def variant_engine(loaded, weights: str, kv_cache_dtype: str = "auto", **options):
    """An :class:`engine.LLMEngine` serving ``loaded``'s model with ``weights`` and
    ``kv_cache_dtype``.

    Args:
        loaded: the served :class:`engine.model.model_info.LoadedModel` (its name and device are
            used; the model is loaded anew, so no module is shared between two engine threads).
        weights: ``fp32``, ``bf16``, ``fp16``, ``int8`` or ``int4``.
        kv_cache_dtype: one of :data:`engine.config.KV_CACHE_DTYPES`.
        options: more :class:`engine.config.EngineConfig` fields; by default the eager decode
            step (a background compile would cost minutes of CPU), telemetry on and a
            :data:`VARIANT_KV_BYTES` pool.

    Returns:
        A running ``LLMEngine``; the caller shuts it down.

    Raises:
        ModelLoadError: those weights can't be loaded for this model or device.
        ValueError: a bad ``kv_cache_dtype``.
    """
    from engine.engine import LLMEngine
    from engine.model.loader import load_model

    model = load_model(loaded.info.name, device=loaded.info.device, weights=weights, progress=None)
    options.setdefault("compile", "off")
    options.setdefault("kv_cache_bytes", VARIANT_KV_BYTES)
    options.setdefault("max_queue", 8)
    return LLMEngine(model, kv_cache_dtype=kv_cache_dtype, **options)
