"""The continuous-batching section: block pool, block tables, recent-step strip, numbers (no browser)."""

from __future__ import annotations

import dataclasses
import json
import re

from app.render import batch as batch_view
from app.tabs.playground import frames as schema, handlers
from app.state.playground import Playground
from engine.core.batch_info import BatchInfo
from engine.protocol import BlockPoolSnapshot, EngineStats
from tests.support.fakes import FakeEngine, pool_snapshot

SNAP = pool_snapshot(block_size=16, num_blocks=8,
                     state=["used", "used", "used", "cached", "free", "used", "free", "used"],
                     tables=[{"request_id": "req-1", "blocks": [0, 1, 5], "tokens": 37},   # yours
                             {"request_id": "req-2", "blocks": [0, 2], "tokens": 20},      # shares block 0
                             {"request_id": "req-3", "blocks": [7], "tokens": 3}])


def step(i, ids, prefill=0, decode=None, **kw):
    return BatchInfo(step_id=i, start_s=float(i), request_ids=list(ids), prefill_tokens=prefill,
                     decode_tokens=len(ids) if decode is None else decode, **kw)


# ---- block pool ---------------------------------------------------------------------------------
def test_pool_cells_mark_yours_apart_from_other_requests():
    cells, per = batch_view.pool_cells(SNAP, {"req-1"})
    assert per == 1
    assert cells == ["mine", "mine", "other", "cached", "free", "mine", "free", "other"]
    # another student sees the same pool with their own blocks marked
    assert batch_view.pool_cells(SNAP, {"req-3"})[0] == ["other", "other", "other", "cached", "free",
                                                         "other", "free", "mine"]


def test_pool_html_has_one_square_per_block_with_owner_tooltips():
    out = batch_view.pool_html(SNAP, {"req-1"})
    assert out.count("class='bp-cell bp-") == 8 + 4  # 8 blocks + 4 legend swatches
    assert len(re.findall(r"bp-cell bp-mine' title", out)) == 3
    assert "block 5: your request — req-1 (you), logical block 2" in out
    assert "block 0: your request — req-1 (you), logical block 0; req-2, logical block 0" in out
    assert "8 blocks" in out and "16 tokens" in out and "your request (3)" in out


def test_large_pool_draws_several_blocks_per_cell():
    snap = pool_snapshot(block_size=16, state=["free"] * 4999 + ["used"],
                         tables=[{"request_id": "a", "blocks": [4999], "tokens": 1}])
    cells, per = batch_view.pool_cells(snap, {"a"}, max_cells=1000)
    assert per == 5 and len(cells) == 1000 and cells[-1] == "mine" and cells.count("mine") == 1
    assert "each square is 5 blocks" in batch_view.pool_html(snap, {"a"}, max_cells=1000)


def test_block_tables_list_yours_first_with_logical_to_physical_chips():
    out = batch_view.tables_html(SNAP, {"req-2"})
    rows = out.split("<div class='bt-row")[1:]
    assert len(rows) == 3
    assert "bt-you" in rows[0] and "req-2 · 20 tokens in 2 blocks" in rows[0]
    assert "bt-you" not in rows[1] + rows[2]
    assert "<sub>0</sub>0</span>" in rows[0] and "<sub>1</sub>2</span>" in rows[0]
    assert "logical block 1 → physical block 2: 4/16 tokens" in rows[0]  # the last block is partial
    assert "bt-shared" in rows[0] and "shared with another request" in rows[0]  # block 0 has two users
    assert "No request is running" in batch_view.tables_html(pool_snapshot(block_size=16, state=[]), set())


def test_block_tables_cap_rows_and_chips():
    snap = pool_snapshot(block_size=16, tables=[{"request_id": f"r{i}", "blocks": list(range(40)),
                                                 "tokens": 640} for i in range(12)])
    out = batch_view.tables_html(snap, set(), max_rows=8, max_chips=24)
    assert out.count("<div class='bt-row") == 8 and "4 more running requests" in out and "+16 blocks" in out


