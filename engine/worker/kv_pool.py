"""The KV block pool: every layer's keys and values for all blocks, allocated once."""

from __future__ import annotations

import torch

from engine.config import KV_CACHE_DTYPES

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite e4m3 value (torch.finfo(torch.float8_e4m3fn).max)


def resolve_kv_dtype(option: str, model_dtype: torch.dtype) -> torch.dtype:
    """The storage dtype of the KV cache for a ``kv_cache_dtype`` option.

    Raises:
        ValueError: an unknown option (the message names the field).
    """
    table = {"auto": model_dtype, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": FP8}
    if option not in table:
        raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, got {option!r}")
    return table[option]


def kv_dtype_name(dtype: torch.dtype) -> str:
    """``torch.float8_e4m3fn`` → ``"fp8 (e4m3)"``, ``torch.bfloat16`` → ``"bfloat16"``."""
    return "fp8 (e4m3)" if dtype == FP8 else str(dtype).replace("torch.", "")


class KVPool:
    """Preallocated K and V tensors shared by all sequences through their block tables.

    Per layer, K and V have shape ``[num_blocks × block_size, kv_heads, head_dim]``; token slot
    ``s`` of block ``b`` is row ``b × block_size + s``. The tensors are zero-filled at creation,
    so their memory is committed up front (as a serving engine reserves its KV cache).

    The storage dtype may differ from the model's (``compute_dtype``): :meth:`write` converts
    new keys and values on the way in and :meth:`gather` converts them back, so attention always
    computes in the model's dtype. In fp8 a value ``x`` is stored as ``x / scale`` clipped to
    ±448 and read back as ``stored × scale``, with one scale per layer for K and one for V
    (``k_scale``, ``v_scale``; 1.0 until :meth:`set_scales`), as vLLM's ``k_scale``/``v_scale``.
    Those 2 × layers floats are not KV cache bytes: :attr:`nbytes` counts the K and V tensors,
    so the measured bytes equal the KV formula with 1 byte per element.

    Args:
        layers, kv_heads, head_dim: from the model config.
        num_blocks, block_size: pool geometry.
        dtype: storage dtype (the model's, bf16, fp16 or ``torch.float8_e4m3fn``).
        device: the model's device.
        compute_dtype: the model's dtype (defaults to ``dtype``; required for fp8).
    """

    def __init__(self, layers: int, kv_heads: int, head_dim: int, num_blocks: int,
                 block_size: int, dtype: torch.dtype, device, compute_dtype: torch.dtype | None = None):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.dtype = dtype
        self.compute_dtype = compute_dtype or (torch.float32 if dtype == FP8 else dtype)
        self.fp8 = dtype == FP8
        shape = (num_blocks * block_size, kv_heads, head_dim)
        # fp8 lives in uint8 storage: CPU index_copy_/index_select have no float8 kernels
        store = torch.uint8 if self.fp8 else dtype
        self.k = [torch.zeros(shape, dtype=store, device=device) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=store, device=device) for _ in range(layers)]
        self.k_scale = [1.0] * layers
        self.v_scale = [1.0] * layers
        self.bytes_per_token = 2 * layers * kv_heads * head_dim * self.k[0].element_size()

    def set_scales(self, k_amax: list[float], v_amax: list[float], headroom: float = 2.0) -> None:
        """fp8 scales from the largest |K| and |V| seen per layer: ``scale = amax × headroom /
        448``, so values up to ``headroom`` times the calibration's largest still fit."""
        self.k_scale = [max(a, 1e-6) * headroom / FP8_MAX for a in k_amax]
        self.v_scale = [max(a, 1e-6) * headroom / FP8_MAX for a in v_amax]

    def layer(self, idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V pool tensors of layer ``idx`` (raw storage: ``uint8`` bytes in fp8)."""
        return self.k[idx], self.v[idx]

    def write(self, idx: int, slots: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        """Store new keys and values of layer ``idx`` at pool rows ``slots``.

        Args:
            slots: ``[T]`` int64 pool rows.
            key, value: ``[T, kv_heads, head_dim]`` in the compute dtype.
        """
        self.k[idx].index_copy_(0, slots, self._encode(key, self.k_scale[idx]))
        self.v[idx].index_copy_(0, slots, self._encode(value, self.v_scale[idx]))

    def _encode(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        if self.fp8:
            return (x.float() / scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8).view(torch.uint8)
        return x if x.dtype == self.dtype else x.to(self.dtype)

    def decode(self, idx: int, which: str, stored: torch.Tensor) -> torch.Tensor:
        """Gathered rows of layer ``idx``'s K (``which="k"``) or V back in the compute dtype."""
        if self.fp8:
            scale = self.k_scale[idx] if which == "k" else self.v_scale[idx]
            return (stored.view(FP8).to(self.compute_dtype) * scale)
        return stored if stored.dtype == self.compute_dtype else stored.to(self.compute_dtype)

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy whole blocks ``src -> dst`` in every layer's K and V (copy-on-write of a block
        that forked sequences share), in the given order.

        Args:
            pairs: ``(src, dst)`` block ids.
        """
        if not pairs:
            return
        bs = self.block_size
        dev = self.k[0].device
        src = torch.tensor([s * bs + i for s, _ in pairs for i in range(bs)], device=dev)
        dst = torch.tensor([d * bs + i for _, d in pairs for i in range(bs)], device=dev)
        for t in self.k + self.v:
            t.index_copy_(0, dst, t.index_select(0, src))

    @property
    def nbytes(self) -> int:
        """Bytes of all pool tensors (measured from the tensors)."""
        return sum(t.nbytes for t in self.k) + sum(t.nbytes for t in self.v)

    @property
    def block_bytes(self) -> int:
        """Bytes one block holds across all layers, K and V."""
        return self.nbytes // self.num_blocks

    @staticmethod
    def blocks_for_budget(budget_bytes: int, bytes_per_token: int, block_size: int) -> int:
        """How many blocks fit in ``budget_bytes``."""
        return max(1, budget_bytes // (bytes_per_token * block_size))
