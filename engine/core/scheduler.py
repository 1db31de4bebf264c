"""The scheduler: waiting and running queues, what each step computes, and all bookkeeping after it.

Iteration-level scheduling (continuous batching, Yu et al., OSDI 2022 "Orca"; vLLM's
scheduler): every step, finished sequences have left; each running decode gets its token first
(with speculative decoding, its pending token plus the draft tokens to verify,
:mod:`engine.spec_decode.scheduling`); then each running prefill its next chunk and each request
without a KV cache the next piece of its recompute, at most ``long_prefill_token_threshold``
tokens each (vLLM's name; more for the engine's only sequence near its prompt's start); then
waiting requests join, first come first served, while the step's token budget, the
running-sequence limit and free KV blocks allow. While requests wait, the running chunks leave
them one chunk of the budget, so a long prompt never holds a whole step and a short request that
arrives meanwhile joins the next one. When blocks run out, the newest running sequence is
preempted: its blocks are freed and it is recomputed later.

After the model ran, :meth:`Scheduler.update_from_output` does every piece of bookkeeping in one
place (computed tokens, prefix-cache keys, the sampled token, EOS / stop-token / length stops,
failed rows, forks and ended beams), as vLLM v1's ``Scheduler.update_from_output`` does. The
scheduler owns its queues: the helpers of samples and beams
(:mod:`engine.core.sequence_group`), speculative decoding (:mod:`engine.spec_decode.scheduling`)
and structured output (:mod:`engine.structured.bookkeeping`) decide, and only the scheduler
moves sequences between ``waiting`` and ``running`` or finishes them.
"""

from __future__ import annotations

import math
from collections import deque

from engine.core.batch_info import BatchInfo
from engine.core.finish_reason import FinishReason
from engine.core.scheduler_output import ScheduledSeq, SchedulerOutput
from engine.core.sequence import Sequence, SequenceStatus
from engine.core.sequence_group import (GroupStep, SequenceGroup, beam_view, group_admission,
                                         group_step, preemption_unit, seats)
from engine.errors import QueueFullError
from engine.worker.runner_output import ModelRunnerOutput
from engine.spec_decode.scheduling import accept_tokens, draft_tokens
from engine.structured.bookkeeping import append_forced

__all__ = ["Scheduler", "QueueFullError"]


