"""Groups of sequences (samples, beams) in the scheduler and block manager, with made-up runner
outputs and no model: forks share blocks, copy-on-write, admission, preemption and ends as one
unit, reference counts back to zero; the beam ranking rule on hand-made scores; bad values."""

import math

import pytest

from engine import FinishReason, SamplingParams
from engine.core.beam_search import BeamSearch
from engine.core.block_manager import BlockManager
from engine.core.scheduler import Scheduler
from engine.core.sequence import SequenceStatus
from engine.core.sequence_group import kv_sharing, new_group
from engine.worker.runner_output import ModelRunnerOutput, SampleResult
from engine.params import MAX_SEQS_PER_REQUEST, sample_seed

EOS = 2


def make(num_blocks=64, block_size=4, budget=64, max_seqs=8):
    bm = BlockManager(num_blocks, block_size, True)
    return Scheduler(bm, {EOS}, max_num_seqs=max_seqs, max_num_batched_tokens=budget), bm


def group(rid, n_prompt, first=100, **params):
    p = SamplingParams(**{"temperature": 1.0, "max_tokens": 8, **params})
    return new_group(rid, list(range(first, first + n_prompt)), p, [None] * p.group_width,
                     {EOS}, 10_000)


def output(so, tokens=None, beams=None):
    """Made-up results: every sampling row draws ``tokens`` (one per sample at the fork); a beam
    proposes ``beams(seq)`` = (ids, logprobs)."""
    out = ModelRunnerOutput(start_s=0.0, end_s=0.0)
    for e in so.entries:
        s, rid = e.seq, e.seq.seq_id
        if not e.samples:
            continue
        if s.group is not None and s.group.beam is not None:
            out.beam_candidates[rid] = beams(s)
        elif s.group is not None and not s.group.forked:
            out.group_samples[rid] = [SampleResult(t, 0.5, [t], [0.5])
                                      for t in (tokens or range(10, 10 + s.group.width))]
        else:
            out.sampled[rid] = SampleResult(7, 0.5, [7], [0.5])
    return out


def step(sched, **kw):
    so = sched.schedule()
    assert so is not None
    return so, sched.update_from_output(so, output(so, **kw))


def refs(bm):
    return sum(b.ref_count for b in bm.blocks)


def test_samples_fork_after_one_prefill_and_copy_the_shared_last_block():
    sched, bm = make()
    head = group("r", 6, n=3)  # 6 tokens: one full block of 4 and half of the second
    sched.add(head)
    so, _ = step(sched)
    assert [e.seq.seq_id for e in so.entries] == ["r#0"]  # the prompt, once
    seqs = head.group.seqs
    assert [s.seq_id for s in seqs] == ["r#0", "r#1", "r#2"]
    assert [s.output_ids for s in seqs] == [[10], [11], [12]]
    assert all(s.block_table == head.block_table for s in seqs)  # forked: shared
    assert [bm.blocks[b].ref_count for b in head.block_table] == [3, 3]
    assert bm.stats().used == 2
    shared = head.block_table[1]
    so, _ = step(sched)
    # each sample writes its first token into the half-full block: two copy it, the last
    # holder writes in place
    assert len(so.blocks_to_copy) == 2
    assert {s for s, _ in so.blocks_to_copy} == {shared}
    assert shared in [s.block_table[1] for s in seqs] and bm.blocks[shared].ref_count == 1
    tables = [s.block_table for s in seqs]
    assert len({t[0] for t in tables}) == 1 and len({t[1] for t in tables}) == 3
    assert bm.blocks[tables[0][0]].ref_count == 3
    share = kv_sharing(seqs, bm)
    assert share["logical_tokens"] == 3 * 8 and share["physical_blocks"] == 4
    while sched.has_work():
        step(sched)
    assert refs(bm) == 0 and bm.stats().used == 0


