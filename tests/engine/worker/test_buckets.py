"""The one bucket rule of the static backends (:mod:`engine.worker.buckets`)."""

from engine import SamplingParams
from engine.core.scheduler_output import ScheduledSeq
from engine.core.sequence import Sequence
from engine.worker.buckets import (BATCH_BUCKETS, Buckets, block_buckets, bucket_for,
                                   is_decode_step, rows_of)


def decode(rid, length, drafts=()):
    s = Sequence(rid, list(range(length)), SamplingParams())
    s.num_computed = length - 1
    return ScheduledSeq(s, 1 + len(drafts), length - 1, "decode", True, draft_ids=list(drafts))


def test_bucket_for_and_block_buckets():
    assert [bucket_for(n, BATCH_BUCKETS) for n in (1, 2, 3, 5, 9, 17, 32, 33)] == \
        [1, 2, 4, 8, 16, 32, 32, None]
    assert block_buckets(512) == (4, 8, 16, 32, 64, 128, 256, 512)
    assert block_buckets(3) == (4,) and block_buckets(5) == (4, 8)


def test_rows_count_drafts_and_decode_steps_are_told_apart():
    e = decode("a", 10, drafts=[1, 2, 3])
    assert rows_of(e) == 4 and is_decode_step(e)
    prefill = ScheduledSeq(e.seq, 5, 0, "prefill", True)
    assert rows_of(prefill) == 1 and not is_decode_step(prefill)


def test_key_is_rows_and_width_for_both_backends():
    graph = Buckets(BATCH_BUCKETS, block_buckets(64), block_size=16)
    compiled = Buckets(BATCH_BUCKETS, (64,), block_size=16)
    entries = [decode("a", 5), decode("b", 20), decode("c", 70)]   # 70 tokens: 5 blocks
    assert graph.key(entries) == (4, 8)
    assert compiled.key(entries) == (4, 64)           # the whole context's width
    assert graph.key([decode("v", 30, drafts=[1, 2, 3])]) == (4, 4)
    assert graph.key([decode(str(i), 5) for i in range(33)]) is None
    assert graph.key([decode("long", 64 * 16 + 1)]) is None
    assert graph.key([]) is None


def test_a_bucket_not_ready_is_skipped_for_the_next_larger_ready_one():
    rule = Buckets(BATCH_BUCKETS, (8,), block_size=16)
    three = [decode(str(i), 5) for i in range(3)]
    assert rule.key(three, ready=[1, 8]) == (8, 8)
    assert rule.key(three, ready=[1, 2]) is None
