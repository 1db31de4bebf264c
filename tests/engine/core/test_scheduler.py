"""The scheduler on its own: made-up runner outputs, no model (as vLLM tests its scheduler)."""

import pytest

from engine import FinishReason, SamplingParams
from engine.core.block_manager import BlockManager
from engine.core.contiguous_cache_manager import ContiguousCacheManager
from engine.core.scheduler import QueueFullError, Scheduler
from engine.core.scheduler_output import phase_of
from engine.core.sequence import Sequence, SequenceStatus
from engine.worker.runner_output import ModelRunnerOutput, SampleResult

EOS = 2


def seq(rid, n_prompt, max_tokens=8, first=100, **params):
    return Sequence(seq_id=rid, prompt_ids=list(range(first, first + n_prompt)),
                    params=SamplingParams(temperature=0, max_tokens=max_tokens, **params))


def make(num_blocks=64, block_size=4, budget=32, max_seqs=8, prefix=True, max_queue=32):
    bm = BlockManager(num_blocks, block_size, prefix)
    return Scheduler(bm, {EOS}, max_queue=max_queue, max_num_seqs=max_seqs,
                     max_num_batched_tokens=budget), bm


def runner_output(so, tokens=None, errors=()):
    """A made-up ModelRunnerOutput: token ``tokens.get(rid, 7)`` for every row that samples."""
    tokens = tokens or {}
    out = ModelRunnerOutput(start_s=0.0, end_s=0.0)
    for e in so.all_entries:
        rid = e.seq.seq_id
        if rid in errors:
            out.errors[rid] = RuntimeError("made-up failure")
        elif e.samples:
            out.sampled[rid] = SampleResult(tokens.get(rid, 7), 1.0, [tokens.get(rid, 7)], [1.0])
    return out


def step(sched, tokens=None, errors=()):
    so = sched.schedule()
    assert so is not None
    finished = sched.update_from_output(so, runner_output(so, tokens, errors))
    return so, finished


def test_admission_under_the_token_budget():
    sched, _ = make(budget=20)
    a, b, c = seq("a", 8), seq("b", 8, first=200), seq("c", 8, first=300)
    for s in (a, b, c):
        sched.add(s)
    so = sched.schedule()
    # a and b fit whole (16 tokens); c gets the 4 tokens left as a first chunk
    assert [(e.seq.seq_id, e.num_new) for e in so.entries] == [("a", 8), ("b", 8), ("c", 4)]
    assert [e.samples for e in so.entries] == [True, True, False]
    assert all(e.phase == "prefill" for e in so.entries)
    sched.update_from_output(so, runner_output(so))
    assert a.output_ids == [7] and b.output_ids == [7] and c.output_ids == []
    assert c.num_computed == 4 and a.num_computed == 8
    so = sched.schedule()
    assert [(e.seq.seq_id, e.num_new, e.phase) for e in so.entries] == [
        ("a", 1, "decode"), ("b", 1, "decode"), ("c", 4, "prefill")]


def test_admission_under_the_block_limit():
    sched, bm = make(num_blocks=5, block_size=4, budget=64)
    a, b = seq("a", 12), seq("b", 12, first=200)  # 3 blocks each; only 5 in the pool
    sched.add(a)
    sched.add(b)
    so = sched.schedule()
    assert [e.seq.seq_id for e in so.entries] == ["a"]
    assert b.status is SequenceStatus.WAITING and len(sched.waiting) == 1
    assert bm.num_free == 2


def test_running_limit():
    sched, _ = make(max_seqs=2, budget=64)
    for i in range(3):
        sched.add(seq(f"r{i}", 4, first=100 * (i + 1)))
    so = sched.schedule()
    assert len(so.entries) == 2 and len(sched.waiting) == 1


def test_chunked_prefill_then_decode():
    sched, bm = make(budget=8, block_size=4)
    a = seq("a", 20, max_tokens=3)
    sched.add(a)
    chunks = []
    while not a.output_ids:
        so, _ = step(sched)
        chunks.append(so.entries[0].num_new)
    assert chunks == [8, 8, 4] and a.num_computed == 20
    so, _ = step(sched)
    assert so.entries[0].num_new == 1 and so.entries[0].phase == "decode"
    assert a.num_computed == 21 and len(a.block_table) == 6


def test_preemption_frees_blocks_and_recomputes():
    sched, bm = make(num_blocks=6, block_size=4, budget=64)
    a, b = seq("a", 8, max_tokens=20), seq("b", 8, max_tokens=20, first=200)
    sched.add(a)
    sched.add(b)
    step(sched)  # both prefilled: 2 blocks each, 2 free
    for _ in range(8):  # decoding grows both until the pool runs out
        so, _ = step(sched)
        if so.preempted:
            break
    assert so.preempted == [b] and b.status is SequenceStatus.WAITING
    assert b.block_table == [] and b.num_computed == 0 and sched.num_preemptions == 1
    assert b.output_ids  # its tokens are kept: it is recomputed, not restarted
    kept = list(b.output_ids)
    # finish a, then b comes back: its prompt and output are recomputed as a prefill (its
    # prompt's two full blocks are still in the prefix cache, so only the rest is computed)
    sched.finish_requests(["a"], FinishReason.ABORT)
    so = sched.schedule()
    entry = so.entries[0]
    assert entry.seq is b and entry.num_computed == 8 and entry.num_new == len(kept)
    assert entry.samples and entry.phase == "prefill" == phase_of(entry.num_new, len(kept))


