"""The one input builder (:mod:`engine.worker.input_builder`): the packed row of a mixed step,
a bucket's static buffers, and their slot mapping, on hand-made sequences (no model)."""

import pytest
import torch

from engine import SamplingParams
from engine.core.scheduler_output import ScheduledSeq
from engine.core.sequence import Sequence
from engine.worker.input_builder import InputBuilder, slot_of, step_tokens, upload_ints

BS = 4


def seq(rid, n_prompt, blocks, computed, out=()):
    s = Sequence(rid, list(range(100, 100 + n_prompt)), SamplingParams())
    s.output_ids = list(out)
    s.block_table = list(blocks)
    s.num_computed = computed
    return s


@pytest.fixture
def builder():
    return InputBuilder(pool="the pool", block_size=BS, device="cpu", scratch_block=99)


def test_slot_of_is_block_times_size_plus_offset():
    table = [7, 3, 12]
    assert [slot_of(table, p, BS) for p in (0, 3, 4, 5, 9)] == [28, 31, 12, 13, 49]


def test_upload_ints_gives_one_view_per_list_in_order():
    views = upload_ints([[1, 2], [], [3], [4, 5, 6]], "cpu")
    assert [v.tolist() for v in views] == [[1, 2], [], [3], [4, 5, 6]]
    assert all(v.dtype == torch.long for v in views)
    assert views[0].untyped_storage().data_ptr() == views[3].untyped_storage().data_ptr()


def test_packed_row_of_a_prefill_chunk_a_decode_and_a_verification(builder):
    prefill = seq("p", 6, [5, 6], 0)                  # 6 prompt tokens, all new
    decode = seq("d", 5, [8, 2], 5, out=[7])          # its 6th token (position 5) is new
    verify = seq("v", 3, [4, 11], 3, out=[9])         # position 3 plus 2 drafts
    entries = [ScheduledSeq.of(prefill, 6), ScheduledSeq.of(decode, 1),
               ScheduledSeq(verify, 3, 3, "decode", True, [4, 11], draft_ids=[41, 42])]
    assert step_tokens(entries[2]) == [9, 41, 42]
    inp = builder.packed(entries)
    assert inp.num_tokens == 10
    assert inp.input_ids.tolist() == [[100, 101, 102, 103, 104, 105, 7, 9, 41, 42]]
    assert inp.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 5, 3, 4, 5]]
    # prefill in blocks 5, 6; decode position 5 in block 2; verification positions 3-5 in 4, 11
    assert inp.paged.new_slots.tolist() == [20, 21, 22, 23, 24, 25, 9, 19, 44, 45]
    assert inp.keep.tolist() == [5, 6, 7, 8, 9]      # last prompt token, decode, 1 + 2 drafts
    ctx = inp.paged
    assert ctx.pool == "the pool" and not ctx.decode_only
    assert ctx.decode_q.tolist() == [6] and ctx.decode_blocks.tolist() == [[8, 2]]
    assert ctx.decode_lens.tolist() == [6] and ctx.decode_max_len == 6
    assert ctx.decode_mask is None                   # one decode sequence: nothing to mask
    assert [(p.q_start, p.q_len, p.context_len, p.blocks.tolist(), p.verify)
            for p in ctx.prefills] == [(0, 6, 0, [5, 6], False), (7, 3, 3, [4, 11], True)]


def test_packed_decodes_of_different_lengths_are_masked(builder):
    a, b = seq("a", 2, [1], 2, out=[5]), seq("b", 6, [2, 3], 6, out=[6])
    inp = builder.packed([ScheduledSeq.of(a, 1), ScheduledSeq.of(b, 1)])
    ctx = inp.paged
    assert ctx.decode_only and ctx.decode_q.tolist() == [0, 1]
    assert ctx.decode_blocks.tolist() == [[1, 0], [2, 3]]   # padded with block 0
    assert ctx.decode_lens_host == (3, 7)
    assert ctx.decode_mask.shape == (2, 1, 1, 7)
    assert ctx.decode_mask[0, 0, 0].tolist() == [True] * 3 + [False] * 4


def test_a_step_of_prefill_chunks_only_keeps_no_row(builder):
    s = seq("c", 10, [1, 2, 3], 0)
    e = ScheduledSeq.of(s, 4)                          # a first chunk: does not sample
    assert not e.samples
    assert builder.packed([e]).keep.tolist() == []


def test_fill_writes_rows_slots_and_tables_and_pads_with_the_scratch_block(builder):
    scratch = builder.scratch_block
    a = seq("a", 3, [10], 3, out=[7])                 # position 3, block 10
    b = seq("b", 5, [20, 21], 5, out=[8])             # position 5 + one draft at 6
    bufs = builder.new_static(4, 3)
    assert bufs.key == (4, 3) and bufs.blocks.unique().tolist() == [scratch]
    used = builder.fill(bufs, [ScheduledSeq.of(a, 1),
                               ScheduledSeq(b, 2, 5, "decode", True, [20, 21], draft_ids=[55])])
    assert used == 3
    assert bufs.input_ids.tolist() == [[7, 8, 55, 0]]
    assert bufs.position_ids.tolist() == [[3, 5, 6, 0]]
    assert bufs.slots.tolist() == [43, 85, 86, scratch * BS]
    assert bufs.lens.tolist() == [4, 6, 7, 1]
    assert bufs.blocks.tolist() == [[10, scratch, scratch], [20, 21, scratch],
                                    [20, 21, scratch], [scratch] * 3]
    inp = builder.static_input(bufs)                  # the same buffers as a packed input
    assert inp.keep is bufs.rows and inp.paged.decode_max_len == 3 * BS
    assert inp.paged.decode_mask[1, 0, 0].tolist() == [True] * 6 + [False] * 6


def test_fill_refuses_more_rows_than_the_bucket(builder):
    bufs = builder.new_static(1, 2)
    entries = [ScheduledSeq.of(seq(r, 3, [1], 3, out=[7]), 1) for r in "ab"]
    with pytest.raises(IndexError, match="2 rows do not fit"):
        builder.fill(bufs, entries)
