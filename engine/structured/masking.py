"""The runner's side of structured output: each structured row's token mask on the raw
logits, and the tokens the grammar forces after the sampled one.

A row's mask comes from its matcher as a bitmask (one bit per vocabulary id, 32 ids per
int32 word, llguidance's layout); every id it forbids gets :data:`MASKED_LOGIT`, before
penalties, temperature and the filters, so they see only the allowed tokens. Rows without a
structure are left as they are, bit for bit.

On a GPU the packed bitmask goes to the device and is unpacked there. On CPU the work is done
in NumPy on one thread: a ``[16, 49152]`` select is tens of microseconds of memory traffic,
while PyTorch splits it over its intra-op threads, whose wake-up alone costs about a
millisecond on a busy 2-core machine (measured with the ``structured`` bench).
"""

from __future__ import annotations

import time

import numpy as np
import torch

MASKED_LOGIT = -1e20
"""The logit of a forbidden token (float16 logits, whose range ends at 65504, get their most
negative finite value instead: :func:`masked_value`). Finite, so the sampler's one-sum finite
check still tells a model's NaN or inf apart; far below any real logit, so its probability is
exactly 0 after softmax, and it stays below the rest through penalties and temperatures down
to 1e-5 (the sampler works in fp32)."""
REMOVED_SHOWN = 5
"""Removed tokens recorded per step with ``explain`` (the most likely ones)."""
MASKED_LOGPROB_BELOW = -1e4
"""Beam candidates with a log-probability below this are forbidden tokens (dropped; a real
token that far down has probability e**-10000, 0 in fp32, and nothing is lost)."""


def masked_value(dtype: torch.dtype) -> float:
    """:data:`MASKED_LOGIT`, or ``dtype``'s most negative finite value when that is higher."""
    return max(MASKED_LOGIT, float(torch.finfo(dtype).min))


def structured_rows(seqs) -> list[int]:
    """Indices of the sequences in ``seqs`` that carry a live structure."""
    return [i for i, s in enumerate(seqs)
            if s.structured is not None and s.structured.matcher is not None]


def fill_bitmask(seqs, rows: list[int], vocab: int, errors: dict) -> torch.Tensor:
    """``[R, ceil(V / 32)]`` int32 host bitmask of ``rows``, each row's matcher first fed the
    output tokens it has not seen. A row whose matcher fails gets its exception in
    ``errors`` (keyed by request id) and a mask that allows only EOS."""
    from llguidance.torch import fill_next_token_bitmask

    words = (vocab + 31) // 32
    bitmask = torch.zeros((len(rows), words), dtype=torch.int32)
    for j, i in enumerate(rows):
        seq = seqs[i]
        st = seq.structured
        start = time.perf_counter()
        try:
            st.sync(seq.output_ids)
            fill_next_token_bitmask(st.matcher, bitmask, j)
        except ValueError as exc:
            errors[seq.seq_id] = exc
            row = bitmask[j].numpy().view(np.uint8)  # little-endian bytes of the row's words
            row[:] = 0
            row[st.eos_token_id // 8] = 1 << (st.eos_token_id % 8)
        st.mask_s += time.perf_counter() - start
    return bitmask


def unpack_bitmask(bitmask: torch.Tensor, vocab: int, device) -> torch.Tensor:
    """``[R, V]`` bool, True where allowed, from an ``[R, W]`` int32 bitmask (bit ``b`` of word
    ``w`` is id ``32 w + b``), moved to ``device`` packed and unpacked there."""
    packed = bitmask.to(device, non_blocking=True)
    shifts = torch.arange(32, dtype=torch.int32, device=device)
    bits = (packed[:, :, None] >> shifts) & 1
    return bits.view(packed.shape[0], -1)[:, :vocab].bool()


def _unpack_host(bitmask: torch.Tensor, vocab: int) -> np.ndarray:
    """``[R, V]`` NumPy bool of an ``[R, W]`` int32 host bitmask (little-endian bytes, bits
    least significant first: byte ``4 w + k`` bit ``j`` is id ``32 w + 8 k + j``)."""
    bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, bitorder="little")
    return bits[:, :vocab].view(np.bool_)


_INTS = {2: (torch.int16, np.int16), 4: (torch.int32, np.int32), 8: (torch.int64, np.int64)}


