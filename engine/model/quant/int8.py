"""8-bit weight-only linear layers (symmetric, one scale per output channel).

``W [N, K]`` is stored as ``int8`` codes ``q`` and a scale per output row, ``w = q · s`` with
``s = max|W[n, :]| / 127`` and ``q = round(w / s)``. The product runs on
``torch.ops.aten._weight_int8pack_mm(x [M, K], q [N, K], s [N])`` with bf16 activations (with fp32
activations PyTorch 2.13's CPU kernel falls back to a path several times slower than the fp32
GEMM); large products on CPU dequantize to bf16 and use the bf16 GEMM.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_MM = torch.ops.aten._weight_int8pack_mm
DEQUANT_ROWS = 64
"""On CPU, products of at least this many rows dequantize the weight to bf16 (one conversion and
one multiply) and use the bf16 GEMM: at 64 / 512 rows one SmolLM2 layer took 2.5 / 9 ms that
way against 3.1 / 23 ms in the int8 kernel (1 core); below, the kernel wins (0.3 vs 1.4 ms at 4)."""


class Int8Linear(nn.Module):
    """``y = x Wᵀ + b`` with ``W`` as ``int8 [N, K]`` codes and a bf16 scale per output row.

    Buffers: ``weight_int8`` (``int8 [N, K]``), ``scales`` (``bf16 [N]``), ``bias`` (``[N]`` or
    absent). The output has the input's dtype.

    Args:
        q: ``int8 [N, K]``; s: ``[N]`` scales; bias: ``[N]`` or ``None``.
    """

    def __init__(self, q: torch.Tensor, s: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = q.shape
        self.register_buffer("weight_int8", q.to(torch.int8).contiguous())
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
        if x2.shape[0] >= DEQUANT_ROWS and x2.device.type == "cpu":
            y = F.linear(x2, self.dequantize())
        else:
            y = _MM(x2, q, s)
        if bias is not None:
            y = y + bias.to(y.dtype)
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)

    def dequantize(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The bf16 weight ``q · s``: ``[N, K]``, or ``[R, K]`` for ``rows [R]``."""
        q, s = self.weight_int8, self.scales
        if rows is not None:
            q, s = q[rows], s[rows]
        return q.to(torch.bfloat16) * s[:, None]

    def _apply(self, fn, recurse=True):
        """A dtype cast of the model leaves the scales in bf16 (the kernel's dtype)."""
        super()._apply(fn, recurse)
        self.scales = self.scales.to(torch.bfloat16)
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
