"""Weight-stationary linear layers for batched decode steps on CPU.

A decode step of ``B`` sequences multiplies a ``[B, in]`` activation by every weight matrix
``W [out, in]`` of the model: ``y = x Wᵀ``. With ``B`` between 2 and a few dozen, the CPU
BLAS's path for that layout (a short, wide left operand) reads the weights at well under half
the memory bandwidth the same product reaches as ``(W xᵀ)ᵀ``, where the weights are the large
left operand streamed once. Both give the same matrix up to floating-point rounding order.
On whole decode steps of the embedded model that made 2 to 4 sequences faster and from 5 on
the gain was erratic (the BLAS picks other kernels there), so the layout is used up to
:data:`MAX_ROWS` rows only; the measurements are in docs/performance.md, "Measurements behind
the constants". ``python -m engine bench batch`` shows the effect on whole steps.

:class:`WeightStationaryLinear` applies that layout to every ``torch.nn.functional.linear``
call made on the current thread while it is active (a ``TorchFunctionMode``), so the model
code stays transformers' own and other threads (Hugging Face ``generate`` on the same model,
for instance) are untouched. The engine uses it only for decode-only steps of 2 or more
sequences on CPU: a single sequence keeps the exact kernels of ``generate`` (bit-identical
tokens), and prefill keeps them too. Only fp32 weights take it: bf16's oneDNN product reads
a short left operand well already, and gives a row the same bits whatever the number of rows,
which the other layout would break (a bf16 answer would then depend on whether 2-4 sequences
shared its step: 4 of 6 greedy prompts differed from their solo tokens through the tied LM
head before this rule).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

MAX_ROWS = 4
"""Most rows of a decode step that run the ``(W xᵀ)ᵀ`` layout: up to here it was faster on
every step measured, above it the gain was erratic (docs/performance.md, "Measurements behind
the constants")."""


def use_weight_stationary(device: torch.device, rows: int, decode_only: bool) -> bool:
    """Whether a step of ``rows`` packed tokens should run under :class:`WeightStationaryLinear`.

    Args:
        device: the model's device (only ``cpu`` benefits; GPU BLAS handles both layouts).
        rows: tokens in the packed step (``B`` for a decode-only step).
        decode_only: the step holds decode tokens only (prefill keeps ``generate``'s kernels).
    """
    return device.type == "cpu" and decode_only and 2 <= rows <= MAX_ROWS


def linear_weight_stationary(x: torch.Tensor, weight: torch.Tensor,
                             bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` computed as ``(W xᵀ)ᵀ + b``.

    Args:
        x: ``[..., in]`` activations.
        weight: ``[out, in]``.
        bias: ``[out]`` or ``None``.

    Returns:
        ``[..., out]``, contiguous (transformers reshapes projections with ``view``).
    """
    rows = x.numel() // x.shape[-1]
    y = torch.mm(weight, x.reshape(rows, x.shape[-1]).T).T
    if bias is not None:
        y = y + bias
    return y.contiguous().view(*x.shape[:-1], weight.shape[0])


class WeightStationaryLinear(TorchFunctionMode):
    """Within ``with WeightStationaryLinear():`` every ``F.linear`` of up to ``max_rows``
    rows of this thread runs as :func:`linear_weight_stationary`; other calls pass through.

    Args:
        max_rows: most rows (tokens) a product may have to take the weight-stationary layout.
    """

    def __init__(self, max_rows: int = MAX_ROWS):
        super().__init__()
        self.max_rows = max_rows
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, weight = args[0], args[1]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            if (x.dim() >= 2 and weight.dim() == 2 and x.device.type == "cpu"
                    and weight.dtype == torch.float32
                    and 2 <= x.numel() // x.shape[-1] <= self.max_rows):
                self.calls += 1
                return linear_weight_stationary(x, weight, bias)
        return func(*args, **kwargs)
