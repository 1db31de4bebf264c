"""The sampler's row-wise operations on ``[N, V]``: each filter applied only to the rows that use
it, with per-row settings as tensors (the rules of :func:`engine.worker.sampler.apply_filters`)."""

from __future__ import annotations

import torch


def padded_ids(seqs, pad: int, device) -> torch.Tensor:
    """``[R, L]`` int64 ids, each row padded with ``pad`` (one upload from host lists)."""
    lists = [s.tolist() if isinstance(s, torch.Tensor) else list(s) for s in seqs]
    width = max(1, max(len(s) for s in lists))
    host = torch.tensor([s + [pad] * (width - len(s)) for s in lists], dtype=torch.long)
    if torch.device(device).type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host


def count_ids(ids: torch.Tensor, rows: int, vocab: int) -> torch.Tensor:
    """``[R, V]`` counts of each id per row (``vocab`` is the padding id, dropped)."""
    counts = torch.zeros((rows, vocab + 1), dtype=torch.int32, device=ids.device)
    counts.scatter_add_(1, ids, torch.ones_like(ids, dtype=torch.int32))
    return counts[:, :vocab]


def top_k_rows(x: torch.Tensor, ks: list[int]) -> torch.Tensor:
    """Keep each row's ``k`` largest logits (rows with ``k`` off, or ``k >= V``, unchanged)."""
    vocab = x.shape[-1]
    rows = [i for i, k in enumerate(ks) if 0 < k < vocab]
    if not rows:
        return x
    kmax = max(ks[i] for i in rows)
    sub = x[rows]
    vals = torch.topk(sub, kmax, dim=-1).values
    kth = vals.gather(1, torch.tensor([ks[i] - 1 for i in rows], device=x.device)[:, None])
    x = x.clone()
    x[rows] = sub.masked_fill(sub < kth, float("-inf"))
    return x


def top_p_rows(x: torch.Tensor, ps: list[float]) -> torch.Tensor:
    """Nucleus filter on the rows with ``top_p < 1`` over the whole vocabulary (the rule of
    :func:`apply_filters`; rows that also use top-k go through :func:`top_k_top_p_rows`).
    Equal logits are taken in index order (a stable sort), so the tokens kept at the nucleus's
    edge depend on the row alone."""
    rows = [i for i, p in enumerate(ps) if p < 1.0]
    if not rows:
        return x
    x = x.clone()
    sub = x[rows]
    sorted_x, order = torch.sort(sub, dim=-1, descending=True, stable=True)
    x[rows] = _keep_nucleus(sub, sorted_x, order, [ps[i] for i in rows])
    return x


def _keep_nucleus(x: torch.Tensor, sorted_x: torch.Tensor, order: torch.Tensor,
                  ps: list[float]) -> torch.Tensor:
    """``x [R, V]`` with every logit outside its row's nucleus at ``-inf``: the most likely
    tokens, in the order of ``sorted_x`` (``[R, W]`` logits, largest first, at columns
    ``order``), while the mass before them is below the row's ``ps``; the first always stays.
    Columns outside ``order`` are dropped (``W < V``: those below a window)."""
    probs_sorted = torch.softmax(sorted_x, dim=-1)
    mass_before = torch.cumsum(probs_sorted, dim=-1) - probs_sorted
    top_p = torch.tensor(ps, dtype=x.dtype, device=x.device)[:, None]
    keep_sorted = (mass_before < top_p) & (sorted_x > float("-inf"))
    keep_sorted[:, 0] = True
    keep = torch.zeros(x.shape, dtype=torch.bool, device=x.device).scatter_(1, order, keep_sorted)
    return x.masked_fill(~keep, float("-inf"))


def top_k_top_p_rows(x: torch.Tensor, ks: list[int], ps: list[float]) -> torch.Tensor:
    """Top-k then top-p on each row that uses them (the rules of
    :func:`engine.worker.sampler.apply_filters`), the rows that use both (the page's defaults:
    top-k 50, top-p 0.95) in one pass over their ``k`` largest logits.

    Such a row's nucleus is searched among its ``k`` largest logits and the logits tied with the
    ``k``-th (top-k keeps ties) within a window of ``2 × k`` (more than ``k`` logits equal to the
    ``k``-th: those past the window are dropped), taken as a stable descending sort of the whole
    row takes them (equal logits in index order, as :func:`top_p_rows` and the one-row rule do):
    one ``topk``, a sort of the window, a softmax and a running sum over it, and one
    ``masked_fill`` of the row. Which tied tokens the nucleus keeps depends on the row alone,
    never on the other rows' ``k``. Applying the filters one after the other cost two ``topk``,
    two copies of ``[N, V]`` and a ``[N, V]`` scatter, and a logit tied with the ``k``-th
    outside the second ``topk``'s window escaped the nucleus.

    Args:
        x: ``[N, V]`` fp32 logits (after penalties and temperature).
        ks: ``N`` top-k values (``<= 0`` or ``>= V``: off); ps: ``N`` top-p values (1: off).

    Returns:
        ``[N, V]``: ``x`` with the filtered logits at ``-inf`` (``x`` itself when no row filters).
    """
    vocab, n = x.shape[-1], x.shape[0]
    both = [i for i, (k, p) in enumerate(zip(ks, ps)) if 0 < k < vocab and p < 1.0]
    if not both:
        return top_p_rows(top_k_rows(x, ks), ps)
    groups: dict[int, list[int]] = {}
    for i in both:   # one window width per k, so a row's result never depends on the others'
        groups.setdefault(ks[i], []).append(i)
    if len(groups) == 1 and len(both) == n:
        return _nucleus_of_top_k(x, ks[0], ps)
    out = x.clone()
    rest = sorted(set(range(n)) - set(both))
    if rest:   # rows with one filter or none: each filter on its own
        out[rest] = top_p_rows(top_k_rows(x[rest], [ks[i] for i in rest]), [ps[i] for i in rest])
    for k, rows in groups.items():
        out[rows] = _nucleus_of_top_k(x[rows], k, [ps[i] for i in rows])
    return out


