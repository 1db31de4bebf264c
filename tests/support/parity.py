"""Token parity with room for floating-point ties: two greedy answers are equal, or they first
differ where the model's two best logits are within reduction-order noise (fp32 forward)."""

from __future__ import annotations

import torch

from engine.model.prompt import encode_prompt

TIE_MARGIN = 1e-3
"""Largest logit gap between the two top tokens that reduction order can explain (fp32)."""


def divergence_margin(loaded, prompt, a, b):
    """Logit gap between the two top tokens where ``a`` and ``b`` first differ (fp32 forward).

    Returns:
        ``(k, margin)``: the index of the first differing token and the gap (logit units).
    """
    k = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    ids = encode_prompt(loaded.tokenizer, prompt) + a[:k]
    with torch.inference_mode():
        logits = loaded.model(input_ids=torch.tensor([ids]), logits_to_keep=1).logits[0, -1]
    top = torch.topk(logits, 2).values
    return k, float(top[0] - top[1])


def assert_same_or_tie(loaded, prompt, solo, batched):
    """Equal tokens; or, at the first difference, a near-tie explained by reduction order."""
    if solo == batched:
        return
    k, margin = divergence_margin(loaded, prompt, solo, batched)
    assert margin < TIE_MARGIN, (f"tokens diverge at {k} with a logit margin of {margin:.2e}: "
                                 "too large for floating-point reduction order, so a bug")
