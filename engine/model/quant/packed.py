"""bf16 linear layers on oneDNN's pre-packed weights (CPU).

``F.linear`` on bf16 CPU tensors calls oneDNN, which reorders the weight ``[N, K]`` into its
blocked layout on every call. Reordering once, as the layer loads
(``torch.ops.mkldnn._reorder_linear_weight``), and multiplying with
``torch.ops.mkldnn._linear_pointwise`` gives the same bits as ``F.linear`` (the same kernel,
the same reduction order; checked by :func:`pack_model` on every model it packs) in less time.
Measured on the embedded model's shapes (2-core AVX-512-bf16 EPYC, batch 1): 576×1,536 in
33 µs against 61 µs, 576×576 in 22 µs against 34 µs, the 49,152×576 LM head shape 2.2 ms
against 3.6 ms. The packed rows are also batch-invariant: a row's bits are the same for 1 to
32 rows (the decode step's batch buckets). Inductor does the same reorder when it freezes a
graph (its ``mkldnn_fusion`` pass); doing it here serves the eager path (prefill, the eager
decode step) and the compiled step alike without freezing.

The packed tensor is opaque (``torch._mkldnn`` layout), so it is not a buffer:
:func:`engine.model.accounting.weight_bytes` counts it through :attr:`PackedLinear.packed_bytes`.
The compiled decode step reaches the kernel through the custom op
``playground::packed_linear`` (inductor lowers ``_linear_pointwise`` only for frozen
constants, so the op keeps the call opaque to it).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from engine.model.quant import fused

_LIB = torch.library.Library("playground", "FRAGMENT")
_LIB.define("packed_linear(Tensor x, Tensor weight, Tensor? bias, int out_features) -> Tensor")


def _packed_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                   out_features: int) -> torch.Tensor:
    if ONE_ROW_AS_TWO and x.shape[0] == 1:      # computed as two rows (see ONE_ROW_AS_TWO)
        return torch.ops.mkldnn._linear_pointwise(x.expand(2, -1).contiguous(), weight, bias,
                                                  "none", [], "")[:1]
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


ONE_ROW_AS_TWO = True
"""A one-row product runs as two copies of the row. oneDNN takes another path for one row (a
matrix-vector kernel) than for two or more, with another order of the sum: on the AVX-512-bf16
EPYC a 576 × 1,536 product's row differed in the last bit between 1 row and 2-512 rows, so a
greedy answer alone (batch 1) could part from the same request beside others (4 of 8 did,
2026-12-02). From two rows up the row's bits are the same at every count checked (2-512), and two
rows cost what one does (docs/performance.md, "Measurements behind the constants")."""


for _key in ("CPU", "MkldnnCPU"):
    _LIB.impl("packed_linear", _packed_linear, _key)


@torch.library.register_fake("playground::packed_linear")
def _(x, weight, bias, out_features):
    return x.new_empty(x.shape[0], out_features)


@functools.lru_cache(maxsize=None)
def packing_available() -> bool:
    """Whether this CPU and PyTorch run oneDNN's packed bf16 product (tried once, tiny)."""
    try:
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return False
        w = torch.randn(32, 64, dtype=torch.bfloat16)
        x = torch.randn(3, 64, dtype=torch.bfloat16)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 1)
        return torch.equal(torch.ops.playground.packed_linear(x, packed, None, 32), F.linear(x, w))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


PACK_TIED_HEAD = True
"""Pack an LM head tied to the input embedding as well, at the price of a second copy of the
table (shown in the memory panel): the vocabulary-wide head is the largest product of a small
model's step, and packed it runs markedly faster at every batch size, worth more than the
memory (figures in docs/performance.md, "Measurements behind the constants")."""


