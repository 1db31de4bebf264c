"""A request with several sequences: parallel samples (``n``, ``best_of``) or beam search.

The prompt is prefilled once by one sequence. When its last prompt token's logits exist, the
request *forks* (PagedAttention, Kwon et al. SOSP 2023, §4.4): every further sample or beam is
a :class:`engine.core.sequence.Sequence` whose block table shares all of the parent's blocks
(reference counts go up); the last, partly filled block is copied only when a sequence writes
into a block another one still holds (:meth:`BlockManager.copy_on_write`, decided by the
scheduler, carried out by the runner before the forward pass). A beam that is not continued
dies and frees its blocks; a beam continued by several tokens forks again.

The scheduler owns its queues: the functions here decide and the scheduler applies.
:func:`group_step` works out a step's forks, tokens and ended beams (ranking through
:class:`engine.core.beam_search.BeamSearch`) for :meth:`Scheduler.update_from_output`, which
moves the sequences between its queues and checks the stops; :func:`group_admission` and
:func:`preemption_unit` tell :meth:`Scheduler.schedule` which sequences join or leave as one
unit. Sequence ids are ``"<request id>#<index>"``; the caller only ever sees the request id.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.beam_search import BeamSearch
from engine.core.finish_reason import FinishReason
from engine.core.sequence import Sequence, SequenceStatus
from engine.params import SamplingParams


@dataclass
class SequenceGroup:
    """The sequences of one request and what they share.

    Attributes:
        request_id: the caller's id.
        params: the request's settings (``group_width`` sequences run at once).
        generators: sample ``k``'s generator (``None``: torch's global one); unused by beams.
        seqs: every sequence the group has had, in creation order (finished ones stay).
        forked: the prompt's sequence has forked (samples) or the first beam step ran.
        beam: the ranking state with beam search, else ``None``.
        pending: candidates of beams that reached their last token (by sequence id), kept until every live
            beam of the group has its own (a step's token budget may split them).
        pruned: beams that died, newest last: ``{"index", "token_ids", "logprob", "step"}``.
        steps: beam steps ranked so far.
        view_changed: the beam view changed in the step just processed (the output processor
            sends it and clears the flag).
        view: the latest :func:`beam_view` (beam search only).
        aborted: the caller, a shutdown or an error ended it (its reason).
    """

    request_id: str
    params: SamplingParams
    generators: list = field(default_factory=list)
    seqs: list[Sequence] = field(default_factory=list)
    forked: bool = False
    beam: BeamSearch | None = None
    pending: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    pruned: list[dict] = field(default_factory=list)
    steps: int = 0
    view_changed: bool = False
    view: dict | None = None
    aborted: FinishReason | None = None

    @property
    def width(self) -> int:
        """Sequences the request runs at once (beams, or ``best_of`` samples)."""
        return self.params.group_width

    @property
    def live(self) -> list[Sequence]:
        """Sequences not finished yet."""
        return [s for s in self.seqs if not s.is_finished]

    @property
    def done(self) -> bool:
        """Every sequence has finished (the request's output can be built)."""
        return not self.live

    def draws_itself(self, seq: Sequence) -> bool:
        """Whether the runner hands this sequence's logits to the group instead of the usual
        one draw: every beam, and the prompt's sequence of a sampled group before it forks."""
        return self.beam is not None or not self.forked


def new_group(request_id: str, prompt_ids: list[int], params: SamplingParams, generators: list,
              eos_ids, context_len: int, **seq_options) -> Sequence:
    """The first sequence of a request with several samples or beams (it is queued alone and
    forks when its prompt is prefilled).

    Args:
        generators: ``params.group_width`` generators (``None`` entries without a seed).
        eos_ids: the scheduler's EOS ids (beam search ranks EOS continuations as finished).
        context_len: most tokens a sequence may reach (caps beam search's ``max_tokens``).
        seq_options: further :class:`Sequence` fields (``use_kv_cache``, ``cache_salt``).
    """
    group = SequenceGroup(request_id, params, list(generators))
    if params.use_beam_search:
        max_new = params.max_tokens or context_len - len(prompt_ids)
        max_new = min(max_new, context_len - len(prompt_ids))
        eos = () if params.ignore_eos else set(eos_ids) | set(params.stop_token_ids)
        group.beam = BeamSearch(params.num_beams, params.length_penalty, params.early_stopping,
                                max_new, eos)
    seq = Sequence(seq_id=f"{request_id}#0", prompt_ids=prompt_ids, params=params,
                   context_len=context_len, generator=group.generators[0] if generators else None,
                   group=group, index=0, **seq_options)
    group.seqs.append(seq)
    return seq


def fork(bm, parent: Sequence, index: int, generator=None) -> Sequence:
    """A new sequence of ``parent``'s group with the same tokens, sharing all its blocks."""
    g = parent.group
    child = Sequence(seq_id=f"{g.request_id}#{index}", prompt_ids=parent.prompt_ids,
                     params=parent.params, use_kv_cache=parent.use_kv_cache,
                     context_len=parent.context_len, generator=generator,
                     cache_salt=parent.cache_salt, source=parent.source, status=SequenceStatus.RUNNING,
                     output_ids=list(parent.output_ids), block_table=bm.fork(parent.block_table),
                     num_computed=parent.num_computed, first_unkeyed=parent.first_unkeyed,
                     preemptions=parent.preemptions, group=g, index=index,
                     cumulative_logprob=parent.cumulative_logprob,
                     structured=parent.structured.fork() if parent.structured is not None else None)
    g.seqs.append(child)
    return child


# ---- admission, seats and preemption (read by the scheduler, which moves its queues) ---------

def seats(running: list[Sequence]) -> int:
    """Running sequences, counting a group that has not forked yet at its full width."""
    n, seen = 0, set()
    for s in running:
        g = s.group
        if g is None:
            n += 1
        elif id(g) not in seen:
            seen.add(id(g))
            n += max(len([x for x in running if x.group is g]), 0 if g.forked else g.width)
    return n


def group_admission(head: Sequence, waiting, running: list[Sequence], budget: int,
                    max_num_seqs: int, bm) -> list[Sequence] | None:
    """The waiting sequences of ``head``'s group that may all join now, or ``None`` to wait.

    A fresh request needs its prompt's blocks plus one block for each further sample or beam
    (its own copy of the last prompt block, or its first new block): the prompt's blocks are
    counted once, as they will be shared. A preempted group needs the blocks of every one of its
    sequences recomputed (shared only through the prefix cache, so counted in full). Reads
    only: the scheduler moves the members between its queues and allocates their blocks.

    Args:
        waiting: the scheduler's waiting queue; running: its running sequences.
        budget: tokens of the step's budget the group's first chunk may take.
        max_num_seqs: most sequences running at once (:func:`seats` counts them).
        bm: the block manager.
    """
    g = head.group
    members = [s for s in waiting if s.group is g]
    width = len(members) if g.forked else g.width
    if budget <= 0 or seats(running) + width > max_num_seqs:
        return None
    if not g.forked:
        if not bm.can_allocate(head.all_ids, budget, head.cache_salt, reserve=g.width - 1):
            return None
    elif sum(bm.blocks_needed(s.num_tokens) for s in members) > bm.num_free:
        return None
    return members


def preemption_unit(seq: Sequence, running: list[Sequence]) -> list[Sequence]:
    """The sequences preempted together with ``seq``: its whole group (running members)."""
    if seq.group is None:
        return [seq]
    seq.group.pending.clear()  # every beam recomputes and proposes again
    return [s for s in running if s.group is seq.group]


# ---- bookkeeping after a step (the scheduler applies it in update_from_output) -------------

@dataclass
class GroupStep:
    """What one step did to a group, for the scheduler to apply to its queues.

    Attributes:
        forked: new sequences, already holding their parent's blocks and tokens, that join the
            running set (in this order, before any finishes below).
        samples: ``(sequence, SampleResult)`` pairs of sampled tokens still to append, each
            followed by the scheduler's token-level stop checks (parallel samples).
        ended: ``(sequence, FinishReason)`` of beams that end now (pruned, or the search done);
            their tokens need no stop check (beam search ranked them).
        ranked: a beam step was ranked (the group's beam view is refreshed after the ends).
    """

    forked: list[Sequence] = field(default_factory=list)
    samples: list[tuple[Sequence, object]] = field(default_factory=list)
    ended: list[tuple[Sequence, FinishReason]] = field(default_factory=list)
    ranked: bool = False


def group_step(group: SequenceGroup, stepped: list[Sequence], running: list[Sequence],
               runner_output, bm) -> GroupStep:
    """One group's outcome of a step, once its sequences' computed tokens moved on: forks and
    the tokens to append (samples), or a ranked beam step. Touches only the group's own
    sequences (and, for forks, ``bm``'s reference counts); the scheduler applies the result.

    Args:
        stepped: the group's sequences scheduled in this step (not failed, not finished).
        running: the scheduler's running sequences (read: a beam step ranks its live beams).
        runner_output: the step's :class:`engine.worker.runner_output.ModelRunnerOutput`.
        bm: the block manager (forks share their parent's blocks).
    """
    if group.beam is not None:
        return _beam_step(group, stepped, running, runner_output, bm)
    out = GroupStep()
    for seq in stepped:
        draws = runner_output.group_samples.get(seq.seq_id)
        if draws is not None:  # the prompt's sequence: fork into best_of samples
            group.forked = True
            seqs = [seq] + [fork(bm, seq, k, group.generators[k]) for k in range(1, len(draws))]
            out.forked += seqs[1:]
            out.samples += zip(seqs, draws)
        else:
            sample = runner_output.sampled.get(seq.seq_id)
            if sample is not None:
                out.samples.append((seq, sample))
    return out


def _beam_step(group: SequenceGroup, stepped, running, runner_output, bm) -> GroupStep:
    """Rank a beam step once every live beam has its candidates: fork the continued beams,
    give each beam its token, and name the beams that end."""
    for seq in stepped:
        cands = runner_output.beam_candidates.get(seq.seq_id)
        if cands is not None:
            group.pending[seq.seq_id] = cands
    out = GroupStep()
    live = [s for s in running if s.group is group]
    if not live or any(s.seq_id not in group.pending for s in live):
        return out
    live.sort(key=lambda s: -s.cumulative_logprob)
    step = group.beam.step([(s.output_ids, s.cumulative_logprob) for s in live],
                           [group.pending[s.seq_id] for s in live])
    group.pending.clear()
    group.forked = True
    group.steps += 1
    group.view_changed = True
    out.ranked = True
    children: dict[int, list] = {}
    for c in step.running:
        children.setdefault(c.parent, []).append(c)
    # forks first (they copy the parents' tables), then the parents take their first token
    next_index = max(s.index for s in group.seqs) + 1
    for b, parent in enumerate(live):
        for c in children.get(b, [])[1:]:
            child = fork(bm, parent, next_index)
            next_index += 1
            out.forked.append(child)
            child.output_ids.append(c.token)
            child.cumulative_logprob = c.logprob
    for b, parent in enumerate(live):
        own = children.get(b)
        if own:
            parent.output_ids.append(own[0].token)
            parent.cumulative_logprob = own[0].logprob
        else:  # pruned (or the search is over): its blocks go back to the pool
            if not step.done:
                group.pruned.append({"index": parent.index, "token_ids": list(parent.output_ids),
                                     "logprob": parent.cumulative_logprob, "step": group.steps})
            out.ended.append((parent, FinishReason.STOP if step.done else FinishReason.ABORT))
    return out


def group_result(group: SequenceGroup) -> list[tuple[list[int], float, FinishReason, float | None, int]]:
    """What the request returns: ``(token_ids, cumulative_logprob, finish_reason, score,
    index)`` of each answer, first the one the top-level output shows.

    Beams: the ``n`` best finished hypotheses (on abort or error, the live beams as they were).
    Samples: the ``n`` of ``best_of`` with the highest cumulative logprob, in index order.
    """
    n = group.params.n
    if group.beam is not None:
        if group.aborted is None and group.beam.finished:
            return [(h.token_ids, h.logprob, FinishReason(h.reason), h.score, i)
                    for i, h in enumerate(group.beam.best(n))]
        last = sorted(group.seqs, key=lambda s: -s.cumulative_logprob)
        last = [s for s in last if s.finish_reason == group.aborted] or last
        return [(list(s.output_ids), s.cumulative_logprob, group.aborted or FinishReason.ABORT,
                 None, i) for i, s in enumerate(last[:n])]
    samples = [s for s in group.seqs]
    best = sorted(samples, key=lambda s: (-s.cumulative_logprob, s.index))[:n]
    best.sort(key=lambda s: s.index)
    return [(list(s.output_ids), s.cumulative_logprob, FinishReason(s.finish_reason), None,
             s.index) for s in best]


def beam_view(group: SequenceGroup, bm) -> dict:
    """The beam search as it stands, for the page and the events.

    Returns:
        ``{"step", "live": [{"index", "token_ids", "logprob", "blocks"}], "pruned": [...],
        "finished": [{"token_ids", "logprob", "score", "reason"}], "ref_counts": {block:
        count}, "logical_tokens", "physical_tokens", "physical_blocks"}`` where a shared block
        shows how many live beams hold it; ``logical_tokens`` is what the beams would hold as
        independent sequences (the sum of their lengths) and ``physical_tokens`` the slots of
        the distinct blocks they hold.
    """
    live = sorted((s for s in group.live), key=lambda s: -s.cumulative_logprob)
    ref = kv_sharing(live, bm)
    return {"step": group.steps,
            "live": [{"index": s.index, "token_ids": list(s.output_ids),
                      "logprob": s.cumulative_logprob, "blocks": list(s.block_table)}
                     for s in live],
            "pruned": list(group.pruned[-16:]),
            "finished": [{"token_ids": list(h.token_ids), "logprob": h.logprob, "score": h.score,
                          "reason": h.reason} for h in (group.beam.finished if group.beam else [])],
            **ref}


def kv_sharing(seqs: list[Sequence], bm) -> dict:
    """Logical against physical KV tokens of ``seqs`` (the reference counts at work).

    Returns:
        ``{"logical_tokens": sum of their token counts, "physical_blocks": distinct blocks,
        "physical_tokens": those blocks × block_size, "ref_counts": {block id: holders
        among seqs} for the blocks held by more than one}``.
    """
    holders: dict[int, int] = {}
    for s in seqs:
        for b in s.block_table:
            holders[b] = holders.get(b, 0) + 1
    return {"logical_tokens": sum(s.num_tokens for s in seqs if s.block_table),
            "physical_blocks": len(holders), "physical_tokens": len(holders) * bm.block_size,
            "ref_counts": {b: c for b, c in holders.items() if c > 1}}