def _mask_cpu(logits: torch.Tensor, rows: list[int], allowed: np.ndarray) -> torch.Tensor:
    """The CPU path of :func:`apply_structured_masks`: NumPy selects over the logits' bits
    (any float dtype, bfloat16 included, through an integer view of the same width)."""
    as_int, np_int = _INTS[logits.element_size()]
    fill = torch.tensor([masked_value(logits.dtype)], dtype=logits.dtype).view(as_int).item()
    x = logits.contiguous().view(as_int).numpy()
    if len(rows) == x.shape[0]:
        out = np.where(allowed, x, np_int(fill))
    else:
        out = x.copy()
        out[rows] = np.where(allowed, x[rows], np_int(fill))
    return torch.from_numpy(out).view(logits.dtype)


def apply_structured_masks(logits: torch.Tensor, seqs, errors: dict) -> torch.Tensor:
    """Mask the logits of every structured row of a step.

    Args:
        logits: ``[N, V]`` raw logits, one row per sequence of ``seqs`` (not modified).
        seqs: the ``N`` sequences, in row order.
        errors: the step's per-request errors; a row whose matcher fails is added.

    Returns:
        ``logits`` itself when no row has a structure, else a new ``[N, V]`` tensor whose
        structured rows hold :data:`MASKED_LOGIT` at every forbidden id. Each structured
        sequence records how many ids its mask allowed at this output position, and marks
        the position forced when exactly one was.
    """
    rows = structured_rows(seqs)
    if not rows:
        return logits
    vocab = logits.shape[-1]
    bitmask = fill_bitmask(seqs, rows, vocab, errors)
    host = _unpack_host(bitmask, vocab)
    for j, (i, count) in enumerate(zip(rows, np.count_nonzero(host, axis=1).tolist())):
        st, pos = seqs[i].structured, len(seqs[i].output_ids)
        st.allowed[pos] = count
        st.vocab_size = vocab
        if count == 1:
            st.forced.add(pos)
        if st.explain:
            st.removed[pos] = removed_by_mask(logits[i], host[j])
    if logits.device.type == "cpu":
        return _mask_cpu(logits, rows, host)
    return _mask_torch(logits, rows, bitmask)


def _mask_torch(logits: torch.Tensor, rows: list[int], bitmask: torch.Tensor) -> torch.Tensor:
    """The device path of :func:`apply_structured_masks`: the packed bitmask goes to the
    logits' device and is unpacked and applied there."""
    allowed = unpack_bitmask(bitmask, logits.shape[-1], logits.device)
    index = torch.tensor(rows, device=logits.device)
    sub = torch.where(allowed, logits[index], masked_value(logits.dtype))
    return logits.index_put((index,), sub)


def removed_by_mask(row: torch.Tensor, allowed: np.ndarray, k: int = REMOVED_SHOWN) -> tuple:
    """What the mask took from one row: ``(mass, [(token_id, prob), ...])``, the probability
    of the forbidden ids under softmax of the raw ``[V]`` logits, and the ``k`` most likely of
    them with their probabilities (before the mask, temperature 1)."""
    x = row.detach().float().cpu().numpy()
    e = np.exp(x - x.max())
    probs = e / e.sum()
    mass = float(1.0 - probs[allowed].sum())
    masked = np.where(allowed, -1.0, probs)
    top = np.argpartition(-masked, k)[:k]
    top = top[np.argsort(-masked[top])]
    return max(0.0, mass), [(int(t), float(probs[t])) for t in top if masked[t] > 0]


def jump_forward(seqs, sampled: dict, errors: dict) -> None:
    """After sampling: each structured one-sequence row with jump-forward consumes its
    sampled token and queues the tokens the grammar forces next (``structured.pending``),
    within ``max_tokens`` and the context window."""
    for seq in seqs:
        st = seq.structured
        if st is None or st.matcher is None or not st.jump_forward or seq.seq_id in errors:
            continue
        choice = sampled.get(seq.seq_id)
        if choice is None:
            continue
        room = seq.context_len - seq.num_tokens - 1
        if seq.params.max_tokens is not None:
            room = min(room, seq.params.max_tokens - len(seq.output_ids) - 1)
        st.advance(choice.token_id, room)


def drop_masked_candidates(seqs, beam_candidates: dict) -> None:
    """Remove forbidden tokens from the beam candidates of structured beams (their
    log-softmax is about :func:`masked_value`)."""
    for seq in seqs:
        cands = beam_candidates.get(seq.seq_id)
        if seq.structured is None or cands is None:
            continue
        ids, lps = cands
        keep = [(t, lp) for t, lp in zip(ids, lps) if lp > MASKED_LOGPROB_BELOW]
        beam_candidates[seq.seq_id] = ([t for t, _ in keep], [lp for _, lp in keep])
