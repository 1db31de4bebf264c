"""Output processing of requests with several samples or beams.

Samples stream like one-sequence requests, each with its own detokenizer and stop strings, and
every event carries the sample's ``index``. Beams do not stream text (the best beam changes from
step to step): each ranked step sends one event with the beam view (live and pruned beams,
finished hypotheses, shared blocks with their reference counts, logical against physical KV
tokens), and the text comes with the output. The request's output lists every returned answer
(:class:`engine.output.events.CompletionOutput`); its top-level text and ids are the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.core.finish_reason import FinishReason
from engine.core.sequence import Sequence
from engine.core.sequence_group import group_result
from engine.output.detokenizer import IncrementalDetokenizer, StopStringMatcher
from engine.output.events import Candidate, CompletionOutput, StepEvent
from engine.structured.bookkeeping import token_marks


@dataclass
class SampleText:
    """What one sample has shown: its detokenizer, stop strings and streamed length."""

    detok: IncrementalDetokenizer
    stop_matcher: StopStringMatcher
    emitted_len: int = 0
    stop_reason: str | None = None
    deltas: list[str] = field(default_factory=list)


class GroupOutputs:
    """Per-sample text state of the group requests an :class:`OutputProcessor` follows.

    Args:
        tokenizer: the model's tokenizer.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.samples: dict[str, dict[int, SampleText]] = {}

    def _sample(self, seq: Sequence) -> SampleText:
        texts = self.samples.setdefault(seq.request_id, {})
        if seq.index not in texts:
            texts[seq.index] = SampleText(IncrementalDetokenizer(self.tokenizer),
                                          StopStringMatcher(seq.params.stop))
        return texts[seq.index]

    def process(self, proc, e, state, runner_output, batch, memory) -> list[str]:
        """Events of one scheduled sequence of a group (after the scheduler's bookkeeping).

        Args:
            proc: the :class:`engine.output.output_processor.OutputProcessor` (token texts).
            e: the :class:`ScheduledSeq`.
            state: the request's :class:`RequestState`.

        Returns:
            Sequence ids a stop string ended.
        """
        seq, g = e.seq, e.seq.group
        sid = seq.seq_id
        if sid in runner_output.errors:
            return []
        start, end = runner_output.spans.get(sid, (runner_output.start_s, runner_output.end_s))
        common = dict(request_id=g.request_id, phase=e.phase, start_s=state.pending_start_s or start,
                      end_s=end, num_tokens=e.num_new + state.pending_tokens,
                      num_steps=1 + state.pending_steps, kv_tokens=runner_output.kv_tokens.get(sid, 0),
                      kv_bytes=state.last_kv_bytes,
                      batch_size=len(batch.request_ids) if batch is not None else 1,
                      memory=memory, batch=batch, block_table=list(seq.block_table))
        text = proc.token_text
        if g.beam is not None:
            if not g.view_changed:
                return []
            g.view_changed = False
            self._token_time(state, end)
            view = g.view or {}
            best = (view.get("live") or [{}])[0].get("token_ids") or \
                ((view.get("finished") or [{}])[0].get("token_ids") or [0])
            tok = best[-1]
            state.handle._push(StepEvent(
                step=g.steps - 1, token_id=tok, token_text=text(tok), text_delta="",
                token_prob=1.0, top_candidates=[], beams=view,
                finish_reason=self.finish_reason(g) if g.done else None, **common))
            state.pending_start_s, state.pending_tokens, state.pending_steps = None, 0, 0
            return []
        if runner_output.group_samples.get(sid) is not None:
            seqs = [s for s in g.seqs if len(s.output_ids) == 1]
            choices = runner_output.group_samples[sid]
        elif sid in runner_output.sampled:
            seqs, choices = [seq], [runner_output.sampled[sid]]
        else:  # an earlier chunk of the prompt: counted with the chunk that samples
            state.pending_tokens += e.num_new
            state.pending_steps += 1
            return []
        self._token_time(state, end)
        stopped = []
        for s, choice in zip(seqs, choices):
            st = self._sample(s)
            delta = self._text_delta(st, s, choice.token_id)
            if st.stop_reason is not None and s.finish_reason is None:
                stopped.append(s.seq_id)
            st.deltas.append(delta)
            reason = _reason(s, st)
            state.handle._push(StepEvent(
                step=len(s.output_ids) - 1, token_id=choice.token_id,
                token_text=text(choice.token_id), text_delta=delta, token_prob=choice.prob,
                top_candidates=[Candidate(i, text(i), p, _log(p))
                                for i, p in zip(choice.top_ids, choice.top_probs)],
                finish_reason=reason, index=s.index,
                **{**common, "block_table": list(s.block_table)},
                **token_marks(s, len(s.output_ids) - 1, text)))
        state.pending_start_s, state.pending_tokens, state.pending_steps = None, 0, 0
        return stopped

    @staticmethod
    def _token_time(state, end: float) -> None:
        """One output time per step for the whole group (the metrics count steps)."""
        times = state.times.token_times
        if not times or times[-1] != end:
            times.append(end)

    @staticmethod
    def _text_delta(st: SampleText, seq: Sequence, token: int) -> str:
        st.detok.add(token)
        if seq.finish_reason is not None:
            st.detok.finish()
        text = st.detok.text
        hit = st.stop_matcher.find(text, st.emitted_len)
        if hit is not None and seq.finish_reason in (None, FinishReason.LENGTH):
            text = text[:hit[0]]
            st.detok.text = text
            st.stop_reason = hit[1]
        done = seq.finish_reason is not None or st.stop_reason is not None
        end = len(text) if done else st.stop_matcher.safe_end(text)
        end = max(end, st.emitted_len)
        delta = text[st.emitted_len:end]
        st.emitted_len = end
        return delta

    def finish_reason(self, g) -> FinishReason:
        """The request's reason: the first answer's (``abort`` / ``error`` when it ended so)."""
        if g.aborted is not None:
            return g.aborted
        return group_result(g)[0][2]

    def outputs(self, g) -> tuple[list[CompletionOutput], list[str]]:
        """Every returned answer of a finished group, the top-level one first, and the text
        deltas streamed for that first one (none for beams)."""
        texts = self.samples.pop(g.request_id, {})
        outs = []
        for ids, logprob, reason, score, index in group_result(g):
            st = texts.get(index) if g.beam is None else None
            if st is not None:
                ok = FinishReason(reason).ok
                text = st.detok.text if ok else st.detok.text[:st.emitted_len]
                if st.stop_reason is not None and reason in (FinishReason.LENGTH,):
                    reason = FinishReason.STOP
            else:
                d = IncrementalDetokenizer(self.tokenizer)
                for t in ids:
                    d.add(t)
                d.finish()
                text = d.text
            outs.append(CompletionOutput(index=index, text=text, token_ids=list(ids),
                                         cumulative_logprob=logprob, finish_reason=reason,
                                         score=score))
        first = texts.get(outs[0].index) if outs and g.beam is None else None
        return outs, (list(first.deltas) if first is not None else [])


def _reason(seq: Sequence, st: SampleText):
    if st.stop_reason is not None and seq.finish_reason in (None, FinishReason.LENGTH):
        return FinishReason.STOP
    return FinishReason(seq.finish_reason) if seq.finish_reason is not None else None


def _log(p: float) -> float:
    import math

    return math.log(p) if p > 0 else float("-inf")
