"""The page's per-frame and per-refresh work stays small with many pages open (no browser).

Plain figures are valid Plotly figures; the batching section is read from the engine and drawn
once per refresh for every page, each page only marking its own requests; the Device panel is
drawn once per sample; a streamed frame leaves an output the run has not changed alone
(``gr.skip()``) and sends plain values once it has (a skip is a component rebuild on the server);
Gradio's own cost of a streamed frame stays around a millisecond.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import plotly.graph_objects as go
import plotly.io as pio
import pytest

from app.render import batch as batch_view, figures
from app.tabs.playground import events as wiring, frames as schema, handlers
from app.render.plainfig import PlainFigure
from app.state.playground import Playground
from app.state.run_state import RunState, TokenView
from app.state.shared_views import SharedViews, shared
from app.render.tokens import TokenChips, tokens_html
from engine.core.batch_info import BatchInfo
from tests.support.fakes import FakeEngine, make_events, pool_snapshot

MEM = {"device": "cpu", "total_bytes": 2_000_000_000, "total_label": "process RSS", "notes": [], "parts": [
    {"name": "weights", "bytes": 538_060_288, "measured": True, "note": ""},
    {"name": "kv_cache", "bytes": 536_870_912, "measured": True, "note": "pool"},
    {"name": "activations", "bytes": 217_344, "measured": False, "note": ""}]}


def _steps(n=12, ids=("req-0", "req-1")):
    return [BatchInfo(step_id=i, start_s=float(i), request_ids=list(ids), phases=["decode"] * len(ids),
                      decode_tokens=len(ids)) for i in range(n)]


def all_figures() -> list[PlainFigure]:
    return [
        figures.latency_figure([1, 2, 3], [90.0, 40.0, 41.0], ["prefill", "decode", "decode"], 12, True, [1, 2, 2], 4),
        figures.latency_figure([], [], [], use_kv_cache=False),
        figures.kv_figure([12, 13], [12 * 46_080, 13 * 46_080], 46_080, max_tokens_hint=80),
        figures.kv_figure([0], [0], 46_080, use_kv_cache=False),
        figures.memory_figure(MEM, 46_080 * 13), figures.memory_figure(None),
        figures.device_figure([{"t": -1.0, "cpu_pct": 40.0, "rss_bytes": 10**9}], False, "no NVIDIA GPU"),
        figures.device_figure([{"t": 0.0, "util_pct": 7, "power_w": 80.0, "temp_c": 40}], True, name="H100"),
        batch_view.strip_figure(batch_view.plain_steps(_steps()), {"req-1"}),
        batch_view.strip_figure([], set()),
    ]


@pytest.mark.parametrize("index", range(10))
def test_plain_figures_are_valid_plotly_with_the_white_template(index):
    fig = all_figures()[index]
    spec = json.loads(fig.to_json())
    checked = go.Figure(spec)  # plotly validates every property here (raises on a bad one)
    assert len(checked.data) == len(fig.data)
    assert spec["layout"]["template"] == pio.templates["plotly_white"].to_plotly_json()
    assert fig.to_plotly_json() == spec and fig.to_json() is fig.to_json()  # serialized once


def test_plain_figure_reads_like_plotly():
    fig = figures.kv_figure([], [], 46_080)
    assert fig.layout.title.text == "KV cache size" and fig.layout.showlegend is None
    assert "plotted here" in fig.layout.annotations[0].text
    assert fig.data[0].line.dash == "dash" and list(fig.data[1].x) == []


def test_token_chips_grow_and_match_the_full_redraw():
    chips, tokens = TokenChips(), []
    assert chips.html(tokens) == tokens_html(tokens)
    for i in range(5):
        tokens.append(TokenView(f" t{i}", 0.5, [(f" t{i}", 0.5)], "decode" if i else "prefill"))
        assert chips.html(tokens) == tokens_html(tokens)


class CountingEngine(FakeEngine):
    """A batching fake that counts how often the page reads the engine's block pool."""

    def __init__(self):
        super().__init__()
        self.snapshots = 0
        self.recent_steps = _steps(3)

    def stats(self):
        return dataclasses.replace(super().stats(), batching=True, running=2, waiting=0,
                                   blocks_total=40, blocks_used=3, blocks_free=37, blocks_cached=0)

    def block_snapshot(self):
        self.snapshots += 1
        return pool_snapshot(block_size=16, num_blocks=40, state=["used"] * 3 + ["free"] * 37,
                             tables=[{"request_id": "req-0", "blocks": [0, 1], "tokens": 20},
                                     {"request_id": "req-1", "blocks": [2], "tokens": 9}])