def test_finish_on_eos_length_and_stop_token():
    sched, bm = make()
    a, b = seq("a", 4, max_tokens=10), seq("b", 4, max_tokens=2, first=200)
    c = seq("c", 4, max_tokens=10, first=300, stop_token_ids=[9])
    for s in (a, b, c):
        sched.add(s)
    so, finished = step(sched, tokens={"a": EOS, "c": 9})
    assert {s.seq_id for s in finished} == {"a", "c"}
    assert a.finish_reason is FinishReason.STOP and a.stop_reason == EOS
    assert c.finish_reason is FinishReason.STOP and c.stop_reason == 9
    _, finished = step(sched)
    assert finished == [b] and b.finish_reason is FinishReason.LENGTH
    assert sched.schedule() is None and bm.num_free == 64


def test_ignore_eos_keeps_going():
    sched, _ = make()
    a = seq("a", 4, max_tokens=3, ignore_eos=True)
    sched.add(a)
    for _ in range(3):
        step(sched, tokens={"a": EOS})
    assert a.output_ids == [EOS, EOS, EOS] and a.finish_reason is FinishReason.LENGTH


def test_context_window_ends_with_length():
    sched, _ = make()
    a = seq("a", 4, max_tokens=None)
    a.context_len = 6
    sched.add(a)
    step(sched)
    _, finished = step(sched)
    assert finished == [a] and a.finish_reason is FinishReason.LENGTH and a.num_tokens == 6


def test_abort_and_errors_free_every_block():
    sched, bm = make()
    a, b, c = seq("a", 9), seq("b", 9, first=200), seq("c", 9, first=300)
    for s in (a, b, c):
        sched.add(s)
    _, finished = step(sched, errors={"b"})
    assert finished == [b] and b.finish_reason is FinishReason.ERROR
    assert isinstance(b.error, RuntimeError)
    assert sched.finish_requests(["a", "nope"], FinishReason.ABORT) == [a]
    assert a.finish_reason is FinishReason.ABORT and a.block_table == []
    waiting = seq("w", 4, first=400)
    sched.add(waiting)
    assert sched.finish_requests(["w"], FinishReason.ABORT) == [waiting]
    assert not sched.waiting
    sched.finish_requests(["c"], FinishReason.ABORT)
    assert bm.num_free == 64 and not sched.has_work()


def test_prefix_cache_registration_and_reuse():
    sched, bm = make(block_size=4)
    a = seq("a", 10, max_tokens=1)
    sched.add(a)
    step(sched)  # a finishes (max_tokens 1); its two full blocks stay cached
    assert bm.stats().cached == 2
    b = seq("b", 10, max_tokens=1)  # the same prompt
    sched.add(b)
    so = sched.schedule()
    assert so.entries[0].num_computed == 8 and so.entries[0].num_new == 2
    assert bm.hit_tokens == 8


def test_salted_requests_do_not_share_prefix_blocks():
    sched, bm = make(block_size=4)
    a = seq("a", 10, max_tokens=1)
    a.cache_salt = "alice"
    sched.add(a)
    step(sched)
    b = seq("b", 10, max_tokens=1)
    b.cache_salt = "bob"
    sched.add(b)
    so = sched.schedule()
    assert so.entries[0].num_computed == 0 and so.entries[0].num_new == 10


def test_queue_full():
    sched, _ = make(max_queue=1)
    sched.add(seq("a", 4))
    with pytest.raises(QueueFullError, match="queue is full"):
        sched.add(seq("b", 4))


def test_contiguous_cache_manager_runs_one_at_a_time_whole_prompts():
    sched = Scheduler(ContiguousCacheManager(), {EOS}, max_num_seqs=1,
                      max_num_batched_tokens=8192)
    a, b = seq("a", 600, max_tokens=2), seq("b", 4, max_tokens=2, first=5000)
    sched.add(a)
    sched.add(b)
    so, _ = step(sched)
    assert [(e.seq.seq_id, e.num_new) for e in so.entries] == [("a", 600)]
    so, finished = step(sched)
    assert finished == [a]
    so = sched.schedule()
    assert so.entries[0].seq is b and so.entries[0].block_table == []


def test_requests_without_a_cache_recompute_everything():
    sched, bm = make()
    a = seq("a", 5, max_tokens=3)
    a.use_kv_cache = False
    sched.add(a)
    so, _ = step(sched)
    assert so.entries == [] and so.recompute[0].num_new == 5 and so.recompute[0].phase == "prefill"
    so, _ = step(sched)
    assert so.recompute[0].num_new == 6 and so.recompute[0].phase == "decode"
    assert a.num_computed == 0 and a.block_table == [] and bm.num_free == 64


def test_batch_info_is_computed_once_per_step():
    sched, bm = make(block_size=4)
    a, b = seq("a", 6), seq("b", 3, first=200)
    sched.add(a)
    sched.add(b)
    so = sched.schedule()
    info = sched.batch_info(so, 0, 0.0)
    assert info.request_ids == ["a", "b"] and info.new_tokens == [6, 3]
    assert info.prefill_tokens == 9 and info.decode_tokens == 0
    assert info.blocks_used == 3 and info.running == 2
    assert info.kv_utilization == pytest.approx(9 / 12)