# ---- recent steps ----------------------------------------------------------------------------------
def test_step_phases_pick_newcomers_and_chunked_prefills():
    steps = batch_view.plain_steps([
        step(1, ["a"], prefill=30, decode=0),          # a prefills
        step(2, ["a", "b"], prefill=512, decode=1),    # b joins with a first chunk
        step(3, ["a", "b"], prefill=100, decode=1),    # b's last chunk (still prefill)
        step(4, ["a", "b", "c"], prefill=9, decode=2),  # c joins
        step(5, ["a", "b", "c"]),                       # all decode
    ])
    phases = batch_view.step_phases(steps)
    assert phases[0] == {"a": "prefill"}
    assert phases[1] == {"a": "decode", "b": "prefill"}
    assert phases[2] == {"a": "decode", "b": "prefill"}
    assert phases[3] == {"a": "decode", "b": "decode", "c": "prefill"}
    assert set(phases[4].values()) == {"decode"}


def test_strip_marks_your_cells_in_shared_steps():
    steps = batch_view.plain_steps([step(10, ["req-1"], prefill=12, decode=0),
                                    step(11, ["req-1", "req-2"], prefill=8, decode=1),
                                    step(12, ["req-1", "req-2"]), step(13, ["req-2"])])
    fig = batch_view.strip_figure(steps, {"req-2"})
    by_name = {t.name: t for t in fig.data}
    assert list(by_name) == ["your request: prefill", "your request: decode",
                             "other requests: prefill", "other requests: decode"]
    assert list(by_name["your request: prefill"].x) == [11]
    assert list(by_name["your request: decode"].x) == [12, 13]
    assert list(by_name["other requests: prefill"].x) == [10]
    assert list(by_name["other requests: decode"].x) == [11, 12]
    # cells stack in joining order: req-1 (joined first) at the bottom, req-2 on top
    assert list(by_name["your request: decode"].base) == [1, 0]
    assert list(by_name["other requests: decode"].base) == [0, 0]
    assert "req-2 (you): decode" in by_name["your request: decode"].hovertext[0]
    assert "step 12: 2 requests, 0 prefill + 2 decode tokens" in by_name["your request: decode"].hovertext[0]
    assert batch_view.strip_figure([], set()).layout.annotations  # the empty hint


def test_strip_keeps_its_legend_with_a_single_kind_of_cell():
    # a lone request whose prefill scrolled out: one non-empty trace, which Plotly would
    # show without any legend unless asked
    steps = batch_view.plain_steps([step(i, ["req-1"]) for i in range(20, 30)])
    fig = batch_view.strip_figure(steps, {"req-1"}, idle=True)
    assert sum(1 for t in fig.data if len(t.x)) == 1
    assert fig.layout.showlegend is True


# ---- numbers and the whole section -----------------------------------------------------------------
STATS = EngineStats(batching=True, batching_note="", running=2, waiting=1, blocks_total=728,
                    blocks_used=5, blocks_free=720, blocks_cached=3, preemptions=0, prefix_hit_rate=0.25)


def test_stats_line_has_the_issue_numbers():
    steps = batch_view.plain_steps([step(1, ["a", "b"], kv_utilization=0.875)])
    out = batch_view.stats_html(STATS, steps, queue_time_s=0.017)
    for text in ("running</span> <b>2", "waiting</span> <b>1", "5 / 728", "cached prefix</span> <b>3",
                 "empty</span> <b>717", "KV utilization</span> <b>88%", "preemptions</span> <b>0",
                 "prefix-cache hits</span> <b>25%", "your queue time</span> <b>17.0 ms"):
        assert text in out, text
    idle = batch_view.stats_html(dataclasses.replace(STATS, running=0), steps)
    assert "KV utilization</span> <b>–" in idle and "your queue time" not in idle


def test_kv_utilization_counts_a_shared_prefix_block_once():
    # req-1: 37 tokens in blocks 0, 1, 5 (16 + 16 + 5); req-2: 20 tokens in 0, 2 (block 0 shared, + 4);
    # req-3: 3 tokens in block 7; used blocks: 0, 1, 2, 5, 7 -> (16 + 16 + 4 + 5 + 3) / (5 * 16)
    assert batch_view.kv_utilization(SNAP) == (16 + 16 + 4 + 5 + 3) / 80
    assert batch_view.kv_utilization(pool_snapshot(block_size=16, state=["free"])) is None
    out = batch_view.batch_frame(dataclasses.replace(STATS, running=3), SNAP, [step(1, ["req-1"], kv_utilization=1.04)], set())
    assert "KV utilization</span> <b>55%" in out["batch_stats"]  # not the engine's double-counted 104%