class PackedLinear(nn.Module):
    """``y = x Wᵀ + b`` for a bf16 ``W [N, K]`` held in oneDNN's packed layout.

    Args:
        linear: the ``nn.Linear`` (bf16 weight, on CPU) it replaces; its dense weight is not kept.
        tied_copy: the weight is also the input embedding's table, which keeps its dense copy:
            the packed one is extra memory (counted in ``packed_bytes``) but no extra parameters
            (``num_weights`` is 0).

    Attributes:
        packed_bytes: bytes of the packed weight (``N × K × 2``) plus the bias's.
    """

    def __init__(self, linear: nn.Linear, tied_copy: bool = False):
        super().__init__()
        self.tied_copy = tied_copy
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach()
        self.weight_packed = torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), 1)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())
        self.packed_bytes = w.numel() * w.element_size()

    @property
    def num_weights(self) -> int:
        """Logical weight elements ``N × K`` (for parameter counts); 0 for a tied copy."""
        return 0 if self.tied_copy else self.in_features * self.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., K]`` (bf16) → ``[..., N]`` bf16."""
        x2 = x.reshape(-1, self.in_features)
        y = torch.ops.playground.packed_linear(x2, self.weight_packed, self.bias, self.out_features)
        return y.view(*x.shape[:-1], self.out_features)

    def _apply(self, fn, recurse=True):
        """The packed layout lives on the CPU in bf16: moving or casting the module is refused
        rather than silently dropping the weight."""
        probe = fn(torch.empty(0, dtype=torch.bfloat16))
        if probe.device.type != "cpu" or probe.dtype != torch.bfloat16:
            raise RuntimeError("PackedLinear holds a CPU bf16 packed weight: load the model "
                               "again for another device or dtype")
        return super()._apply(fn, recurse)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN packed bf16"


def pack_model(model: nn.Module) -> list[str]:
    """Replace a bf16 CPU model's decoder linear layers by :class:`PackedLinear`, in place.

    q/k/v and gate/up are stacked first (:mod:`.fused`, as the quantized paths do), so a block
    makes three products instead of seven. An LM head tied to the input embedding is packed
    too when :data:`PACK_TIED_HEAD` says so: the embedding keeps its dense table for the lookup,
    so the table is held twice (the copy's bytes are counted).

    Returns:
        Notes for the page (why nothing was packed, if so).

    Raises:
        RuntimeError: a packed layer's product differs from ``F.linear``'s bits on a probe
            input (the packing would change the model's answers).
    """
    if not packing_available():
        return ["bf16 weights: oneDNN's packed bf16 product is not available here; F.linear runs"]
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    tied = isinstance(head, nn.Linear) and isinstance(embed, nn.Embedding) and \
        head.weight.data_ptr() == embed.weight.data_ptr()
    for parent in list(model.modules()):
        for names in fused.GROUPS:
            if fused.fusable(parent, names) and all(
                    getattr(parent, n).weight.dtype == torch.bfloat16 for n in names):
                mods = [getattr(parent, n) for n in names]
                stacked = nn.Linear(mods[0].in_features, sum(m.out_features for m in mods),
                                    bias=False, device="meta")
                stacked.weight = nn.Parameter(torch.cat([m.weight.detach() for m in mods]),
                                              requires_grad=False)
                fused.install(parent, names, _checked(stacked), [m.out_features for m in mods])
    for name, m in list(model.named_modules()):
        if isinstance(m, nn.Linear) and m.weight.dtype == torch.bfloat16 and \
                (PACK_TIED_HEAD or not (m is head and tied)):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child,
                    _checked(m, tied_copy=m is head and tied))
    return []


def _checked(linear: nn.Linear, tied_copy: bool = False) -> PackedLinear:
    """``PackedLinear(linear)``, after checking its bits against ``F.linear`` on 2 and 5 rows,
    and a single row against the first of two (:data:`ONE_ROW_AS_TWO`)."""
    packed = PackedLinear(linear, tied_copy)
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for rows in (2, 5):
            x = torch.randn(rows, linear.in_features, generator=g).to(torch.bfloat16)
            if not torch.equal(packed(x), F.linear(x, linear.weight, linear.bias)) or \
                    not torch.equal(packed(x[:1]), packed(x)[:1]):
                raise RuntimeError(f"packed bf16 product differs from F.linear for a "
                                   f"{linear.out_features}x{linear.in_features} layer")
    return packed
