"""A long prompt shares every step (no model, made-up runner outputs): running decodes get their
token first, a prefill chunk and a no-cache recompute are capped at
``long_prefill_token_threshold`` while anyone else runs or waits, and a request that arrives
meanwhile joins the next step. Alone in the engine, a prompt's chunk may be larger near its
start (``Scheduler.lone_chunk_tokens``)."""

from engine.core.scheduler_output import SchedulerOutput
from tests.engine.core.test_scheduler import make, runner_output, seq, step


def sharing(budget=32, cap=8, **kw):
    sched, bm = make(budget=budget, num_blocks=128, **kw)
    sched.long_prefill_token_threshold = cap
    return sched, bm


def rows(so: SchedulerOutput):
    return [(e.seq.seq_id, e.num_new, e.phase) for e in so.all_entries]


def test_a_long_prefill_takes_capped_chunks_and_a_newcomer_joins_the_next_step():
    sched, _ = sharing(budget=32, cap=8)
    long = seq("long", 200)
    sched.add(long)
    so, _ = step(sched)
    assert rows(so) == [("long", 32, "prefill")]  # alone at its start: the whole budget
    sched.add(seq("small", 4, max_tokens=3, first=500))
    so, _ = step(sched)
    assert rows(so) == [("long", 8, "prefill"), ("small", 4, "prefill")]
    so, _ = step(sched)
    # the small request's decode comes first, then the long prompt's next chunk
    assert rows(so) == [("small", 1, "decode"), ("long", 8, "prefill")]
    so, _ = step(sched)
    assert rows(so) == [("small", 1, "decode"), ("long", 8, "prefill")]  # its last token
    so, _ = step(sched)
    # alone again, 56 tokens in: 14 = the largest c with c · (56 + c) <= 32²
    assert rows(so) == [("long", 14, "prefill")] == [("long", sched.lone_chunk_tokens(56), "prefill")]


def test_without_a_free_seat_a_waiting_request_does_not_cap_the_lone_prompt():
    """Capping is for the others: with every seat taken the waiting request cannot join the
    next step anyway, so the lone prompt keeps its larger chunks and is done sooner."""
    sched, _ = sharing(budget=32, cap=8, max_seqs=1)
    sched.add(seq("long", 100))
    so, _ = step(sched)
    assert rows(so) == [("long", 32, "prefill")]
    sched.add(seq("small", 4, first=500))
    so, _ = step(sched)
    assert rows(so) == [("long", 19, "prefill")] and len(sched.waiting) == 1  # 19 · 51 <= 32²


def test_a_lone_chunk_shrinks_with_its_position_to_the_cap():
    """The engine's budget (512) and cap (128): the whole budget at a prompt's start, then less
    as the chunk's attention reads more keys (c · (position + c) <= 512²), never below the cap
    nor above the budget."""
    sched, _ = sharing(budget=512, cap=128)
    got = {p: sched.lone_chunk_tokens(p) for p in (0, 256, 512, 1024, 1500, 2000, 7000)}
    assert got == {0: 512, 256: 399, 512: 316, 1024: 212, 1500: 158, 2000: 128, 7000: 128}
    assert all(c * (p + c) <= 512 ** 2 for p, c in got.items() if c > 128)
    sched.long_prefill_token_threshold = 0   # no cap at all: chunks are the budget's
    assert sched._cap(10_000, True, 7000) == 10_000


def test_without_a_cap_the_running_prefill_takes_the_whole_budget():
    sched, _ = sharing(budget=32, cap=0)
    sched.add(seq("long", 100))
    step(sched)
    sched.add(seq("small", 4, first=500))
    so, _ = step(sched)
    assert rows(so) == [("long", 32, "prefill")]  # what the cap is for: "small" waited


def test_running_prefills_leave_one_chunk_of_room_while_requests_wait():
    sched, _ = sharing(budget=24, cap=8)
    for i in range(3):
        sched.add(seq(f"p{i}", 100, first=1000 * (i + 1)))
    so, _ = step(sched)
    assert rows(so) == [("p0", 8, "prefill"), ("p1", 8, "prefill"), ("p2", 8, "prefill")]
    sched.add(seq("small", 4, first=9000))
    so, _ = step(sched)
    # the running prefills leave one chunk for the newcomer; p2 gets what it did not use
    assert rows(so) == [("p0", 8, "prefill"), ("p1", 8, "prefill"), ("small", 4, "prefill"),
                        ("p2", 4, "prefill")]


def test_decodes_come_before_prefill_chunks_when_the_budget_is_short():
    sched, _ = sharing(budget=8, cap=8)
    sched.add(seq("long", 100))
    sched.add(seq("d", 2, max_tokens=20, first=500))
    so, _ = step(sched)
    assert rows(so) == [("long", 8, "prefill")]  # d arrived with the budget spent
    so, _ = step(sched)
    assert rows(so) == [("d", 2, "prefill"), ("long", 6, "prefill")]  # one chunk kept for d
    so, _ = step(sched)
    assert rows(so) == [("d", 1, "decode"), ("long", 7, "prefill")]  # the decode first


def test_a_no_cache_recompute_counts_against_the_budget_in_capped_pieces():
    sched, bm = sharing(budget=16, cap=8)
    a = seq("a", 20, max_tokens=2)
    a.use_kv_cache = False
    sched.add(a)
    pieces = []
    while not a.output_ids:
        so, _ = step(sched)
        pieces.append((so.recompute[0].num_computed, so.recompute[0].num_new,
                       so.recompute[0].samples))
    assert pieces == [(0, 16, False), (16, 4, True)]  # alone: whole-budget pieces
    assert a.num_computed == 0  # the next token recomputes everything again
    sched.add(seq("small", 4, first=500))
    so, _ = step(sched)
    assert rows(so) == [("small", 4, "prefill"), ("a", 8, "decode")] or \
        rows(so) == [("a", 8, "decode"), ("small", 4, "prefill")]
    assert so.num_tokens <= 16 and so.recompute[0].num_computed == 0
    assert a.block_table == [] and bm.num_free == 128 - len(sched.running[-1].block_table)


def test_a_no_cache_request_waits_when_the_budget_is_spent():
    sched, _ = sharing(budget=8, cap=8)
    sched.add(seq("long", 100))
    b = seq("b", 6, first=500)
    b.use_kv_cache = False
    sched.add(b)
    so = sched.schedule()
    assert rows(so) == [("long", 8, "prefill")] and list(sched.waiting) == [b]
    sched.update_from_output(so, runner_output(so))