def test_one_engine_snapshot_serves_every_streaming_page(tmp_path):
    eng = CountingEngine()
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    pg._recent.update({"s0": ["req-0"], "s1": ["req-1"]})
    frames = {s: handlers.session_batch_frame(pg, s, max_age_s=60) for s in ("s0", "s1", "s2", "s3")}
    assert eng.snapshots == 1  # not once per page
    assert "req-0 (you)" in frames["s0"]["pool"] and "req-0 (you)" not in frames["s1"]["pool"]
    assert "req-1 (you)" in frames["s1"]["pool"] and "(you)" not in frames["s2"]["pool"]
    assert frames["s2"]["pool"] is frames["s3"]["pool"]  # same view, drawn once
    assert frames["s2"]["strip"] is frames["s3"]["strip"]
    assert frames["s0"]["strip"] is not frames["s1"]["strip"]
    # the engine moves on: the next refresh reads it once more, whatever the number of pages
    eng.recent_steps.append(_steps(4)[-1])
    for s in ("s0", "s1", "s2"):
        handlers.session_batch_frame(pg, s)
    assert eng.snapshots == 2


def test_a_streaming_page_accepts_a_recent_section_and_others_see_changes_at_once(tmp_path):
    now = [0.0]
    eng = CountingEngine()
    views = SharedViews(Playground(eng, trace_dir=tmp_path, monitor=False), clock=lambda: now[0])
    first = views.batch_section()
    eng.recent_steps.append(_steps(4)[-1])
    now[0] = 0.3
    assert views.batch_section(max_age_s=0.5) is first  # recent enough for a streaming page
    assert views.batch_section() is not first  # the engine moved on: redrawn
    assert eng.snapshots == 2
    assert views.batch_section() is views.batch_section()  # nothing new: no snapshot
    assert eng.snapshots == 2


def test_device_panel_and_rolling_table_drawn_once_for_all_pages(tmp_path):
    pg = Playground(FakeEngine(), trace_dir=tmp_path, monitor=False)
    pg.device.sample()
    frames = [{"device": shared(pg).device_figure(), "rolling": shared(pg).rolling_html()} for _ in range(5)]
    assert all(f["device"] is frames[0]["device"] for f in frames)
    assert all(f["rolling"] is frames[0]["rolling"] for f in frames)
    assert shared(pg) is shared(pg)


def test_the_timer_resends_the_rolling_table_only_when_it_changed(tmp_path, monkeypatch):
    """Each page's timer got the rolling table's 10 kB of HTML every 2 s, changed or not; the
    device panel too comes again only when a new sample changed it."""
    from app.state.shared_views import shared

    pg = Playground(FakeEngine(), trace_dir=tmp_path, monitor=False)
    now = [0.0]
    shared(pg).clock = lambda: now[0]
    first, seen = handlers.timer_frame(pg, "alice", None)
    assert {"device", "rolling"} <= set(first)
    again, seen = handlers.timer_frame(pg, "alice", seen)
    assert "rolling" not in again and "device" not in again
    now[0] += 5.0  # the device figure is redrawn: from a new sample
    monkeypatch.setattr(pg.device, "samples", lambda: [{"t": -1.0, "cpu_util": 42.0, "rss_bytes": 10**8}])
    assert "device" in handlers.timer_frame(pg, "alice", seen)[0]
    list(handlers.generate(pg, "alice", "raw", "Count:", [], "", 1.0, 1.0, 0, 0.0, 1.0, 8, -1, True))
    ended, seen = handlers.timer_frame(pg, "alice", seen)  # a request ended: a new table
    assert ended["rolling"] != first["rolling"]
    assert "rolling" not in handlers.timer_frame(pg, "alice", seen)[0]
    assert handlers.timer_frame(pg, "bob", None)[0]["rolling"] == ended["rolling"]  # a new page: whole