def test_a_fresh_group_waits_until_blocks_for_every_sequence_fit():
    sched, bm = make(num_blocks=5, block_size=4)
    from engine.core.sequence import Sequence
    plain = Sequence(seq_id="p", prompt_ids=list(range(300, 310)),
                     params=SamplingParams(temperature=0, max_tokens=20))
    sched.add(plain)  # a one-sequence request holding 3 blocks
    step(sched)
    assert bm.num_free == 2
    head = group("g", 6, n=3)  # 2 prompt blocks, +2 for the other samples' copies = 4
    sched.add(head)
    so, _ = step(sched)
    assert head.status is SequenceStatus.WAITING  # 4 > 2 free blocks
    sched.finish_requests(["p"], FinishReason.ABORT)
    so, _ = step(sched)
    assert head.status is SequenceStatus.RUNNING


def test_preemption_takes_the_whole_group_and_it_comes_back_together():
    # 15 blocks hold the three samples unshared at full length (3 x 18 tokens), not the
    # late request as well
    sched, bm = make(num_blocks=15, block_size=4, max_seqs=8)
    from engine.core.sequence import Sequence
    early = Sequence(seq_id="early", prompt_ids=list(range(700, 712)),
                     params=SamplingParams(temperature=0, max_tokens=12))
    sched.add(early)
    step(sched)
    head = group("g", 6, n=3, max_tokens=12)  # the newest: the one preempted
    sched.add(head)
    step(sched)  # fork: 3 samples sharing 2 blocks
    preempted = []
    for _ in range(40):
        if not sched.has_work():
            break
        so, _ = step(sched)
        preempted += so.preempted
        g_state = {s.status for s in head.group.live}
        assert len(g_state) <= 1  # never some samples running and others waiting
    assert any(s.group is head.group for s in preempted)
    assert {s.seq_id for s in preempted if s.group is head.group} == {"g#0", "g#1", "g#2"}
    assert not sched.has_work()
    assert refs(bm) == 0 and bm.stats().used == 0
    assert all(len(s.output_ids) == 12 for s in head.group.seqs)


def test_abort_ends_every_sequence_of_the_request_and_frees_all_blocks():
    sched, bm = make()
    head = group("g", 6, n=4)
    sched.add(head)
    step(sched)
    step(sched)
    assert bm.stats().used > 0
    done = sched.finish_requests(["g"], FinishReason.ABORT)
    assert len(done) == 4 and all(s.finish_reason == "abort" for s in done)
    assert head.group.aborted == FinishReason.ABORT
    assert refs(bm) == 0 and bm.stats().used == 0 and not sched.has_work()


def test_a_stop_string_ends_one_sample_only():
    sched, bm = make()
    head = group("g", 6, n=2)
    sched.add(head)
    step(sched)
    done = sched.finish_sequences(["g#1"], FinishReason.STOP)
    assert [s.seq_id for s in done] == ["g#1"]
    assert head.group.seqs[0].status is SequenceStatus.RUNNING
    sched.finish_requests(["g"], FinishReason.ABORT)
    assert refs(bm) == 0


def test_an_error_in_one_beam_fails_the_request():
    sched, bm = make()
    head = group("g", 5, temperature=0, num_beams=3)
    sched.add(head)
    so = sched.schedule()
    out = ModelRunnerOutput(0.0, 0.0, errors={"g#0": RuntimeError("made-up")})
    done = sched.update_from_output(so, out)
    assert [s.finish_reason for s in done] == ["error"] and head.group.aborted == "error"
    assert refs(bm) == 0 and not sched.has_work()


