"""The ``weights`` option: how the model's matrices are stored, and which dtype computes.

Choices (:data:`WEIGHTS`):

- ``fp32``, ``bf16``, ``fp16``: the whole model in that float dtype (``fp16`` on a CPU only
  where PyTorch runs it; checked with a tiny product).
- ``int8``: weight-only, symmetric, one scale per output channel (:mod:`.int8`).
- ``int4``: weight-only, group-wise (32 inputs), asymmetric (:mod:`.int4`); for the embedded
  GGUF the file's own Q4_1 blocks (:mod:`.gguf_q4`).
- ``auto``: ``int4`` for the embedded model on CPU when ``dtype`` is ``auto`` (3.2× the fp32
  decode speed at batch 1, perplexity +0.3%: the README's Performance section); otherwise the
  float dtype of ``dtype``.

Quantized weights keep norms, biases and activations in a float *compute dtype*: the ``dtype``
option when given, else bf16 on CPU (the int4/int8 kernels take bf16 activations, so the model
skips a conversion at every layer) and ``resolve_dtype``'s choice on GPUs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

WEIGHTS = ("auto", "fp32", "bf16", "fp16", "int8", "int4")
FLOAT_WEIGHTS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
QUANTIZED = ("int8", "int4")
QUANT_CPU_DTYPE = torch.bfloat16
"""Compute dtype of quantized weights on CPU when ``dtype`` is ``auto``."""


@dataclass(frozen=True)
class WeightsChoice:
    """The resolved ``weights`` option.

    Attributes:
        weights: ``fp32``, ``bf16``, ``fp16``, ``int8`` or ``int4``.
        dtype: the compute dtype (of activations, norms, and of float weights).
    """

    weights: str
    dtype: torch.dtype

    @property
    def quantized(self) -> bool:
        """Weights stored as integer codes (int8 or int4)."""
        return self.weights in QUANTIZED


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` → ``"bf16"`` (the option's names)."""
    return {v: k for k, v in FLOAT_WEIGHTS.items()}.get(dtype, str(dtype).replace("torch.", ""))


@functools.lru_cache(maxsize=None)
def cpu_fp16_ok() -> bool:
    """Whether this PyTorch computes an fp16 product and attention on CPU."""
    try:
        x = torch.ones(2, 32, dtype=torch.float16)
        torch.nn.functional.linear(x, x)
        q = torch.ones(1, 1, 2, 32, dtype=torch.float16)
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
        return True
    except RuntimeError:
        return False


def resolve_weights(weights: str, dtype: str, resolved: torch.dtype, device: str,
                    embedded: bool) -> WeightsChoice:
    """Turn the ``weights`` and ``dtype`` options into a :class:`WeightsChoice`.

    Args:
        weights: one of :data:`WEIGHTS`.
        dtype: the ``dtype`` option as given (``auto`` or a name).
        resolved: ``resolve_dtype(dtype, device)``.
        device: the resolved device (``cpu``, ``cuda:0``...).
        embedded: the model is the embedded GGUF.

    Raises:
        ValueError: an unknown choice, float weights that contradict an explicit ``dtype``, or
            fp16 on a CPU that can't run it; the message names the field.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
    cpu = device == "cpu"
    if weights == "auto":
        if embedded and cpu and dtype == "auto":
            return WeightsChoice("int4", QUANT_CPU_DTYPE)
        weights = dtype_name(resolved)
        if weights not in FLOAT_WEIGHTS:
            raise ValueError(f"dtype {dtype!r} is not a float dtype for the weights")
    if weights in FLOAT_WEIGHTS:
        wanted = FLOAT_WEIGHTS[weights]
        if dtype != "auto" and resolved != wanted:
            raise ValueError(f"weights={weights} and dtype={dtype} disagree: float weights set the "
                             f"model's dtype; leave dtype as auto")
        if wanted == torch.float16 and cpu and not cpu_fp16_ok():
            raise ValueError("weights=fp16 is not supported on this CPU by this PyTorch; "
                             "use weights=bf16 or fp32 (fp16 is meant for GPUs)")
        return WeightsChoice(weights, wanted)
    if device == "mps":
        raise ValueError(f"weights={weights} needs a CPU or a CUDA GPU (PyTorch has no int4/int8 "
                         "weight kernels on MPS); use weights=fp16")
    compute = resolved if (dtype != "auto" or not cpu) else QUANT_CPU_DTYPE
    return WeightsChoice(weights, compute)