def test_the_timer_draws_its_panels_through_its_own_channel(tmp_path):
    """A tick's value is the timer channel's log of one frame: ops for the timer's panels that
    changed (the same op handlers a run's frames use, so a run's ops never leave a panel that a
    tick can't redraw), the Plotly template with the page's first refresh only; a tick with
    nothing new leaves the channel alone."""
    from types import SimpleNamespace

    from app.page import build_demo

    pg = Playground(FakeEngine(), trace_dir=tmp_path, monitor=False)
    demo = build_demo(pg)
    tick = next(f for f in demo.fns.values()
                if f.name == "on_tick" and getattr(f.outputs[0], "elem_id", None) == "timer-channel")
    assert len(tick.outputs) == 2  # the channel and the page's state, not one output per panel
    alice = SimpleNamespace(session_hash="alice")

    def ops(value):
        lines = [json.loads(x) for x in value.split("\n") if x.startswith("{")]
        return {k for line in lines for k in line if k != "_n"}

    value, seen = tick.fn(None, alice)
    assert ops(value) == {"_tpl", *schema.TIMER_KEYS}
    assert tick.fn(seen, alice) == (wiring.SKIP, seen)
    list(handlers.generate(pg, "alice", "raw", "Count:", [], "", 1.0, 1.0, 0, 0.0, 1.0, 8, -1, True))
    value, seen = tick.fn(seen, alice)  # a request ended: a new rolling table, no template again
    assert "rolling" in ops(value) and "_tpl" not in ops(value)


def _update(value):
    import gradio as gr

    return isinstance(value, dict) and value.get("__type__") == "update" and value != gr.skip()


def _log_frames(log: str) -> list[dict]:
    """The JSON frames of a live channel log (its first line names the run)."""
    return [json.loads(line) for line in log.split("\n")[1:] if line.startswith("{")]


def test_stream_sends_the_live_panels_as_ops_and_the_text_as_values(tmp_path):
    import gradio as gr

    pg = Playground(FakeEngine("slow"), trace_dir=tmp_path, monitor=False)
    frames = handlers.generate(pg, "sess", "raw", "Count:", [], "", 1.0, 1.0, 0, 0.0, 1.0, 32, -1, True)
    outs = list(wiring.live_updates(frames, "run-1", {"chat": [], "completion": "", "message": "Count:"}))
    first, *middle, last = outs
    width = 1 + len(schema.STREAM_KEYS) + len(schema.DOWNLOAD_KEYS) + len(schema.END_KEYS)
    assert all(len(out) == width for out in outs)
    at = {k: 1 + i for i, k in enumerate(schema.STREAM_KEYS)}
    # the hidden chat box of raw mode and its prompt box are left alone, the closing message too
    # (a value, even an equal one, costs the browser a layout of it; in the closing message it
    # cost one more message after the last frame); the completion has values
    assert all(out[at["chat"]] == gr.skip() and out[at["message"]] == gr.skip() for out in outs)
    assert not [out for out in outs if out[at["completion"]] == gr.skip()]
    assert [_update(v) for v in first[1 + len(schema.STREAM_KEYS):][:2]] == [True, True]
    assert not [v for out in middle[:-1] for v in out if _update(v)]  # plain values in between
    logs = [out[0] for out in outs]
    assert all(b.startswith(a) for a, b in zip(logs[:-1], logs[1:-1]))  # the log only grows in a run
    assert logs[-1] == "run-1\n" and logs[-2].startswith(logs[-1])  # and ends cut to its first line
    ops = _log_frames(logs[-2])
    assert "_tpl" in ops[0]  # the plot template once, in the run's first frame
    assert "set" in ops[1]["status"] and "set" in ops[1]["tokens"]
    figs = [f["latency"] for f in ops if "latency" in f]
    assert "fig" in figs[0] and all("fig" not in f for f in figs[1:])  # one whole figure, then changes
    assert "Finished" in ops[-1]["status"]["set"]
    assert last[at["completion"]].startswith("Count:")
    assert len(outs) <= 12  # 8 tokens arrive one per poll: frames are throttled, not one per token


