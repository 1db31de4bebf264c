"""Verifying drafted tokens: greedy matching and the rejection-sampling rule.

Rejection sampling (Leviathan, Kalman and Matias, "Fast Inference from Transformers via
Speculative Decoding", ICML 2023, Algorithm 1; Chen et al., "Accelerating Large Language Model
Decoding with Speculative Sampling", 2023): draft token ``d_i`` drawn from the drafter's
distribution ``q_i`` is accepted with probability ``min(1, p_i(d_i) / q_i(d_i))``, where ``p_i``
is the target model's distribution at that position. At the first rejection the token is drawn
from the residual ``norm(max(0, p_i - q_i))`` and the rest is discarded; when all ``k`` drafts
are accepted one more token is drawn from ``p_{k+1}``. Every emitted token is then distributed
exactly as ``p`` (the papers' Theorem 1). A drafter that proposes a fixed token (prompt lookup)
has ``q_i`` = one-hot at ``d_i``: the acceptance probability is ``p_i(d_i)`` and the residual is
``p_i`` with ``d_i`` removed.
"""

from __future__ import annotations

import torch


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share (at most the shorter one's length)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def greedy_verify(target_ids: list[int], draft_ids: list[int]) -> int:
    """Accepted drafts under greedy decoding: the longest prefix equal to the model's argmax.

    Args:
        target_ids: ``k + 1`` argmax tokens of the target model, one per verified position
            (position ``i`` predicts the token after draft ``i``; position 0 follows the last
            known token).
        draft_ids: the ``k`` draft tokens.

    Returns:
        ``a`` in ``[0, k]``; the step emits ``draft_ids[:a]`` then ``target_ids[a]``, exactly
        the tokens plain greedy decoding gives.
    """
    return common_prefix_len(draft_ids, target_ids)


def rejection_sample(target_probs: torch.Tensor, draft_ids: list[int],
                     draft_probs: torch.Tensor | None = None,
                     generator: torch.Generator | None = None) -> tuple[int, int]:
    """Accept or reject drafts by the rule in the module docstring; draw the step's last token.

    Args:
        target_probs: ``[k + 1, V]`` fp32 probabilities of the target model (after the
            request's temperature and filters), row ``i`` for the token after draft ``i - 1``.
        draft_ids: the ``k`` draft tokens.
        draft_probs: ``[k, V]`` the drafter's probabilities, or ``None`` for a drafter that
            proposes fixed tokens (one-hot ``q``).
        generator: the request's generator (seeded), or ``None`` for torch's global one.

    Returns:
        ``(a, token)``: ``a`` accepted drafts, then ``token``, drawn from the residual at the
        first rejection or from row ``k`` when every draft was accepted.

    Raises:
        ValueError: shapes disagree (``target_probs`` needs ``len(draft_ids) + 1`` rows).
    """
    k = len(draft_ids)
    if target_probs.dim() != 2 or target_probs.shape[0] != k + 1:
        raise ValueError(f"target_probs must be [k + 1, V] = [{k + 1}, V], "
                         f"got {list(target_probs.shape)}")
    if draft_probs is not None and list(draft_probs.shape) != [k, target_probs.shape[1]]:
        raise ValueError(f"draft_probs must be [k, V] = [{k}, {target_probs.shape[1]}], "
                         f"got {list(draft_probs.shape)}")
    dev = target_probs.device
    a = k
    if k:
        idx = torch.tensor(draft_ids, device=dev)
        rows = torch.arange(k, device=dev)
        p = target_probs[rows, idx]
        q = draft_probs[rows, idx] if draft_probs is not None else torch.ones_like(p)
        u = torch.rand(k, generator=generator, device=dev, dtype=p.dtype)
        # accept d_i when u_i < p_i(d_i) / q_i(d_i), written without dividing by q
        rejected = (u * q >= p).tolist()
        a = rejected.index(True) if True in rejected else k
    if a == k:
        dist = target_probs[k]
    else:
        row = target_probs[a]
        if draft_probs is not None:
            residual = torch.clamp(row - draft_probs[a], min=0.0)
        else:
            residual = row.clone()
            residual[draft_ids[a]] = 0.0
        mass = float(residual.sum())
        # zero mass means p = q: then the draft is accepted with probability 1 and this row is
        # never reached; guard against rounding all the same
        dist = residual / mass if mass > 0 else row
    token = int(torch.multinomial(dist, 1, generator=generator)[0])
    return a, token
