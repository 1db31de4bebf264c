"""The scheduler's side of speculative decoding: drafts before a step, the outcome after it.

Kept apart from :mod:`engine.core.scheduler` so its queue logic stays as it is: the scheduler
asks :func:`draft_tokens` for a decoding sequence's drafts and hands a verified entry to
:func:`accept_tokens`.
"""

from __future__ import annotations


def draft_tokens(seq, budget_left: int) -> list[int]:
    """Drafts for a sequence about to decode its one pending token, or ``[]``.

    Args:
        seq: a :class:`engine.core.sequence.Sequence` with ``spec`` set, one token pending.
        budget_left: tokens of the step's budget left after its pending token.

    Returns:
        At most ``min(num_speculative_tokens, budget_left, tokens left before max_tokens or the
        context window, minus the model's own token)`` drafts.
    """
    p = seq.params
    room = seq.context_len - seq.num_tokens - 1
    if p.max_tokens is not None:
        room = min(room, p.max_tokens - len(seq.output_ids) - 1)
    max_k = min(budget_left, room)
    if max_k < 1:
        return []
    return seq.spec.propose(seq.all_ids, max_k)


def accept_tokens(seq, entry, accepted: list, last, check_stop) -> tuple[list[int], object]:
    """Append a verified step's tokens to ``seq`` and roll back the KV of rejected drafts.

    Args:
        seq: the sequence (``num_computed`` still as before the step).
        entry: its :class:`engine.core.scheduler_output.ScheduledSeq` with ``draft_ids``.
        accepted: the accepted drafts' :class:`engine.worker.runner_output.SampleResult` objects.
        last: the model's own token's result (follows the accepted drafts).
        check_stop: ``check_stop(seq, token) -> FinishReason | None``, called after each
            appended token; the first stop ends the step (later tokens are dropped).

    Returns:
        ``(appended token ids, finish reason or None)``. ``seq.num_computed`` counts the
        known tokens the step computed plus the accepted drafts: the rejected drafts' slots
        are no longer part of the sequence (the block manager truncates the table).
    """
    k = len(entry.draft_ids)
    seq.num_computed = entry.num_computed + entry.num_new - k + len(accepted)
    appended, reason = [], None
    for r in list(accepted) + [last]:
        seq.output_ids.append(r.token_id)
        appended.append(r.token_id)
        reason = check_stop(seq, r.token_id)
        if reason is not None:
            break
    seq.spec.record(k, len(accepted), len(appended))
    return appended, reason