def test_the_stream_switches_the_downloads_once_each_way():
    """The first frame empties and disables the trace downloads, the last frame's fills and
    enables them with the new trace, and every frame in between sends plain values (a
    ``gr.update`` costs a component rebuild on the server)."""
    at = 1 + len(schema.STREAM_KEYS)
    frames = [{"status": "s", "busy": True}, {"status": "t"}, {"status": "u"},
              {"status": "v", "busy": False, "trace": ("/t/a.json", "/t/a.csv")}]
    outs = list(wiring.live_updates(frames, "r", {"chat": [], "completion": "", "message": ""}))
    downloads = [out[at:at + len(schema.DOWNLOAD_KEYS)] for out in outs]
    assert downloads[0] == [{"__type__": "update", "value": None, "interactive": False}] * 2
    assert downloads[1] == downloads[2] == [None, None]
    assert [d["interactive"] for d in downloads[3]] == [True, True]
    assert downloads[3][0]["value"].endswith(".json") and downloads[3][1]["value"].endswith(".csv")
    assert downloads[4] == ["/t/a.json", "/t/a.csv"]  # the closing repeat: plain values


def test_generate_is_one_gradio_event_with_the_buttons_switched_in_the_browser(tmp_path):
    """Generate's click starts one server event (the stream); the buttons switch in the browser
    before it (its ``js``) and after it (a browser-only step), so a run costs no extra messages."""
    from app.page import build_demo

    pg = Playground(FakeEngine(), trace_dir=tmp_path, monitor=False)
    demo = build_demo(pg)
    gens = [f for f in demo.fns.values() if f.name == "on_generate" and f.js == wiring.START_JS]
    assert len(gens) == 1  # the button and Shift+Enter: one event, which starts nothing while it runs
    gen = gens[0]
    assert len(gen.targets) == 2 and gen.trigger_mode == "once"
    assert gen.js == wiring.START_JS and "disabled = running" in wiring.START_JS
    after = [f for f in demo.fns.values() if f.trigger_after == gen._id]
    assert len(after) == 1 and after[0].fn is None and after[0].js == wiring.END_JS
    buttons = {c._id for c in demo.blocks.values() if getattr(c, "elem_id", None) in ("generate-btn", "stop-btn")}
    assert len(buttons) == 2
    assert not [f for f in demo.fns.values() if buttons & {o._id for o in f.outputs}]  # no server step switches them


def test_stream_encodes_each_new_value_once():
    import gradio as gr

    calls = []

    def counting(name):
        def enc(v):
            calls.append(name)
            return v
        return enc

    frames = [{"chat": [{"role": "assistant", "content": "a" * i}], "busy": True if i == 0 else None}
              for i in range(6)]
    outs = list(wiring.live_updates(frames, "r", {"completion": "c", "message": "m"},
                                    encode={k: counting(k) for k in ("chat", "completion", "message")}))
    assert calls.count("chat") == 6 and calls.count("completion") == 0 and calls.count("message") == 0
    completion = [out[1 + schema.STREAM_KEYS.index("completion")] for out in outs]
    assert completion == [gr.skip()] * 7  # unchanged: left alone, the closing message too


def test_a_frames_payload_grows_with_the_new_tokens_not_with_the_answer(tmp_path):
    """The live channel's new line per frame stays the same size from an answer's start to its
    end: chips and plot points are appended, not sent again (the whole chip HTML and every
    figure's JSON were resent before, so a frame grew with the answer)."""
    st = RunState()
    for ev in make_events(texts=tuple(f" t{i}" for i in range(600)), finish=None, decode_s=0.01):
        st.add(ev)
    pg = Playground(FakeEngine(), trace_dir=tmp_path, monitor=False)
    chips = TokenChips()
    log = wiring.LiveLog("r")
    enc = wiring.LiveEncoder(append=schema.LIVE_APPEND, figures=schema.LIVE_FIGURES)
    sizes = {}
    for n in (10, 20, 500, 510):  # frames of 10 new tokens early and late in a 510-token answer
        part = RunState()
        for ev in st.events[:n]:
            part.add(ev)
        frame = {**handlers._text_frame(part, "raw", [], "Count:", chips), **handlers._figure_frame(pg, part, 600)}
        frame.pop("completion")
        log.add(enc.ops({k: v for k, v in frame.items() if k in schema.LIVE_KEYS}))
        sizes[n] = log.last_frame_bytes
    early, late = sizes[20], sizes[510]
    assert late <= 1.5 * early, sizes
    assert sizes[510] < 10_000 < sizes[500], sizes  # ~350 bytes a chip; 490 new tokens cost their chips


