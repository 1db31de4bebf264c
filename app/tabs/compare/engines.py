"""Which engine runs each side: the served one, a second engine on another model variant, or a
remote server beside the page.

Sides whose weights and KV cache dtype are the served engine's run on it, in its batches. A
side asking for other weights (int4 against bf16) or another KV cache dtype (the dtype belongs to
the whole block pool) runs on a second :class:`engine.LLMEngine` built from the same model
(:func:`engine.experiments.variant_engine.variant_engine`), loaded on first use and kept; at
most :data:`MAX_VARIANTS` are kept, the least recently used shut down when another is needed.
Each engine steps in its own thread, so the two sides then run at the same time but do not
share batches.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from app.tabs.compare.settings import SideSettings

KV_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "fp8 (e4m3)": "fp8"}
"""The engine's KV dtype names (``ModelInfo.kv_dtype``) as the settings name them."""
MAX_VARIANTS = 2
"""Second engines kept at once (one per side at most): each holds a model's weights and a
64 MiB KV pool."""


@dataclass(frozen=True)
class Placement:
    """Where one side runs.

    Attributes:
        engine: an :class:`engine.protocol.EngineClient`.
        kind: ``"served"`` (the page's engine), ``"variant"`` (a second engine) or ``"remote"``.
        label: what the table shows (``"served engine (int4, KV bf16)"``).
        weights, kv_cache_dtype: the variant it serves (``""`` when unknown: a remote server).
    """

    engine: object
    kind: str
    label: str
    weights: str = ""
    kv_cache_dtype: str = ""


class EngineSet:
    """The served engine, its variants and an optional remote peer, shared by every page.

    Args:
        engine: the served :class:`engine.protocol.EngineClient`.
        peer: a remote engine beside it (the "this engine vs the remote server" preset), or None.
        factory: ``(served engine, weights, kv_cache_dtype) -> engine`` for a variant (default:
            :func:`engine.experiments.variant_engine.variant_engine` on the served engine's
            ``experiment_model()``; tests pass a fake).
    """

    def __init__(self, engine, peer=None, factory=None) -> None:
        self.engine = engine
        self.peer = peer
        self._factory = factory
        self._variants: OrderedDict[tuple[str, str], object] = OrderedDict()
        self._busy: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._loading = threading.Lock()  # one variant loads at a time

    @property
    def remote(self) -> bool:
        """The served engine is a remote server (only sampling settings compare)."""
        return bool(self.engine.capabilities.remote)

    def served_variant(self) -> tuple[str, str]:
        """``(weights, kv_cache_dtype)`` of the served engine, in the options' names
        (``"int4"``, ``"bf16"``; ``"fp8"``)."""
        info = self.engine.info
        kv = info.kv_dtype or info.dtype or ""
        return (info.weights or info.dtype or ""), KV_NAMES.get(kv, kv)

    def key(self, s: SideSettings) -> tuple[str, str] | None:
        """The variant ``(weights, kv_cache_dtype)`` a side needs, ``None`` when the served
        engine serves it. A KV dtype of ``auto`` means the served engine's beside its weights,
        and the compute dtype of other weights (the engine's ``auto``)."""
        weights, kv = self.served_variant()
        want_w = weights if s.weights == "auto" else s.weights
        if want_w != weights:
            return want_w, s.kv_cache_dtype
        want_kv = kv if s.kv_cache_dtype == "auto" else s.kv_cache_dtype
        return None if want_kv == kv else (want_w, want_kv)

    def place(self, s: SideSettings) -> Placement:
        """Where side ``s`` runs, loading its variant engine on first use (seconds).

        Raises:
            ValueError: a remote side without a peer server.
            ModelLoadError: the variant's weights can't be loaded here.
        """
        if s.engine == "remote":
            if self.peer is None:
                raise ValueError("engine remote needs a remote server beside this page")
            return Placement(self.peer, "remote", f"remote server ({self.peer.info.name})")
        weights, kv = self.served_variant()
        key = self.key(s)
        if key is None:
            return Placement(self.engine, "served", f"served engine ({weights}, KV {kv})", weights, kv)
        eng = self._variant(key)
        shown_kv = KV_NAMES.get(eng.info.kv_dtype, eng.info.kv_dtype)
        return Placement(eng, "variant", f"second engine ({key[0]}, KV {shown_kv})", *key)

    def _variant(self, key: tuple[str, str]):
        with self._lock:
            eng = self._variants.get(key)
            if eng is not None:
                self._variants.move_to_end(key)
                self._busy[key] = self._busy.get(key, 0) + 1
                return eng
        with self._loading:
            with self._lock:
                eng = self._variants.get(key)
            if eng is None:
                factory = self._factory or _default_factory
                eng = factory(self.engine, *key)
            with self._lock:
                self._variants[key] = eng
                self._variants.move_to_end(key)
                self._busy[key] = self._busy.get(key, 0) + 1
                old = self._evictable()
        for e in old:
            e.shutdown()
        return eng

    def _evictable(self) -> list:
        """Variants beyond :data:`MAX_VARIANTS`, least recently used first, that no side runs on
        now (called under the lock; they are removed and returned for shutting down)."""
        out = []
        for k in list(self._variants):
            if len(self._variants) - len(out) <= MAX_VARIANTS:
                break
            if not self._busy.get(k):
                out.append(self._variants.pop(k))
                self._busy.pop(k, None)
        return out

    def done(self, placement: Placement) -> None:
        """A side that ran on ``placement`` has ended (its variant may be shut down later)."""
        if placement.kind != "variant":
            return
        key = (placement.weights, placement.kv_cache_dtype)
        with self._lock:
            if self._busy.get(key):
                self._busy[key] -= 1

    def variants(self) -> list[tuple[tuple[str, str], object]]:
        """The variant engines kept now, oldest first."""
        with self._lock:
            return list(self._variants.items())

    def shutdown(self) -> None:
        """Shut down every variant engine (the served engine and the peer are the caller's)."""
        with self._lock:
            engines, self._variants = list(self._variants.values()), OrderedDict()
        for e in engines:
            e.shutdown()


def _default_factory(served, weights: str, kv_cache_dtype: str):
    from engine.experiments.variant_engine import variant_engine

    return variant_engine(served.experiment_model(), weights, kv_cache_dtype)
