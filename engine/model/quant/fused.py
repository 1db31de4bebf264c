"""Projections that read the same input computed as one product: q/k/v, and gate/up.

transformers' Llama-family blocks call ``q_proj(h)``, ``k_proj(h)`` and ``v_proj(h)`` one after
the other on the same tensor ``h`` (and ``gate_proj(x)``, ``up_proj(x)`` in the MLP). With
quantized weights each call is a kernel launch whose fixed cost is comparable to the work at
batch 1 (about 20 µs for a 576 × 576 int4 product on this CPU), so a group's weights are
stacked into one matrix (``[q; k; v]``: 960 × 576 for SmolLM2) and multiplied once; each member
module returns its columns of that product. The model code stays transformers' own: only the
``nn.Linear`` modules are replaced.

A member called with another tensor than the one the group last multiplied, or called twice,
computes the whole product again, so the answer is right whatever the calling order; the
saving needs the usual order only. (The input is recognised by identity: the group holds a
reference to it, so it can't be freed and its address reused meanwhile. Inference-mode
tensors carry no version counter, so a change in place between two members' calls would go
unseen; transformers' blocks make none.)
"""

from __future__ import annotations

import threading

import torch
from torch import nn

GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Sibling projections fused when all of them exist, take the same inputs and have no bias."""


class FusedGroup:
    """The stacked product of one group and the last input it was computed for.

    Args:
        layer: the quantized module holding the stacked weight (``out_features`` = sum of the
            members'); registered as a submodule of the first member only.
        sizes: each member's output features, in stacking order.
    """

    def __init__(self, layer: nn.Module, sizes: list[int]):
        self.layer = layer
        self.bounds = [(sum(sizes[:i]), sum(sizes[:i + 1])) for i in range(len(sizes))]
        self._last = threading.local()   # the engine thread and a generate() thread don't mix

    def output(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """Member ``index``'s output for ``x``: ``[..., size]``, a view of the stacked product."""
        last = self._last
        hit = getattr(last, "x", None) is x and index not in last.used
        if not hit:
            last.x, last.used = x, set()
            last.y = self.layer.forward(x)   # no hooks on it: skip Module.__call__'s cost
        last.used.add(index)
        lo, hi = self.bounds[index]
        y = last.y[..., lo:hi]
        if len(last.used) == len(self.bounds):   # every member served: let the product go
            last.x = last.y = None
        return y


class FusedMember(nn.Module):
    """One projection of a :class:`FusedGroup` (e.g. ``k_proj``), in place of its ``nn.Linear``.

    Args:
        group: the shared :class:`FusedGroup`; index: this member's place in it.
        in_features, out_features: the replaced layer's shape.
    """

    def __init__(self, group: FusedGroup, index: int, in_features: int, out_features: int):
        super().__init__()
        self.group, self.index = group, index
        self.in_features, self.out_features = in_features, out_features
        if index == 0:
            self.fused = group.layer      # counted and moved once, with the first member

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., K]`` → ``[..., out_features]`` (columns of the group's product)."""
        return self.group.output(x, self.index)

    def extra_repr(self) -> str:
        lo, hi = self.group.bounds[self.index]
        return f"in_features={self.in_features}, out_features={self.out_features}, columns {lo}:{hi} of a fused product"


def fusable(parent: nn.Module, names: tuple[str, ...]) -> bool:
    """Whether ``parent`` has every projection of ``names`` as a bias-free ``nn.Linear`` over the
    same inputs."""
    mods = [getattr(parent, n, None) for n in names]
    return (all(isinstance(m, nn.Linear) and m.bias is None for m in mods)
            and len({m.in_features for m in mods}) == 1)


def install(parent: nn.Module, names: tuple[str, ...], layer: nn.Module, sizes: list[int]) -> None:
    """Replace ``parent``'s projections ``names`` by members of one group over ``layer``."""
    group = FusedGroup(layer, sizes)
    for i, (name, size) in enumerate(zip(names, sizes)):
        setattr(parent, name, FusedMember(group, i, layer.in_features, size))