def test_plots_keep_the_last_answer_until_their_first_interval(tmp_path, monkeypatch):
    """The figures are first drawn one figure interval after the start: an answer shorter than
    that draws them once, in its last frame."""
    pg = Playground(FakeEngine("slow"), trace_dir=tmp_path, monitor=False)
    monkeypatch.setattr(handlers, "FIGURES_EVERY_S", 60.0)  # longer than the answer
    frames = list(handlers.generate(pg, "sess", "raw", "Count:", [], "", 1.0, 1.0, 0, 0.0, 1.0, 32, -1, True))
    assert not set(schema.PLOT_KEYS) & set(frames[0])  # no reset to empty plots at the start
    drawn = [i for i, f in enumerate(frames) if "latency" in f]
    assert drawn == [len(frames) - 1] and len(frames) >= 3     # the last frame only
    assert frames[-1]["latency"].data[0].x == [1]               # this request's prefill


@pytest.mark.parametrize("last_part, middle_draws", [(0.0, True), (1e18, False)])
def test_figures_due_just_before_the_answers_end_are_left_to_its_last_frame(tmp_path, monkeypatch,
                                                                            last_part, middle_draws):
    """A figure falling due when the answer should reach its token limit within
    ``FIGURES_LAST_PART`` of an interval is not drawn: the last frame draws it moments later."""
    pg = Playground(FakeEngine("slow"), trace_dir=tmp_path, monitor=False)
    monkeypatch.setattr(handlers, "FIGURES_EVERY_S", 1e-9)  # due at every text frame
    monkeypatch.setattr(handlers, "TEXT_EVERY_S", 0.0)      # a text frame for every event
    monkeypatch.setattr(handlers, "FIGURES_LAST_PART", last_part)
    frames = list(handlers.generate(pg, "sess", "raw", "Count:", [], "", 1.0, 1.0, 0, 0.0, 1.0, 8, -1, True))
    drawn = [i for i, f in enumerate(frames) if "latency" in f]
    assert drawn[-1] == len(frames) - 1 and len(frames) >= 8
    if middle_draws:
        assert len(drawn) >= 6, drawn
    else:  # only at the first token (no decode rate yet) and in the last frame
        assert len(drawn) <= 2 and frames[drawn[0]]["latency"].data[0].x == [1], drawn


def test_a_request_waiting_in_the_queue_gets_empty_plots(tmp_path, monkeypatch):
    monkeypatch.setattr(handlers, "PLOTS_RESET_S", 0.0)
    pg = Playground(FakeEngine("slow"), trace_dir=tmp_path, monitor=False)
    def follow(handle, poll_s=0.1):  # two polls with nothing new (queued), then the stream
        yield from ([], [])
        yield from Playground.follow(handle, poll_s)

    pg.follow = follow
    frames = list(handlers.generate(pg, "sess", "raw", "Count:", [], "", 1.0, 1.0, 0, 0.0, 1.0, 32, -1, True))
    assert "plotted here" in frames[1]["latency"].layout.annotations[0].text


def test_a_refused_request_keeps_the_last_trace(tmp_path):
    import gradio as gr

    pg = Playground(FakeEngine(), trace_dir=tmp_path, monitor=False)
    frames = handlers.generate(pg, "sess", "raw", "  ", [], "", 1.0, 1.0, 0, 0.0, 1.0, 32, -1, True)
    out, _ = wiring.live_updates(frames, "r", {"completion": "", "message": "  ", "chat": []})
    assert "prompt is empty" in _log_frames(out[0])[-1]["status"]["set"]
    at = 1 + len(schema.STREAM_KEYS)
    assert out[at:at + 2] == [gr.skip()] * 2  # not run: the last trace's downloads stay as they were