class Scheduler:
    """First come, first served admission with a token budget and a KV block budget.

    Args:
        block_manager: a :class:`engine.core.block_manager.BlockManager` (paged cache) or
            :class:`engine.core.contiguous_cache_manager.ContiguousCacheManager` (each request's own
            cache, never short of room).
        eos_token_ids: ids that end a sequence (unless its params ignore EOS).
        max_queue: most requests allowed to wait (``add`` past it raises ``QueueFullError``).
        max_num_seqs: most sequences running at once.
        max_num_batched_tokens: most tokens fed to the model in one step (prefill chunks
            and no-cache recomputes included); longer prompts are split into chunks.
        long_prefill_token_threshold: most tokens of one prefill chunk or one piece of a
            no-cache recompute per step (vLLM's name); 0 = no cap beyond the budget. With a
            cap, a long prompt takes several smaller steps and every step has room for the
            decodes and for new requests, so no one waits behind a whole-budget chunk. A
            sequence alone in the engine (nothing else running, no request waiting for a
            seat) has no one to share its steps with: its chunks may be larger,
            :meth:`lone_chunk_tokens`; a request that arrives meanwhile waits for that one
            step, then shares the next ones.
    """

    def __init__(self, block_manager, eos_token_ids=(), max_queue: int = 32,
                 max_num_seqs: int = 32, max_num_batched_tokens: int = 512,
                 long_prefill_token_threshold: int = 0):
        self.bm = block_manager
        self.eos_token_ids = frozenset(eos_token_ids)
        self.max_queue = max_queue
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    # ---- queues ------------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        """Queue a new request.

        Raises:
            QueueFullError: ``max_queue`` requests already wait.
        """
        if len(self.waiting) >= self.max_queue:
            raise QueueFullError(
                f"the queue is full ({self.max_queue} requests waiting); try again in a moment")
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def position(self, request_id: str) -> int:
        """Requests ahead of this one: running ones plus those queued before it.

        Returns 0 when it runs, has finished, or is unknown.
        """
        for i, seq in enumerate(self.waiting):
            if seq.request_id == request_id:
                return i + len(self.running)
        return 0

    def all_sequences(self) -> list[Sequence]:
        """Every sequence not yet finished (waiting and running)."""
        return list(self.waiting) + list(self.running)

    # ---- the step ----------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput | None:
        """Decide the next step (see the module docstring); ``None`` when there is no work.

        Three passes share the token budget: every running decode gets its token first (with
        its drafts); then running prefill chunks and no-cache recomputes, each capped at
        ``long_prefill_token_threshold`` and together leaving one capped chunk of room while
        requests wait; then waiting requests join, their first chunk capped too. So a long
        prompt never takes a whole step while anyone else runs or waits; alone, its chunks
        grow to :meth:`lone_chunk_tokens`.
        """
        out = SchedulerOutput()
        budget = self._schedule_decodes(out)
        budget = self._schedule_chunks(out, budget, reserve=True)
        budget = self._admit_waiting(out, budget)
        self._schedule_chunks(out, budget, reserve=False)  # what the newcomers left
        if not out.entries and not out.recompute:
            return None
        if out.blocks_to_copy:  # drop copies into blocks of sequences preempted since
            held = {b for e in out.entries for b in e.seq.block_table}
            out.blocks_to_copy = [p for p in out.blocks_to_copy if p[1] in held]
        return out

    def _cap(self, n: int, alone: bool = False, position: int = 0) -> int:
        """``n`` tokens of a prefill chunk or recompute, capped at the long-prefill threshold,
        or for a sequence ``alone`` (:meth:`_alone`) whose next chunk starts at token
        ``position``, at :meth:`lone_chunk_tokens`."""
        cap = self.long_prefill_token_threshold
        if cap <= 0:
            return n
        return min(n, self.lone_chunk_tokens(position) if alone else cap)

    def lone_chunk_tokens(self, position: int) -> int:
        """Most tokens of a chunk starting at token ``position`` of a sequence alone in the
        engine: the largest ``c`` with ``c · (position + c) ≤ budget²``, between the
        long-prefill threshold and the step budget.

        A chunk's products cost in proportion to ``c`` and its attention to ``c`` queries over
        ``position + c/2`` keys each, so this keeps a lone chunk's step near what a whole-budget
        chunk costs at the start of a prompt: a short or mid-length prompt takes the whole budget
        (512 tokens) while it is near its start, a long one falls back to the threshold (128)
        from about 2,000 tokens in. So a request that arrives meanwhile waits for one step of
        bounded length whatever the prompt's length (docs/performance.md: a lone 1,024-token
        int4 prompt in 1.083 s against 1.106 s in 128-token chunks, a 7,500-token one level).

        Args:
            position: tokens of the sequence already computed (0 at its first chunk).

        Returns:
            Tokens (at least 1).
        """
        budget, cap = self.max_num_batched_tokens, self.long_prefill_token_threshold
        c = int((math.sqrt(position * position + 4 * budget * budget) - position) / 2)
        return max(1, min(budget, max(cap, c)))

    def _alone(self, seq: Sequence) -> bool:
        """``seq`` has no one to share its steps with: it is the only running sequence, and no
        request waits that could join (none waits, or every seat is taken)."""
        return len(self.running) == 1 and self.running[0] is seq and (
            not self.waiting or seats(self.running) >= self.max_num_seqs)

    def _left(self, out: SchedulerOutput) -> int:
        """Tokens of the step's budget not yet given to an entry."""
        return self.max_num_batched_tokens - out.num_tokens

    def _schedule_decodes(self, out: SchedulerOutput) -> int:
        """Pass 1: one token (and any drafts) for every running sequence with a cache that has
        exactly one token to compute, in running order. Returns the budget left."""
        budget = self.max_num_batched_tokens
        for seq in list(self.running):
            if seq not in self.running or not seq.use_kv_cache:  # preempted below
                continue
            if seq.num_tokens - seq.num_computed != 1:  # a prefill chunk, or a waiting beam
                continue
            if budget <= 0:
                break
            drafts = []
            if seq.spec is not None and seq.output_ids:
                drafts = draft_tokens(seq, budget - 1)
                if drafts and not self.bm.ensure_capacity(
                        seq.block_table, seq.num_computed + 1 + len(drafts)):
                    drafts = []
            self._add_running(seq, 1, out, drafts)
            budget = self._left(out)
        return budget

    def _schedule_chunks(self, out: SchedulerOutput, budget: int, reserve: bool) -> int:
        """Pass 2: the next prompt chunk of running sequences (prefills, preempted ones
        recomputing, a grammar's forced tokens) and the next piece of each no-cache
        recompute, each capped (:meth:`_cap`); with ``reserve``, while requests wait and seats
        are free, one capped chunk of budget stays for them (run again without it after they
        joined, for what they left). Returns the budget left."""
        scheduled = {id(e.seq) for e in out.all_entries}
        for seq in list(self.running):
            if seq not in self.running or id(seq) in scheduled:
                continue
            remaining = seq.num_tokens - seq.num_computed
            if remaining <= 0 or (seq.use_kv_cache and remaining == 1):
                continue  # a beam waiting for its siblings; a decode pass 1 had no room for
            room = budget
            if reserve and self.waiting and seats(self.running) < self.max_num_seqs \
                    and self.long_prefill_token_threshold > 0:
                room -= min(self.long_prefill_token_threshold, budget)
            n = min(self._cap(remaining, self._alone(seq), seq.num_computed), room)
            if n <= 0:
                break
            if not seq.use_kv_cache:
                out.recompute.append(self._schedule(seq, n))
            else:
                self._add_running(seq, n, out)
            budget = self._left(out)
        return budget

    def _add_running(self, seq: Sequence, n: int, out: SchedulerOutput,
                     drafts: list[int] = ()) -> None:
        """Schedule ``n`` tokens (and ``drafts``) of running ``seq``, preempting the newest
        running sequences until its blocks fit (``seq`` itself may be the one preempted)."""
        while not self._make_room(seq, n, out):
            self._preempt(self.running[-1], out)
            if seq.status is not SequenceStatus.RUNNING:
                return
        out.entries.append(self._schedule(seq, n, drafts))

    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> int:
        """Pass 3: waiting requests join, first come first served, while the budget, the
        running limit and free blocks allow; each first chunk is capped (:meth:`_cap`).
        Returns the budget left."""
        while self.waiting and seats(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if seq.group is not None:  # several samples or beams: all of them or none
                if not self._admit_group(seq, self._cap(budget), out):
                    break
                budget = self._left(out)
                continue
            alone = len(self.waiting) == 1 and not self.running  # the engine's only sequence
            if budget <= 0 or (seq.use_kv_cache and not self.bm.can_allocate(
                    seq.all_ids, self._cap(budget, alone), seq.cache_salt)):
                break
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            if not seq.use_kv_cache:
                seq.num_cached_tokens = max(seq.num_cached_tokens, 0)
                seq.num_computed = 0
                first = min(self._cap(seq.num_tokens, alone), budget)
                out.recompute.append(self._schedule(seq, first))
                budget = self._left(out)
                continue
            # a lone first chunk is sized for position 0: a prefix-cache hit starts it further
            # in (one step longer than the rule allows, no more)
            seq.block_table, seq.num_computed, n = self.bm.allocate(
                seq.all_ids, self._cap(budget, alone), seq.cache_salt)
            if seq.num_cached_tokens < 0:  # the first admission's hits (not a preempted retry's)
                seq.num_cached_tokens = seq.num_computed
            seq.first_unkeyed = seq.num_computed // self.bm.block_size
            out.entries.append(self._schedule(seq, n))
            budget = self._left(out)
        return budget

    def _admit_group(self, head: Sequence, budget: int, out: SchedulerOutput) -> bool:
        """Admit every waiting sequence of ``head``'s group at once, or none
        (:func:`engine.core.sequence_group.group_admission` decides). Returns True when
        admitted (their entries added to ``out``), False to wait."""
        members = group_admission(head, self.waiting, self.running, budget, self.max_num_seqs,
                                  self.bm)
        if members is None:
            return False
        for s in members:
            self.waiting.remove(s)
            s.status = SequenceStatus.RUNNING
            self.running.append(s)
            s.block_table, s.num_computed, n = self.bm.allocate(s.all_ids, max(budget, 0),
                                                                s.cache_salt)
            s.first_unkeyed = s.num_computed // self.bm.block_size
            if n > 0:
                out.entries.append(self._schedule(s, n))
                budget -= n
        return True

    def _make_room(self, seq: Sequence, n: int, out: SchedulerOutput) -> bool:
        """Blocks for ``n`` more tokens of ``seq``: its own copy of a block it shares with a
        forked sibling (copy-on-write, carried out by the runner), then new blocks. False
        (nothing changed) when the pool is short."""
        if self.bm.is_shared(seq.block_table, seq.num_computed):
            if self.bm.num_free < 1 + max(0, self.bm.blocks_needed(seq.num_computed + n)
                                          - len(seq.block_table)):
                return False
            out.blocks_to_copy.append(self.bm.copy_on_write(seq.block_table, seq.num_computed))
        return self.bm.ensure_capacity(seq.block_table, seq.num_computed + n)

    @staticmethod
    def _schedule(seq: Sequence, n: int, drafts: list[int] = ()) -> ScheduledSeq:
        entry = ScheduledSeq.of(seq, n)
        if drafts:  # a verification step: the pending token and the drafts, one decode pass
            entry.draft_ids = list(drafts)
            entry.num_new += len(drafts)
            entry.phase = "decode"
        elif seq.structured is not None and n > 1 and seq.num_computed >= len(seq.prompt_ids):
            entry.phase = "decode"  # the sampled token and the grammar's forced ones (jump-forward)
        seq.num_scheduled = entry.num_new
        return entry

    def update_from_output(self, scheduler_output: SchedulerOutput,
                           model_runner_output: ModelRunnerOutput) -> list[Sequence]:
        """All bookkeeping after the model ran a step (vLLM v1's name): the one place a step's
        results change the queues.

        For each scheduled sequence: a failed row ends with ``error`` (a sample or beam ends its
        whole request); otherwise its computed tokens move on, its newly full blocks get
        prefix-cache keys, and where a token was sampled it is appended and the token-level
        stops are checked: EOS and stop token ids (``stop``), ``max_tokens`` and the context
        window (``length``). Helpers work out the parts that are not the queues' own and this
        method applies them: a verified speculative step's accepted tokens
        (:func:`engine.spec_decode.scheduling.accept_tokens`), a grammar's forced tokens
        (:func:`engine.structured.bookkeeping.append_forced`), and a group's forks, samples and
        beam ranking (:func:`engine.core.sequence_group.group_step`). Stop *strings* need the
        text, so the output processor checks them and the engine calls :meth:`finish_sequences`.

        Args:
            scheduler_output: what :meth:`schedule` returned for the step.
            model_runner_output: the runner's
                :class:`engine.worker.runner_output.ModelRunnerOutput` of it (rows keyed by
                sequence id).

        Returns:
            The sequences that finished in this step (their blocks are already freed).
        """
        finished = []
        groups: dict[int, tuple] = {}
        for e in scheduler_output.all_entries:
            seq = e.seq
            seq.num_scheduled = 0
            if seq.is_finished:  # aborted while the step ran
                continue
            error = model_runner_output.errors.get(seq.seq_id)
            if error is not None:
                seq.error = error
                for s in self._unit(seq):  # a sample or beam fails its whole request
                    s.error = error
                    self._finish(s, FinishReason.ERROR)
                    finished.append(s)
                continue
            if e.draft_ids:
                self._update_verified(seq, e, model_runner_output, finished)
                continue
            seq.num_computed = e.num_computed + e.num_new
            if not seq.use_kv_cache and e.samples:  # the recompute is over; the next starts anew
                seq.num_computed = 0
            if seq.block_table:
                seq.first_unkeyed = self.bm.register_full_blocks(
                    seq.block_table, seq.all_ids, seq.num_computed, seq.first_unkeyed,
                    seq.cache_salt)
            if seq.group is not None:  # forks, beam ranking: once per group, below
                groups.setdefault(id(seq.group), (seq.group, []))[1].append(seq)
                continue
            sample = model_runner_output.sampled.get(seq.seq_id)
            if sample is None:
                continue
            if seq.spec is not None and e.phase == "decode":
                seq.spec.record(0, 0, 1)
            self._append_sample(seq, sample, finished, forced=True)
        for group, stepped in groups.values():
            live = [s for s in stepped if not s.is_finished]
            self._apply_group_step(group, group_step(group, live, self.running,
                                                     model_runner_output, self.bm), finished)
        return finished

    def _append_sample(self, seq: Sequence, sample, finished: list[Sequence],
                       forced: bool = False) -> None:
        """Append a sampled token (a :class:`engine.worker.runner_output.SampleResult`) and
        check the token-level stops; with ``forced``, then the tokens a grammar forces next
        (:func:`engine.structured.bookkeeping.append_forced`). A stop finishes ``seq`` and
        adds it to ``finished``."""
        seq.output_ids.append(sample.token_id)
        seq.cumulative_logprob += sample.logprob
        reason = self._check_stop(seq, sample.token_id)
        if forced and reason is None and seq.structured is not None:
            reason = append_forced(seq, self._check_stop)
        if reason is not None:
            self._finish(seq, reason)
            finished.append(seq)

    def _apply_group_step(self, group: SequenceGroup, step: GroupStep,
                          finished: list[Sequence]) -> None:
        """Apply a group's :class:`engine.core.sequence_group.GroupStep`: forks join the running
        set, sampled tokens are appended (stops checked), ended beams finish; a ranked beam
        step then refreshes the group's beam view (with the ended beams' blocks freed)."""
        self.running.extend(step.forked)
        for seq, sample in step.samples:
            self._append_sample(seq, sample, finished)
        for seq, reason in step.ended:
            self._finish(seq, reason)
            finished.append(seq)
        if step.ranked:
            group.view = beam_view(group, self.bm)

    def _unit(self, seq: Sequence) -> list[Sequence]:
        """``seq`` and, for a sample or beam, every unfinished sequence of its request."""
        if seq.group is None:
            return [seq]
        if seq.group.aborted is None:
            seq.group.aborted = FinishReason.ERROR
        return [s for s in seq.group.seqs if not s.is_finished]

    def _update_verified(self, seq: Sequence, e: ScheduledSeq, runner_output: ModelRunnerOutput,
                         finished: list[Sequence]) -> None:
        """Bookkeeping of a step that verified drafts: append the accepted drafts and the
        model's token (stops checked after each), roll back the rejected drafts' KV blocks,
        key the newly full blocks."""
        _, reason = accept_tokens(seq, e, runner_output.spec_accepted.get(seq.seq_id, []),
                                  runner_output.sampled[seq.seq_id], self._check_stop)
        if reason is not None:
            self._finish(seq, reason)
            finished.append(seq)
            return
        self.bm.truncate(seq.block_table, seq.num_computed)
        seq.first_unkeyed = self.bm.register_full_blocks(
            seq.block_table, seq.all_ids, seq.num_computed, seq.first_unkeyed, seq.cache_salt)

    def _check_stop(self, seq: Sequence, token: int) -> FinishReason | None:
        p = seq.params
        if token in p.stop_token_ids or (not p.ignore_eos and token in self.eos_token_ids):
            seq.stop_reason = token
            return FinishReason.STOP
        if (p.max_tokens is not None and len(seq.output_ids) >= p.max_tokens) \
                or seq.num_tokens >= seq.context_len:
            return FinishReason.LENGTH
        return None

    def finish_requests(self, request_ids, reason: FinishReason) -> list[Sequence]:
        """End these requests now, every sequence of each (abort, shutdown), and free their
        blocks.

        Returns:
            The sequences that were waiting or running (unknown or finished ids are skipped).
        """
        ids = set(request_ids)
        return self._finish_now([s for s in self.all_sequences() if s.request_id in ids],
                                reason)

    def finish_sequences(self, seq_ids, reason: FinishReason) -> list[Sequence]:
        """End these sequences now and free their blocks: a stop string ends one sample of a
        group, not its request (a one-sequence request's ``seq_id`` is its request id).

        Returns:
            The sequences that were waiting or running (unknown or finished ids are skipped).
        """
        ids = set(seq_ids)
        return self._finish_now([s for s in self.all_sequences() if s.seq_id in ids], reason)

    def _finish_now(self, done: list[Sequence], reason: FinishReason) -> list[Sequence]:
        """Finish ``done`` with ``reason``; a failure or an abort marks their groups too."""
        for seq in done:
            if seq.group is not None and not FinishReason(reason).ok:
                seq.group.aborted = seq.group.aborted or FinishReason(reason)
            self._finish(seq, reason)
        return done

    def _finish(self, seq: Sequence, reason: FinishReason) -> None:
        seq.finish_reason = reason
        seq.status = SequenceStatus.FINISHED
        if seq in self.running:
            self.running.remove(seq)
        else:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
        self._release(seq)

    def _release(self, seq: Sequence) -> None:
        self.bm.free(seq.block_table)
        seq.num_computed = 0
        seq.num_scheduled = 0
        seq.first_unkeyed = 0

    def _preempt(self, victim: Sequence, out: SchedulerOutput) -> None:
        """Preempt ``victim`` (with every running sequence of its request, as one unit): free
        their blocks, put them back at the head of the queue, drop their entries of this step."""
        unit = preemption_unit(victim, self.running)
        for seq in reversed(unit):
            self.running.remove(seq)
            self._release(seq)
            seq.status = SequenceStatus.WAITING
            seq.preemptions += 1
            self.waiting.appendleft(seq)
            out.preempted.append(seq)
        self.num_preemptions += 1
        out.entries = [e for e in out.entries if e.seq.status is SequenceStatus.RUNNING]
        out.recompute = [e for e in out.recompute if e.seq.status is SequenceStatus.RUNNING]

    # ---- the step's figures ------------------------------------------------------------------
    def batch_info(self, scheduler_output: SchedulerOutput, step_id: int,
                   start_s: float) -> BatchInfo:
        """What the step looked like, computed once per step for every event of the step.

        Block figures come from their owner, the block manager; ``kv_utilization`` counts the
        tokens held per physical block of the running sequences (a shared block once).
        """
        entries = scheduler_output.all_entries
        b = self.bm.stats()
        return BatchInfo(
            step_id=step_id, start_s=start_s,
            request_ids=[e.seq.seq_id for e in entries],
            new_tokens=[e.num_new for e in entries],
            phases=[e.phase for e in entries],
            prefill_tokens=sum(e.num_new for e in entries if e.phase == "prefill"),
            decode_tokens=sum(1 for e in entries if e.phase == "decode"),
            running=len(self.running), waiting=len(self.waiting),
            blocks_used=b.used, blocks_free=b.free, blocks_cached=b.cached,
            kv_utilization=self.bm.utilization(
                [(s.block_table, s.num_computed + s.num_scheduled) for s in self.running]),
            preemptions=self.num_preemptions, prefix_hit_rate=b.hit_rate)
