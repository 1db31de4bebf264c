"""4-bit weight-only linear layers (group-wise, asymmetric) on PyTorch's int4 matrix kernels.

A weight ``W [N, K]`` (N outputs, K inputs) is stored as 4-bit codes ``q`` in 0..15 and, for every
group of ``G`` consecutive inputs of one output row, a bf16 ``scale`` and ``zero``; the kernels
compute with ``w = (q - 8) · scale + zero`` (PyTorch's "tinygemm" convention). An affine block
``w = d · q + m`` (GGUF's Q4_1, or a min/max quantization) is the same thing with
``scale = d`` and ``zero = m + 8 · d``.

Kernels (bf16 activations in and out):

- CPU: ``torch.ops.aten._weight_int4pack_mm_for_cpu(x [M, K], packed, G, scales_and_zeros)``,
  weights packed by ``torch.ops.aten._convert_weight_to_int4pack_for_cpu(q_int32 [N, K], 8)``
  into ``uint8 [N, K/2]``; scales_and_zeros ``[K/G, N, 2]``.
- CUDA: ``torch.ops.aten._weight_int4pack_mm(x, packed, G, scales_and_zeros)``, weights packed
  by ``torch.ops.aten._convert_weight_to_int4pack(q_uint8 [N, K/2], inner_k_tiles)`` from
  two codes per byte (even column in the high nibble).

- CPU with AVX-512-bf16: the engine's own kernel (:mod:`.int4_kernel`), the same codes,
  scales and zeros in its own layout, for layers whose outputs are a multiple of 32: bound by
  the weights' bytes at a few rows and by bf16 arithmetic at many, where PyTorch's kernel grows
  with every row (30 layers' products at 8 rows: 8-11 ms against 16 ms).

One kernel serves a layer at every row count (prefill chunks and decode steps alike), so a
row's bits never depend on how many rows share the call. Switching to a dequantized bf16 GEMM
for large chunks was measured and dropped: unpacking the codes alone took about 9 ms per layer.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from engine.model.quant import int4_kernel

GROUP_SIZE = 32
_MM_CPU = torch.ops.aten._weight_int4pack_mm_for_cpu  # looked up once: 120 calls per decode step
_MM_BF16DOT = int4_kernel.int4_mm
CPU_BLOCK_N = 64  # rows per tile of the CPU packed layout (see :func:`unpack_cpu`)


def check_shape(name: str, out_features: int, in_features: int, group_size: int = GROUP_SIZE) -> None:
    """Refuse a weight the int4 kernels can't take, naming the layer and the dimension.

    Raises:
        ValueError: ``in_features`` is not a multiple of the group size, or ``out_features`` not a
            multiple of 16 (the CPU packing's tile).
    """
    if in_features % group_size:
        raise ValueError(f"weights=int4: {name} has {in_features} inputs, not a multiple of the "
                         f"group size {group_size}; use weights=int8 or a float dtype")
    if out_features % 16:
        raise ValueError(f"weights=int4: {name} has {out_features} outputs, not a multiple of 16 "
                         "(the int4 kernels' tile); use weights=int8 or a float dtype")


def quantize_groups(weight: torch.Tensor, group_size: int = GROUP_SIZE):
    """Asymmetric min/max quantization of ``weight [N, K]`` in groups of ``group_size`` inputs.

    Per group: ``d = (max - min) / 15``, ``q = round((w - min) / d)`` clipped to 0..15, so
    ``w ≈ d · q + min`` (the rule of GGUF's Q4_1, ``gguf.quants.Q4_1.quantize_blocks``).

    Returns:
        ``(q uint8 [N, K], d float32 [N, K/G], m float32 [N, K/G])``.
    """
    n, k = weight.shape
    w = weight.detach().float().reshape(n, k // group_size, group_size)
    lo, hi = w.amin(-1), w.amax(-1)
    d = (hi - lo) / 15
    inv = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    q = ((w - lo[..., None]) * inv[..., None] + 0.5).floor().clamp_(0, 15).to(torch.uint8)
    return q.reshape(n, k), d, lo


def unpack_cpu(packed: torch.Tensor, n: int, k: int, rows: torch.Tensor | None = None) -> torch.Tensor:
    """4-bit codes back out of the CPU kernel's packed layout.

    The layout (``_convert_weight_to_int4pack_for_cpu``, PyTorch 2.13, read off by probing and
    checked by :func:`cpu_layout_ok`): output rows in tiles of 64; for each tile and each input
    ``k``, 32 bytes, byte ``j`` holding row ``j`` (low nibble) and row ``32 + j`` (high nibble). A
    last tile of ``r < 64`` rows holds, per input, ``r/2`` bytes of adjacent row pairs
    (``2j`` low, ``2j + 1`` high).

    Args:
        packed: ``uint8 [N, K/2]``.
        n, k: the weight's shape.
        rows: ``[R]`` int64 row ids to unpack (all rows when ``None``).

    Returns:
        ``uint8 [N, K]`` or ``[R, K]`` codes in 0..15.
    """
    flat = packed.reshape(-1)
    tiles, tail = divmod(n, CPU_BLOCK_N)
    main = flat[:tiles * k * 32].view(tiles, k, 32)
    rest = flat[tiles * k * 32:].view(k, tail // 2) if tail else None
    if rows is None:
        parts = []
        if tiles:
            parts.append(torch.cat([main & 15, main >> 4], 2).permute(0, 2, 1).reshape(tiles * 64, k))
        if tail:
            parts.append(torch.stack([rest & 15, rest >> 4], -1).reshape(k, tail).T)
        return torch.cat(parts) if len(parts) > 1 else parts[0].contiguous()
    tile, j = rows // CPU_BLOCK_N, rows % CPU_BLOCK_N
    if not tail:
        b = main[tile, :, j % 32]                                   # [R, K]
        return torch.where((j < 32)[:, None], b & 15, b >> 4)
    in_main = rows < tiles * CPU_BLOCK_N
    bm = main[tile.clamp(max=max(tiles - 1, 0)), :, j % 32] if tiles else None
    t = (rows - tiles * CPU_BLOCK_N).clamp(min=0)
    bt = rest[:, t // 2].T                                          # [R, K]
    code_t = torch.where((t % 2 == 0)[:, None], bt & 15, bt >> 4)
    if bm is None:
        return code_t
    code_m = torch.where((j < 32)[:, None], bm & 15, bm >> 4)
    return torch.where(in_main[:, None], code_m, code_t)


@functools.lru_cache(maxsize=None)
def cpu_layout_ok() -> bool:
    """Whether :func:`unpack_cpu` reads this PyTorch's CPU packing correctly (checked once on
    random codes, including a partial tile). If not, dequantization goes through the kernel."""
    g = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (80, 64), generator=g, dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 8)
    rows = torch.tensor([0, 31, 32, 63, 64, 79])
    return (torch.equal(unpack_cpu(packed, 80, 64).int(), q)
            and torch.equal(unpack_cpu(packed, 80, 64, rows).int(), q[rows]))


def _inner_k_tiles(k: int) -> int | None:
    """The CUDA packing's inner K tiles: the largest of 8, 4, 2 with ``K`` a multiple of 16 × it."""
    return next((t for t in (8, 4, 2) if k % (16 * t) == 0), None)


class Int4Linear(nn.Module):
    """``y = x Wᵀ + b`` with ``W`` stored as packed 4-bit codes and per-group bf16 scales and zeros.

    Buffers (their bytes are what :func:`engine.model.accounting.weight_bytes` counts):
    ``weight_packed`` and ``scales_and_zeros`` in the layout of the kernel that runs the layer
    (:attr:`layout`): ``"cpu-bf16dot"`` (:mod:`.int4_kernel`: ``uint8 [N/32, K/2, 32]`` and
    ``bf16 [N/32, K/G, 2, 32]``), ``"cpu-aten"`` (``uint8 [N, K/2]`` and ``bf16 [K/G, N, 2]``)
    or ``"cuda-aten"`` (the CUDA kernel's tiled layout and ``bf16 [K/G, N, 2]``); the same bytes
    in each. ``bias`` is ``[N]`` or absent.
    Activations of any float dtype go in; the kernel runs in bf16; the output has the input's
    dtype.

    Args:
        in_features, out_features: ``K`` and ``N``.
        q: ``uint8 [N, K]`` codes in 0..15; d, m: ``[N, K/G]`` with ``w = d · q + m``.
        bias: ``[N]`` or ``None``.
        group_size: inputs per group (32).
    """

    def __init__(self, in_features: int, out_features: int, q: torch.Tensor, d: torch.Tensor,
                 m: torch.Tensor, bias: torch.Tensor | None = None, group_size: int = GROUP_SIZE):
        super().__init__()
        check_shape("layer", out_features, in_features, group_size)
        self.in_features, self.out_features, self.group_size = in_features, out_features, group_size
        dev = q.device
        d32, m32 = d.float(), m.float()
        sz = torch.stack([d32, m32 + 8 * d32], -1).transpose(0, 1).to(torch.bfloat16)  # [K/G, N, 2]
        if dev.type == "cuda":
            tiles = _inner_k_tiles(in_features)
            if tiles is None:
                raise ValueError(f"weights=int4: {in_features} inputs are not a multiple of 32 for "
                                 "the CUDA int4 kernel")
            q8 = q.to(torch.uint8)
            pairs = (q8[:, ::2] << 4 | q8[:, 1::2]).contiguous()
            packed = torch.ops.aten._convert_weight_to_int4pack(pairs, tiles)
            self.layout = "cuda-aten"
        elif int4_kernel.applies(out_features, group_size):
            packed, sz = int4_kernel.pack(q, sz)
            self.layout = "cpu-bf16dot"
        else:
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 8)
            self.layout = "cpu-aten"
        self.register_buffer("weight_packed", packed)
        self.register_buffer("scales_and_zeros", sz.contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self._bind()

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = GROUP_SIZE) -> "Int4Linear":
        """Quantize an ``nn.Linear`` (min/max per group, :func:`quantize_groups`)."""
        q, d, m = quantize_groups(linear.weight, group_size)
        return cls(linear.in_features, linear.out_features, q, d, m, linear.bias, group_size)

    @property
    def num_weights(self) -> int:
        """Logical weight elements ``N × K`` (for parameter counts)."""
        return self.in_features * self.out_features

    def _bind(self) -> None:
        """Keep the kernel and its tensors in one plain attribute: a decode step makes about 120
        of these calls, and each buffer read through ``nn.Module.__getattr__`` costs a lookup."""
        packed, sz = self.weight_packed, self.scales_and_zeros
        if self.layout == "cpu-bf16dot":
            self._call = (_MM_BF16DOT, (packed, sz), self.bias)
        else:
            mm = torch.ops.aten._weight_int4pack_mm if self.layout == "cuda-aten" else _MM_CPU
            self._call = (mm, (packed, self.group_size, sz), self.bias)

    def _kernel(self, x2: torch.Tensor) -> torch.Tensor:
        mm, args, _ = self._call
        return mm(x2, *args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., K]`` → ``[..., N]`` in ``x``'s dtype."""
        mm, args, bias = self._call
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype != torch.bfloat16:
            x2 = x2.to(torch.bfloat16)
        if not x2.is_contiguous():
            x2 = x2.contiguous()
        y = mm(x2, *args)
        if bias is not None:
            y = y + bias.to(y.dtype)
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)

    def dequantize(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The bf16 weight ``(q - 8) · scale + zero``: ``[N, K]``, or ``[R, K]`` for ``rows [R]``."""
        n, k, g = self.out_features, self.in_features, self.group_size
        fast = self.layout == "cpu-bf16dot" or (self.layout == "cpu-aten" and cpu_layout_ok())
        if fast:
            if self.layout == "cpu-bf16dot":
                q, sz = int4_kernel.unpack(self.weight_packed, self.scales_and_zeros, rows)
            else:
                q = unpack_cpu(self.weight_packed, n, k, rows)
                sz = self.scales_and_zeros if rows is None else self.scales_and_zeros[:, rows]
            r = q.shape[0]
            s = sz[..., 0].T.reshape(r, k // g, 1)
            z = sz[..., 1].T.reshape(r, k // g, 1)
            w = torch.addcmul(z, q.view(r, k // g, g).to(torch.bfloat16) - 8, s)
            return w.reshape(r, k)
        eye = torch.eye(k, dtype=torch.bfloat16, device=self.weight_packed.device)
        w = self._kernel(eye).T            # the kernel's own weights, one input at a time
        return w if rows is None else w[rows]

    def _apply(self, fn, recurse=True):
        """``.to(device)`` moves the buffers; a dtype cast (``model.to(torch.float32)``) leaves
        the scales in bf16, the kernels' dtype. The packed layout belongs to one device type."""
        kind = self.weight_packed.device.type
        super()._apply(fn, recurse)
        if self.weight_packed.device.type != kind:
            raise RuntimeError(f"Int4Linear packed for {kind} can't move to "
                               f"{self.weight_packed.device.type}: load the model on that device")
        self.scales_and_zeros = self.scales_and_zeros.to(torch.bfloat16)
        self._bind()
        return self

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"group_size={self.group_size}, bias={self.bias is not None}")
