"""The scheduler's and the output processor's side of structured output: appending the
tokens the grammar forced, and what each token's event says about its mask."""

from __future__ import annotations

from engine.worker.runner_output import SampleResult


def append_forced(seq, check_stop):
    """Append the forced tokens the runner queued after ``seq``'s sampled token (jump-forward:
    they need no forward pass of their own; the next step feeds them with the sampled token).

    Args:
        seq: a sequence whose sampled token was just appended.
        check_stop: ``check_stop(seq, token) -> FinishReason | None``, called after each.

    Returns:
        The finish reason of the first token that ends the sequence, or ``None``.
    """
    st = seq.structured
    if st is None or not st.pending:
        return None
    for token in st.take_pending(len(seq.output_ids)):
        seq.output_ids.append(token)
        reason = check_stop(seq, token)
        if reason is not None:
            return reason
    return None


def with_forced(seq, choice: SampleResult, new_tokens: int) -> list[SampleResult]:
    """The step's results for events: the sampled token's, then one per jumped token (it had
    one allowed token: probability 1). ``new_tokens``: tokens appended this step."""
    if seq.structured is None or new_tokens <= 1:
        return [choice]
    extra = seq.output_ids[len(seq.output_ids) - new_tokens + 1:]
    return [choice] + [SampleResult(t, 1.0, [t], [1.0]) for t in extra]


def token_marks(seq, position: int, text=None) -> dict:
    """The event fields of output position ``position``: ``forced`` (the grammar allowed one
    token), ``jumped`` (appended without a forward pass), ``allowed_tokens`` (how many the mask
    allowed; ``None`` without a structure or for a jumped token) and ``mask_detail``
    (``{"vocab_size", "removed_mass", "removed_top": [[text, prob], ...]}``, the removed
    figures with ``explain`` only; ``text(token_id)`` names the removed tokens)."""
    st = seq.structured
    if st is None:
        return {}
    detail = {"vocab_size": st.vocab_size, "removed_mass": None, "removed_top": []}
    if position in st.removed:
        mass, top = st.removed[position]
        detail.update(removed_mass=mass, removed_top=[
            [text(t) if text is not None else str(t), p] for t, p in top])
    return {"forced": position in st.forced, "jumped": position in st.jumped,
            "allowed_tokens": st.allowed.get(position), "mask_detail": detail}
