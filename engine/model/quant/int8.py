"""8-bit weight-only linear layers (symmetric, one scale per output channel).

``W [N, K]`` is stored as ``int8`` codes ``q`` and a scale per output row, ``w = q · s`` with
``s = max|W[n, :]| / 127`` and ``q = round(w / s)``. The product runs on
``torch.ops.aten._weight_int8pack_mm(x [M, K], q [N, K], s [N])`` with bf16 activations (with fp32
activations PyTorch 2.13's CPU kernel falls back to a path several times slower than the fp32
GEMM); large products on CPU dequantize to bf16 and use the bf16 GEMM.

On CPUs with AVX-512-bf16 (:mod:`.int4_kernel`, ``int8_mm``), layers whose outputs are a multiple
of 32 keep their codes in that kernel's layout and run on it at every row count: the embedded
model's int8 LM head (49,152 × 576, one thread) took 0.77 / 1.02 / 2.6 / 4.35 / 6.32 ms at 1 / 4 /
8 / 16 / 32 rows against PyTorch's kernel's 1.78 / 2.52 / 3.78 / 7.83 / 15.1 ms, and a row's bits
do not depend on the rows beside it (PyTorch's path switches to the bf16 GEMM at 64 rows).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.model.quant import int4_kernel

_MM = torch.ops.aten._weight_int8pack_mm
_MM_BF16DOT = int4_kernel.int8_mm
DEQUANT_ROWS = 64
"""On CPU, products of at least this many rows dequantize the weight to bf16 (one conversion and
one multiply) and use the bf16 GEMM: from about this many rows the conversion costs less than
the int8 kernel's slower large products; below, the kernel wins (docs/performance.md,
"Measurements behind the constants")."""


class Int8Linear(nn.Module):
    """``y = x Wᵀ + b`` with ``W`` as ``int8 [N, K]`` codes and a bf16 scale per output row.

    Buffers: ``weight_int8`` (``int8 [N, K]``, or ``int8 [N/32, K/2, 64]`` where
    :attr:`layout` is ``"cpu-bf16dot"``: the same bytes in :func:`.int4_kernel.pack_int8`'s
    order), ``scales`` (``bf16 [N]``), ``bias`` (``[N]`` or absent). The output has the input's
    dtype.

    Args:
        q: ``int8 [N, K]``; s: ``[N]`` scales; bias: ``[N]`` or ``None``.
    """

    def __init__(self, q: torch.Tensor, s: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = q.shape
        q = q.to(torch.int8)
        self.layout = "aten"
        if (q.device.type == "cpu" and self.out_features % int4_kernel.COLUMNS == 0
                and self.in_features % 4 == 0 and int4_kernel.available()):
            q, self.layout = int4_kernel.pack_int8(q), "cpu-bf16dot"
        self.register_buffer("weight_int8", q.contiguous())
        self.register_buffer("scales", s.to(torch.bfloat16).contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self._call = (self.weight_int8, self.scales, self.bias)   # plain attribute: no __getattr__

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int8Linear":
        """Quantize an ``nn.Linear`` per output channel (symmetric, absmax / 127)."""
        q, s = quantize_rows(linear.weight)
        return cls(q, s, linear.bias)

    @property
    def num_weights(self) -> int:
        """Logical weight elements ``N × K``."""
        return self.in_features * self.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., K]`` → ``[..., N]`` in ``x``'s dtype."""
        q, s, bias = self._call
        x2 = x.reshape(-1, self.in_features).to(torch.bfloat16)
        if self.layout == "cpu-bf16dot":
            y = _MM_BF16DOT(x2 if x2.is_contiguous() else x2.contiguous(), q, s)
        elif x2.shape[0] >= DEQUANT_ROWS and x2.device.type == "cpu":
            y = F.linear(x2, self.dequantize())
        else:
            y = _MM(x2, q, s)
        if bias is not None:
            y = y + bias.to(y.dtype)
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)

    def dequantize(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The bf16 weight ``q · s``: ``[N, K]``, or ``[R, K]`` for ``rows [R]``."""
        q, s = self.weight_int8, self.scales
        if self.layout == "cpu-bf16dot":
            q = int4_kernel.unpack_int8(q, rows)
            if rows is not None:
                s = s[rows]
        elif rows is not None:
            q, s = q[rows], s[rows]
        return q.to(torch.bfloat16) * s[:, None]

    def _apply(self, fn, recurse=True):
        """A dtype cast of the model leaves the scales in bf16 (the kernel's dtype)."""
        super()._apply(fn, recurse)
        self.scales = self.scales.to(torch.bfloat16)
        if self.layout == "cpu-bf16dot" and self.weight_int8.device.type != "cpu":
            # moved off the CPU: back to the [N, K] codes PyTorch's kernels read
            self.weight_int8 = int4_kernel.unpack_int8(self.weight_int8).contiguous()
            self.layout = "aten"
        self._call = (self.weight_int8, self.scales, self.bias)
        return self

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, per-channel int8"


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: ``s = max|w| / 127``, ``q = round(w / s)``.

    Returns:
        ``(q int8 [N, K], s float32 [N])``.
    """
    w = weight.detach().float()
    s = w.abs().amax(1) / 127
    s = torch.where(s == 0, torch.ones_like(s), s)
    q = torch.round(w / s[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, s