def test_batch_frame_shows_the_note_when_the_model_cannot_batch():
    frame = batch_view.batch_frame(EngineStats(batching=False, batching_note="gpt2 architecture is "
                                               "served one request at a time"),
                                   BlockPoolSnapshot.empty(), [], set())
    assert "gpt2 architecture" in frame["batch_stats"] and frame["pool"] == ""
    full = batch_view.batch_frame(STATS, SNAP, [step(1, ["req-1"])], {"req-1"})
    assert set(full) == set(schema.BATCH_KEYS) and "bp-mine" in full["pool"]


# ---- the playground knows which requests are yours -------------------------------------------------
class BatchingFake(FakeEngine):
    """The fake engine plus the continuous-batching telemetry of ``LLMEngine``."""

    def __init__(self):
        super().__init__()
        self.recent_steps = [step(1, ["req-0", "other-7"])]

    def stats(self):
        return dataclasses.replace(STATS, finished=super().stats().finished, queue_max=32)

    def block_snapshot(self):
        return pool_snapshot(block_size=16, num_blocks=4, state=["used", "used", "free", "free"],
                             tables=[{"request_id": "req-0", "blocks": [0], "tokens": 10},
                                     {"request_id": "other-7", "blocks": [1], "tokens": 5}])


def test_session_request_ids_belong_to_their_session(tmp_path):
    pg = Playground(BatchingFake(), trace_dir=tmp_path, monitor=False)
    from engine import SamplingParams

    h = pg.submit("alice", "hi", SamplingParams())
    assert pg.session_request_ids("alice") == {h.request_id} and pg.session_busy("alice")
    assert pg.session_request_ids("bob") == set()
    pg.release("alice", h)
    assert pg.session_request_ids("alice") == {h.request_id}  # still "you" in the recent steps
    assert not pg.session_busy("alice")


def test_the_timer_draws_the_batching_section_after_a_short_answer(tmp_path):
    pg = Playground(BatchingFake(), trace_dir=tmp_path, monitor=False)
    frames = list(handlers.generate(pg, "alice", "chat", "Hi", [], "", 0.7, 0.95, 50, 0.0, 1.1, 32, -1, True))
    # an answer shorter than the timer's interval leaves the section to the timer
    assert not set(schema.BATCH_KEYS) & {k for f in frames for k in f}
    frame, seen = handlers.batch_tick_frame(pg, "alice", None)
    assert set(frame) == set(schema.BATCH_KEYS)
    assert frame["pool"].count("bp-cell bp-mine' title") == 1  # req-0 is alice's
    names = {t.name: list(t.x) for t in frame["strip"].data}
    assert names["your request: decode"] == [1] and names["other requests: decode"] == [1]