def _nucleus_of_top_k(x: torch.Tensor, k: int, ps: list[float]) -> torch.Tensor:
    """:func:`top_k_top_p_rows` for rows that all use top-k ``k`` and top-p ``ps``."""
    # the window: 2k, room for logits tied with the k-th (bf16 logits tie often; sizing it to
    # the ties would cost a device-to-host wait)
    vals, order = torch.topk(x, min(x.shape[-1], 2 * k), dim=-1)
    kth = vals[:, k - 1:k]
    order, pos = order.sort(dim=-1)                       # the window in index order, then
    vals, pos = vals.gather(1, pos).sort(dim=-1, descending=True, stable=True)  # by value
    order = order.gather(1, pos)
    return _keep_nucleus(x, vals.masked_fill(vals < kth, float("-inf")), order, ps)  # top-k first


def min_p_rows(probs: torch.Tensor, ms: list[float]) -> torch.Tensor:
    """Drop tokens below ``min_p`` × the row's top probability and renormalise."""
    rows = [i for i, m in enumerate(ms) if m > 0]
    if not rows:
        return probs
    sub = probs[rows]
    m = torch.tensor([ms[i] for i in rows], dtype=sub.dtype, device=probs.device)[:, None]
    sub = sub.masked_fill(sub < m * sub.max(dim=-1, keepdim=True).values, 0.0)
    probs = probs.clone()
    probs[rows] = sub / sub.sum(dim=-1, keepdim=True)
    return probs


CHUNK = 256
"""Columns per chunk in :func:`row_argmax` and :func:`row_topk`."""


def _chunked(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``x [N, V]`` padded with ``-inf`` to whole chunks, viewed ``[N, V / CHUNK, CHUNK]``."""
    n, v = x.shape
    chunks = -(-v // CHUNK)
    if chunks * CHUNK != v:
        x = torch.cat([x, x.new_full((n, chunks * CHUNK - v), float("-inf"))], 1)
    return x.reshape(n, chunks, CHUNK), chunks


def row_argmax(x: torch.Tensor) -> torch.Tensor:
    """``torch.argmax(x, -1)`` of a float ``[N, V]``: the first index of each row's maximum.

    On the CPU, PyTorch's ``argmax`` over the last dimension runs one element at a time (466 µs
    for 8 × 49,152 fp32 on one thread, ``amax`` 23 µs). Here the maximum of each 256-column
    chunk (vectorized), the first chunk holding the row's maximum, then the first index within
    it: the same index ``argmax`` gives for every finite row (a NaN row is reported as an error
    by the sampler, whatever its index). Other devices call ``argmax``.

    Returns:
        ``[N]`` int64 column indices.
    """
    if x.device.type != "cpu":
        return torch.argmax(x, dim=-1)
    blocks, _ = _chunked(x)
    best = blocks.amax(-1).argmax(-1)                                   # [N] first best chunk
    inside = blocks[torch.arange(x.shape[0]), best].argmax(-1)          # [N] within it
    return best * CHUNK + inside


def row_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk(x, k, -1)`` of a float ``[N, V]``: values and indices, largest first.

    On the CPU ``topk`` over 49,152 columns costs about ``argmax``'s time. The ``k`` largest
    values lie in the ``k`` chunks with the largest maxima (any other chunk's maximum is below
    ``k`` values from distinct chunks), so ``topk`` runs over those ``k × 256`` columns only. The
    values are ``topk``'s; among equal values the order may differ. Other devices call ``topk``.

    Returns:
        ``([N, k] values, [N, k] int64 indices)``.
    """
    if x.device.type != "cpu":
        top = torch.topk(x, k, dim=-1)
        return top.values, top.indices
    blocks, chunks = _chunked(x)
    if k >= chunks:
        top = torch.topk(x, k, dim=-1)
        return top.values, top.indices
    best = torch.topk(blocks.amax(-1), k, dim=-1).indices               # [N, k] chunks
    cols = (best[:, :, None] * CHUNK + torch.arange(CHUNK)).reshape(x.shape[0], -1)
    top = torch.topk(blocks.reshape(x.shape[0], -1).gather(1, cols), k, dim=-1)
    return top.values, cols.gather(1, top.indices)