def test_beams_fork_die_and_free_their_blocks():
    sched, bm = make()
    head = group("g", 6, temperature=0, num_beams=2, max_tokens=3)
    sched.add(head)
    # step 1: the prompt proposes 20 (-0.1) and 21 (-0.2): two beams
    step(sched, beams=lambda s: ([20, 21, 22, 23, 24, 25], [-0.1, -0.2, -3, -4, -5, -6]))
    beams = head.group.live
    assert sorted(b.output_ids for b in beams) == [[20], [21]]
    assert bm.blocks[beams[0].block_table[0]].ref_count == 2
    # step 2: both best continuations come from beam [20]: beam [21] dies
    def cands(s):
        if s.output_ids == [20]:
            return [30, 31, 32, 33, 34, 35], [-0.1, -0.2, -5, -6, -7, -8]
        return [40, 41, 42, 43, 44, 45], [-3.0, -4, -5, -6, -7, -8]
    so, finished = step(sched, beams=cands)
    assert [s.output_ids for s in finished] == [[21]]
    assert sorted(b.output_ids for b in head.group.live) == [[20, 30], [20, 31]]
    assert head.group.pruned[-1]["token_ids"] == [21]
    # step 3 reaches max_tokens: two hypotheses, the search ends, every block is free
    step(sched, beams=lambda s: ([50, 51, 52, 53, 54, 55], [-0.5, -0.9, -7, -8, -9, -10]))
    assert head.group.done and head.group.beam.done
    best = head.group.beam.best(2)
    assert [h.token_ids for h in best] == [[20, 30, 50], [20, 31, 50]]
    assert best[0].score == pytest.approx((-0.1 - 0.1 - 0.5) / 3, rel=1e-6)
    assert refs(bm) == 0 and not sched.has_work()


def test_beam_search_ranks_like_hugging_face():
    # length_penalty divides by the generated length (EOS included); early_stopping=True ends
    # as soon as num_beams hypotheses exist
    bs = BeamSearch(2, length_penalty=1.0, early_stopping=True, max_tokens=10, eos_ids={EOS})
    assert bs.candidates_per_beam == 4  # max(2, 1 + 1 EOS id) x 2 beams
    st = bs.step([([], 0.0)], [([EOS, 5, 6, 7], [-0.1, -0.2, -0.3, -0.4])])
    assert [h.token_ids for h in st.finished] == [[EOS]]
    assert [c.token for c in st.running] == [5, 6] and not st.done
    st = bs.step([([5], -0.2), ([6], -0.3)], [([EOS, 8, 9, 10], [-0.05, -1, -2, -3]),
                                              ([EOS, 8, 9, 10], [-0.01, -1, -2, -3])])
    assert st.done  # two hypotheses: early_stopping=True stops
    assert [h.token_ids for h in bs.best(2)] == [[EOS], [5, EOS]]
    assert bs.best(2)[1].score == pytest.approx(-0.25 / 2, rel=1e-6)
    # early_stopping=False: stops when the best running beam at its current length cannot beat
    # the worst hypothesis; "never" with length_penalty > 0 scores it at max_tokens instead
    for rule, done in ((False, True), ("never", False)):
        bs = BeamSearch(1, 1.0, rule, max_tokens=50, eos_ids={EOS})
        bs.step([([], 0.0)], [([EOS, 5], [-0.1, -2.0])])
        st = bs.step([([5], -2.0)], [([6, EOS], [-0.5, -3.0])])
        assert st.done is done


def test_sample_seeds_and_bad_values():
    assert sample_seed(7, 0) == 7 and sample_seed(7, 2) == 9 and sample_seed(2**63 - 1, 1) == 0
    assert SamplingParams(n=2, best_of=3).group_width == 3
    assert SamplingParams(temperature=0, num_beams=4).group_width == 4
    bad = [
        (dict(n=0), "n must be in"),
        (dict(n=3, best_of=2), "best_of must be in"),
        (dict(num_beams=MAX_SEQS_PER_REQUEST + 1, temperature=0), "num_beams must be in"),
        (dict(num_beams=4), "temperature must be 0 with beam search"),
        (dict(num_beams=2, n=3, temperature=0), "n must be at most num_beams"),
        (dict(num_beams=2, temperature=0, top_k=5), "top_k is not supported with beam search"),
        (dict(num_beams=2, temperature=0, stop=["x"]), "stop strings are not supported"),
        (dict(num_beams=2, temperature=0, early_stopping="sometimes"), "early_stopping must be"),
        (dict(n=2, temperature=0), "need temperature > 0"),
        (dict(length_penalty=math.inf), "length_penalty must be finite"),
    ]
    for kw, msg in bad:
        with pytest.raises(ValueError, match=msg):
            SamplingParams(**kw)