def test_a_streaming_answer_carries_the_timers_panels_that_changed(tmp_path, monkeypatch):
    """While a page's own answer streams, its timer pauses and the answer's frames carry the
    timer's outputs every ``TIMER_EVERY_S`` (here: every text frame): the device panel, the
    rolling table and the batching section when they changed since what the page got
    last (the section's numbers change with the streaming pages), as ops in the live channel's
    log: the pool's HTML once, then nothing while it is the same."""
    from app.tabs.playground import events

    for name in ("TIMER_EVERY_S", "TEXT_EVERY_S", "BATCH_MAX_AGE_S"):
        monkeypatch.setattr(handlers, name, 0.0)
    pg = Playground(BatchingFake(), trace_dir=tmp_path, monitor=False)
    pg.engine.script = "slow"  # one token per poll: a text frame each
    tick, seen = handlers.timer_frame(pg, "alice", None)  # what the page's timer sent before the run
    assert set(tick) == set(schema.TIMER_KEYS)
    assert handlers.timer_frame(pg, "alice", seen)[0] == {}  # nothing new
    frames = list(handlers.generate(pg, "alice", "raw", "Count:", [], "", 1.0, 1.0, 0, 0.0, 1.0, 32, -1, True,
                                    timer_seen=seen))
    assert not set(schema.TIMER_KEYS) & (set(frames[0]) | set(frames[-1]))
    carried = [f for f in frames[1:-1] if set(schema.TIMER_KEYS) & set(f)]
    assert len(carried) >= 3, [sorted(f) for f in frames]
    # the request was submitted (a new rolling row in this fake) and is alice's in the pool
    assert set(schema.TIMER_KEYS) - {"device"} <= set(carried[0])
    assert "bp-cell bp-mine' title" in carried[0]["pool"]
    assert all("rolling" not in f for f in carried[1:])  # unchanged since
    assert not any("device" in f for f in frames)  # no new device sample (no monitor here)
    updates = list(events.live_updates(iter(frames), "r", timer=True))
    assert [u[-1] for u in updates] == [events.TIMER_OFF] + [events.SKIP] * (len(updates) - 2) + [events.TIMER_ON]
    lines = {}  # the log's frames by number (a new part of the log repeats a few)
    for u in updates:
        for x in u[0].split("\n"):
            if x.startswith("{"):
                op = json.loads(x)
                if "_n" in op:  # not the template line
                    lines[op.pop("_n")] = op
    pools = [op["pool"] for op in lines.values() if "pool" in op]
    assert len(pools) == 1 and pools[0] == {"set": carried[0]["pool"]}


def test_the_timer_skips_an_unchanged_section_busy_or_not(tmp_path, monkeypatch):
    monkeypatch.setattr(handlers, "BATCH_MAX_AGE_S", 0.0)  # no drawing kept for the next tick
    pg = Playground(BatchingFake(), trace_dir=tmp_path, monitor=False)
    frame, seen = handlers.batch_tick_frame(pg, "bob", None)
    assert set(frame) == set(schema.BATCH_KEYS) and "bp-mine' title" not in frame["pool"]
    assert handlers.batch_tick_frame(pg, "bob", seen) == ({}, seen)
    pg.engine.recent_steps.append(step(2, ["other-7"]))
    frame, seen2 = handlers.batch_tick_frame(pg, "bob", seen)
    assert frame and seen2 != seen
    from engine import SamplingParams

    h = pg.submit("bob", "hi", SamplingParams())  # streaming: the timer still draws the section
    assert pg.session_busy("bob")
    frame, _ = handlers.batch_tick_frame(pg, "bob", None)
    assert "bp-mine" in frame["pool"]
    pg.release("bob", h)



def test_page_has_playground_and_lessons_tabs(tmp_path):
    from app.page import build_demo

    pg = Playground(BatchingFake(), trace_dir=tmp_path, monitor=False)
    demo = build_demo(pg)
    labels = [c.get("props", {}).get("label") for c in demo.config["components"]]
    assert "Playground" in labels and "Lessons" in labels
    ids = [c.get("props", {}).get("elem_id") for c in demo.config["components"]]
    assert {"block-pool", "block-tables", "step-strip", "batch-stats"} <= set(ids)


def test_step_phases_use_the_engine_record_when_present():
    from app.render.batch import step_phases

    steps = [{"request_ids": ["a", "b"], "phases": ["decode", "prefill"], "prefill_tokens": 30,
              "decode_tokens": 1}]
    assert step_phases(steps) == [{"a": "decode", "b": "prefill"}]


def test_pool_picture_of_an_engine_pool_drawn_in_cells():
    """A GPU-sized pool arrives from the engine in cells of several blocks: the picture counts
    blocks, not cells, and a request's blocks land in the right square."""
    from app.render.batch import PoolPicture

    snapshot = pool_snapshot(block_size=16, num_blocks=200_000, blocks_per_cell=49,
                             state=["used"] + ["free"] * 4081,
                             tables=[{"request_id": "r1", "blocks": [0, 1, 2], "tokens": 40},
                                     {"request_id": "r2", "blocks": [199_999], "tokens": 3}])
    pic = PoolPicture(snapshot, max_cells=4096)
    html = pic.html({"r2"})
    assert "200,000 blocks" in html and "each square is 49 blocks" in html
    assert pic.mine_squares({"r2"}) == {199_999 // 49}
    assert pic.mine_squares({"r1"}) == {0}
