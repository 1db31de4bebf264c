"""Output processing: from a step's sampled tokens to text, stop strings, events and outputs.

One :class:`RequestState` per request holds what its caller sees (the detokenizer, the stop
string matcher, timestamps, the text emitted so far), apart from the scheduler's
:class:`engine.core.sequence.Sequence`, as vLLM v1's ``OutputProcessor`` keeps its
``RequestState`` apart from the scheduler's ``Request``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from engine.core.finish_reason import FinishReason
from engine.core.scheduler_output import SchedulerOutput
from engine.core.sequence import Sequence
from engine.output.detokenizer import IncrementalDetokenizer, StopStringMatcher, TokenTexts
from engine.output.events import Candidate, CompletionOutput, RequestOutput, StepEvent
from engine.output.group_output import GroupOutputs
from engine.output.handle import RequestHandle
from engine.output.metrics import RequestMetrics, RequestTimes
from engine.worker.runner_output import ModelRunnerOutput
from engine.structured.bookkeeping import token_marks, with_forced

log = logging.getLogger("engine")


@dataclass
class RequestState:
    """What one request has shown its caller so far.

    Attributes:
        handle: the caller's :class:`RequestHandle`.
        detok: incremental detokenizer of the output ids.
        stop_matcher: the request's stop strings.
        times: timestamps for the metrics.
        emitted_len: characters of ``detok.text`` already streamed.
        pending_start_s: when the first step toward the next token began (a chunked prefill
            spans several steps), ``None`` right after a token.
        pending_tokens: tokens computed by the steps since the last token that brought none
            (a chunked prefill's earlier chunks), so the next event counts the whole prefill.
        pending_steps: those steps, counted (the next event's ``num_steps`` adds its own).
        stop_reason: the stop string that ended it, if one did.
        last_kv_bytes: KV bytes at its last step.
        last_memory: the memory breakdown of its last step.
        token_limit: output tokens it keeps when a stop string ended it inside a step that
            brought several tokens (speculative decoding), else ``None``.
    """

    handle: RequestHandle
    detok: IncrementalDetokenizer
    stop_matcher: StopStringMatcher
    times: RequestTimes
    emitted_len: int = 0
    pending_start_s: float | None = None
    pending_tokens: int = 0
    pending_steps: int = 0
    stop_reason: str | None = None
    last_kv_bytes: int = 0
    last_memory: object = None
    token_limit: int | None = None


class OutputProcessor:
    """Turns runner results into :class:`StepEvent` objects and finished requests into
    :class:`RequestOutput` objects, and keeps the outcome counts.

    Args:
        tokenizer: the model's tokenizer.
        rolling: optional :class:`engine.telemetry.rolling.RollingStats` fed every output.
    """

    def __init__(self, tokenizer, rolling=None):
        self.tokenizer = tokenizer
        self.token_text = TokenTexts(tokenizer)
        self.rolling = rolling
        self.listeners: list = []  # more callables fed every finished RequestOutput (metrics exporters)
        self.states: dict[str, RequestState] = {}
        self.counts = {"finished": 0, "aborted": 0, "failed": 0}
        self.groups = GroupOutputs(tokenizer)

    def add_request(self, seq: Sequence, handle: RequestHandle, arrival_s: float) -> None:
        """Start following a request accepted by the scheduler."""
        self.states[seq.request_id] = RequestState(
            handle=handle, detok=IncrementalDetokenizer(self.tokenizer),
            stop_matcher=StopStringMatcher(seq.params.stop), times=RequestTimes(arrival=arrival_s))

    def process(self, scheduler_output: SchedulerOutput, runner_output: ModelRunnerOutput,
                batch, memory) -> list[str]:
        """Stream one event per sequence that got a token this step.

        Args:
            scheduler_output: the step's plan; the sequences already hold their new token
                and token-level finish reason (``Scheduler.update_from_output``).
            runner_output: the step's results.
            batch: the step's :class:`engine.core.batch_info.BatchInfo`, shared by its events.
            memory: the step's memory breakdown, or ``None``.

        Returns:
            Sequence ids (:attr:`Sequence.seq_id`) that a stop string ended (the caller tells
            the scheduler).
        """
        stopped = []
        text = self.token_text
        for e in scheduler_output.all_entries:
            seq, sid = e.seq, e.seq.seq_id
            state = self.states.get(seq.request_id)
            if state is None:
                continue
            start, end = runner_output.spans.get(sid, (runner_output.start_s, runner_output.end_s))
            if state.times.scheduled is None:
                state.times.scheduled = start
            if state.pending_start_s is None:
                state.pending_start_s = start
            state.last_memory = memory
            state.last_kv_bytes = runner_output.kv_bytes.get(sid, 0)
            if seq.group is not None:  # samples and beams
                stopped += self.groups.process(self, e, state, runner_output, batch, memory)
                continue
            choice = runner_output.sampled.get(sid)
            if sid in runner_output.errors:
                continue
            if choice is None:  # an earlier chunk of a prefill: counted with its last one
                state.pending_tokens += e.num_new
                state.pending_steps += 1
                continue
            choices, accepted = [choice], 0
            if e.draft_ids:  # accepted drafts, then the model's token, as far as appended
                drafts = runner_output.spec_accepted.get(sid, [])
                accepted = len(drafts)
                new = len(seq.output_ids) - len(state.times.token_times)
                choices = (drafts + [choice])[:max(1, new)]
            else:  # with jump-forward, the grammar's forced tokens follow the sampled one
                choices = with_forced(seq, choice, len(seq.output_ids) - len(state.times.token_times))
            first_step = len(seq.output_ids) - len(choices)
            for j, c in enumerate(choices):
                last = j == len(choices) - 1
                state.times.token_times.append(end)
                delta = self._postprocess(state, seq, c.token_id, last)
                cut = state.stop_reason is not None
                if cut and seq.finish_reason is None:
                    stopped.append(sid)
                if cut and not last:  # a stop string inside the step: later tokens are dropped
                    state.token_limit = len(state.times.token_times)
                state.handle._push(StepEvent(
                    request_id=seq.request_id, phase=e.phase, step=first_step + j,
                    token_id=c.token_id, token_text=text(c.token_id), text_delta=delta,
                    token_prob=c.prob,
                    top_candidates=[Candidate(i, text(i), p, _log(p))
                                    for i, p in zip(c.top_ids, c.top_probs)],
                    start_s=state.pending_start_s, end_s=end,
                    num_tokens=e.num_new + state.pending_tokens, num_steps=1 + state.pending_steps,
                    kv_tokens=runner_output.kv_tokens.get(sid, 0), kv_bytes=state.last_kv_bytes,
                    cached_tokens=max(0, seq.num_cached_tokens) if e.phase == "prefill" else 0,
                    batch_size=len(batch.request_ids) if batch is not None else 1,
                    finish_reason=_reason(seq, state) if last or cut else None,
                    memory=memory, batch=batch, block_table=e.block_table,
                    num_drafted=len(e.draft_ids), draft_accepted=j < accepted,
                    tokens_in_step=len(choices), **token_marks(seq, first_step + j, text)))
                if cut:
                    break
            state.pending_start_s, state.pending_tokens, state.pending_steps = None, 0, 0
        return stopped

    def _postprocess(self, state: RequestState, seq: Sequence, token: int,
                     last: bool = True) -> str:
        """Detokenize, cut at a stop string; return the text delta that is safe to show.
        ``last``: the step's last token for this request (a verified step brings several)."""
        state.detok.add(token)
        if seq.finish_reason is not None and last:
            state.detok.finish()
        text = state.detok.text
        hit = state.stop_matcher.find(text, state.emitted_len)
        if hit is not None and _string_stop_wins(seq, last):
            text = text[:hit[0]]
            state.detok.text = text
            state.stop_reason = hit[1]
        done = (seq.finish_reason is not None and last) or state.stop_reason is not None
        end = len(text) if done else state.stop_matcher.safe_end(text)
        end = max(end, state.emitted_len)
        delta = text[state.emitted_len:end]
        state.emitted_len = end
        return delta

    def finish(self, seq: Sequence, now_s: float) -> RequestOutput | None:
        """Close a finished request: build its output, count it, and wake its caller (for a
        sample or beam, once the last sequence of its request has finished)."""
        if seq.group is not None:
            return self._finish_group(seq, now_s)
        state = self.states.pop(seq.request_id, None)
        if state is None:
            return None
        reason = _reason(seq, state)
        state.times.finished = now_s
        text = state.detok.text if reason.ok else state.detok.text[:state.emitted_len]
        output = RequestOutput(
            request_id=seq.request_id, prompt_token_ids=list(seq.prompt_ids),
            token_ids=list(seq.output_ids[:state.token_limit]), text=text, finish_reason=reason,
            outputs=[CompletionOutput(0, text, list(seq.output_ids[:state.token_limit]),
                                      seq.cumulative_logprob, reason)],
            error=self._error_message(seq) if reason is FinishReason.ERROR else None,
            metrics=RequestMetrics.from_times(state.times, len(seq.prompt_ids),
                                              max(0, seq.num_cached_tokens)),
            kv_cache_bytes=state.last_kv_bytes,
            stop_reason=state.stop_reason if state.stop_reason is not None else seq.stop_reason,
            use_kv_cache=seq.use_kv_cache, memory=state.last_memory,
            deltas=[e.text_delta for e in state.handle.events], source=seq.source,
            speculative=seq.spec.summary() if seq.spec is not None else None,
            structured=seq.structured.summary() if seq.structured is not None else None)
        self.counts[reason.outcome] += 1
        if self.rolling is not None:
            self.rolling.add(output)
        for listener in self.listeners:
            listener(output)
        state.handle._finish(output)
        return output

    def _finish_group(self, seq: Sequence, now_s: float) -> RequestOutput | None:
        g = seq.group
        if not g.done or g.request_id not in self.states:
            return None
        state = self.states.pop(g.request_id)
        state.times.finished = now_s
        outs, deltas = self.groups.outputs(g)
        reason = g.aborted or (outs[0].finish_reason if outs else FinishReason.ABORT)
        failed = next((s for s in g.seqs if s.error is not None), None)
        best = outs[0] if outs else CompletionOutput(0, "", [], 0.0, reason)
        metrics = RequestMetrics.from_times(state.times, len(seq.prompt_ids),  # per step
                                            max(0, g.seqs[0].num_cached_tokens))
        output = RequestOutput(
            request_id=g.request_id, prompt_token_ids=list(seq.prompt_ids),
            token_ids=list(best.token_ids), text=best.text, finish_reason=reason,
            error=self._error_message(failed) if reason is FinishReason.ERROR else None,
            metrics=metrics, kv_cache_bytes=state.last_kv_bytes,
            stop_reason=best.token_ids[-1] if best.finish_reason == FinishReason.STOP
            and best.token_ids and g.beam is not None else next(
                (s.stop_reason for s in g.seqs if s.index == best.index), None),
            use_kv_cache=seq.use_kv_cache, memory=state.last_memory, deltas=deltas, outputs=outs,
            source=seq.source)
        self.counts[FinishReason(reason).outcome] += 1
        if self.rolling is not None:
            self.rolling.add(output)
        for listener in self.listeners:
            listener(output)
        state.handle._finish(output)
        return output

    @staticmethod
    def _error_message(seq: Sequence) -> str:
        """A short message that is safe to show a client. An unexpected exception gives only
        its type and the request id; its traceback goes to the server log under that id."""
        exc = seq.error
        if exc is None:
            return "the request failed"
        if type(exc).__name__ == "OutOfMemoryError":
            return "out of memory: the request did not fit in the device's memory"
        log.error("request %s failed: %s", seq.request_id, type(exc).__name__,
                  exc_info=(type(exc), exc, exc.__traceback__))
        if isinstance(exc, (ValueError, RuntimeError)):
            return f"{type(exc).__name__}: {exc}"
        return (f"internal error ({type(exc).__name__}) in request {seq.request_id}; "
                "details are in the server log")


def _string_stop_wins(seq: Sequence, last: bool) -> bool:
    """Whether a stop string completed by this token ends the request.

    A step's tokens are checked in order and the first stop wins. The scheduler appends a
    verified step's tokens up to its first token-level stop (EOS or a stop token id), so the
    sequence's ``STOP`` finish reason belongs to the step's last token only: a stop string
    completed by an earlier token of the step comes first and wins. On the last token itself
    the token-level stop wins, as in plain decoding; ``max_tokens`` (``LENGTH``) never beats a
    stop string.
    """
    reason = seq.finish_reason
    if reason is None or reason == FinishReason.LENGTH:
        return True
    return reason == FinishReason.STOP and not last


def _reason(seq: Sequence, state: RequestState) -> FinishReason | None:
    """The request's finish reason: ``stop`` once a stop string matched (even on the token
    that also reached ``max_tokens``), else the scheduler's."""
    if state.stop_reason is not None and seq.finish_reason in (None, FinishReason.LENGTH):
        return FinishReason.STOP
    return FinishReason(seq.finish_reason) if seq.finish_reason is not None else None


def _log(p: float) -> float:
    import math

    return math.log(p) if p > 0 else float("-inf")