def test_gradio_cost_of_a_streamed_frame_is_small(tmp_path):
    """Gradio's own work on one streamed frame: eight outputs (the live channel, the chat, the
    completion, the prompt box, the two trace downloads, the conversation and the page timer,
    paused by the first update and resumed by the last), whatever the number of live panels."""
    from gradio.state_holder import SessionState

    from app.page import build_demo

    pg = Playground(FakeEngine(), trace_dir=tmp_path, monitor=False)
    demo = build_demo(pg)
    fn = next(f for f in demo.fns.values() if f.name == "on_generate")
    names = schema.STREAM_KEYS + schema.DOWNLOAD_KEYS + schema.END_KEYS
    assert fn.postprocess is False and len(fn.outputs) == 1 + len(names) + 1 == 8
    assert fn.outputs[-1].__class__.__name__ == "Timer"
    encode = {name: wiring.encoder(c) for name, c in zip(names, fn.outputs[1:])}
    state = SessionState(demo)
    st = RunState()
    for ev in make_events(texts=tuple(f" t{i}" for i in range(40)), finish=None):
        st.add(ev)
    text = handlers._text_frame(st, "raw", [], "Count:")
    frames = [{**handlers.empty_panels(pg), **text, "busy": True}, text]
    outs = list(wiring.live_updates(frames, "r", {"chat": [], "completion": "", "message": ""}, encode=encode,
                                    timer=True))
    timer = []
    for out in outs:
        sent = asyncio.run(demo.postprocess_data(fn, list(out), state))
        assert len(sent) == len(fn.outputs)
        timer.append(sent[-1].get("active") if isinstance(sent[-1], dict) else sent[-1])
    assert timer[0] is False and timer[-1] is True, timer


def test_plotly_js_url_names_no_installed_package_path():
    from app.tabs.playground.plot_panel import serve_plotly_js

    tag = serve_plotly_js()
    assert "site-packages" not in tag and "plotly/package_data" not in tag
    assert tag.endswith("plotly.min.js'></script>")


def apply_log(values: list[str]) -> list[dict]:
    """The channel script's rules (:data:`app.tabs.playground.live_channel.CHANNEL_JS`) in
    Python: the ops a browser applies when it draws each of ``values`` in turn."""
    drawn, run, seen, applied = "", None, -1, []
    for v in values:
        if drawn.startswith(v):
            continue
        if drawn and v.startswith(drawn):
            rest = v[len(drawn):]
        else:
            ident = v[:v.index("\n") + 1]
            if ident != run:
                run, seen, applied = ident, -1, []
            rest = v
        drawn = v
        for line in rest.split("\n"):
            if line.startswith("{"):
                ops = json.loads(line)
                if ops.get("_n", seen + 1) <= seen:
                    continue
                seen = ops.pop("_n", seen)
                applied.append(ops)
    return applied


def test_a_long_runs_log_stays_bounded_and_every_frame_arrives_once():
    """The log starts a new part at its bound, repeating its last frames: the value stays under
    the bound however many frames, and a browser that draws every value, or only the last of
    each burst of two (as Gradio may hand it a burst), applies each frame exactly once."""
    log = wiring.LiveLog("run-7", limit=2_000)
    values = []
    for i in range(300):
        values.append(log.add({"tokens": {"app": f"<span>{i}</span>" * 3}}))
    assert log.parts > 10 and max(len(v) for v in values) <= 2_000
    want = [{"tokens": {"app": f"<span>{i}</span>" * 3}} for i in range(300)]
    assert apply_log(values) == want
    assert apply_log(values[1::2] + values[-1:]) == want   # every other value seen
    assert apply_log(values + [log.head]) == want           # the run's end changes nothing
    # a new run starts over
    other = wiring.LiveLog("run-8")
    assert apply_log(values + [other.add({"status": {"set": "x"}})]) == [{"status": {"set": "x"}}]
