"""The page's pure parts: session state, figures, token view, cards, handlers (fake engine)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.render import cards, figures, tokens as tokens_view
from app.tabs.playground import handlers
from app.server.assets import load_examples, read_css
from app.render.fmt import fmt_bytes, fmt_int, fmt_rate, fmt_seconds
from app.state.device_monitor import DeviceMonitor, no_gpu_reason
from app.state.playground import Playground
from app.state.run_state import RunState, Throttle, TokenView, memory_to_plain
from tests.support.fakes import BPT, FakeEngine, FakeInfo, make_events, make_output

from tests.support.paths import REPO



# ---- no torch in app/ ------------------------------------------------------------------------------
def test_app_sources_never_import_torch():
    for path in (REPO / "app").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n == "torch" or n.startswith("torch.") for n in names), path.name


def test_pure_modules_load_without_torch():
    code = ("import sys; import app.render.figures, app.state.run_state, app.render.tokens, app.render.cards, app.render.fmt, app.server.assets, "
            "app.render.batch, app.page, app.server.main, app.state.playground, app.tabs.playground, "
            "app.tabs.lessons, app.remote, engine.protocol; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- formatting ----------------------------------------------------------------------------------
def test_formatting():
    assert fmt_bytes(46_080) == "46.1 KB"
    assert fmt_bytes(538_060_288) == "538.1 MB"
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(None) == "N/A"
    assert fmt_int(46080) == "46,080"
    assert fmt_seconds(0.0123) == "12.3 ms"
    assert fmt_seconds(2.5) == "2.50 s"
    assert fmt_rate(0) == "–" and fmt_rate(12.34) == "12.3 tok/s" and fmt_rate(1234) == "1,234 tok/s"


# ---- session state ----------------------------------------------------------------------------------
def test_run_state_folds_events_into_series():
    events = make_events(prompt_len=10)
    st = RunState(submitted_s=events[0].start_s - 0.01)
    for ev in events:
        st.add(ev)
    assert st.text == "Hello, world!"
    assert st.token_index == [1, 2, 3, 4]
    assert st.phases == ["prefill", "decode", "decode", "decode"]
    assert st.step_ms[0] == pytest.approx(200.0) and st.step_ms[1] == pytest.approx(50.0)
    assert st.kv_tokens == [10, 11, 12, 13]
    assert st.kv_bytes == [t * BPT for t in st.kv_tokens]
    assert st.prompt_tokens == 10
    assert st.memory["parts"][1]["bytes"] == 13 * BPT
    assert st.finish_reason == "stop" and st.done
    assert [t.text for t in st.tokens] == ["Hello", ",", " world", "!"]


def test_live_metrics_follow_the_design_definitions():
    events = make_events(prompt_len=10, prefill_s=0.2, decode_s=0.05)
    st = RunState(submitted_s=events[0].start_s - 0.01)
    for ev in events[:3]:
        st.add(ev)
    m = st.live_metrics(now=events[2].end_s)
    assert m["queue_time_s"] == pytest.approx(0.01)
    assert m["ttft_s"] == pytest.approx(0.21)
    assert m["prefill_tokens_per_s"] == pytest.approx(10 / 0.2)
    assert m["tpot_s"] == pytest.approx(0.05)
    assert m["decode_tokens_per_s"] == pytest.approx(20.0)
    assert m["final"] is False
    st.add(events[3])
    st.finish(make_output(events))
    final = st.live_metrics()
    assert final["final"] is True and final["output_tokens"] == 4
    assert final["tpot_s"] == pytest.approx(0.05)


def test_status_line_says_why_it_ended():
    st = RunState()
    assert "Prefill" in st.status_line()
    st.queue_position = 2
    assert "2 requests ahead" in st.status_line()
    st.queue_position = None
    st.finish_reason = "abort"
    assert "stopped by you" in st.status_line()
    st.error = "RuntimeError: boom"
    assert st.status_line().startswith("Error: RuntimeError: boom")


def test_memory_to_plain_accepts_dataclasses_and_dicts():
    from engine.telemetry.memory import MemoryBreakdown, MemoryPart

    mem = MemoryBreakdown("cpu", [MemoryPart("weights", 10, True), MemoryPart("activations", 5, False, "est")],
                          15, "process RSS", 0.0)
    plain = memory_to_plain(mem)
    assert plain["parts"][1] == {"name": "activations", "bytes": 5, "measured": False, "note": "est"}
    assert memory_to_plain(plain) == plain
    assert memory_to_plain(None) is None


def test_throttle():
    now = [0.0]
    th = Throttle(0.25, clock=lambda: now[0])
    assert th.due()
    now[0] = 0.1
    assert not th.due()
    assert th.due(force=True)
    now[0] = 0.4
    assert th.due()


# ---- figures -------------------------------------------------------------------------------------
def test_latency_figure_marks_prefill_apart():
    fig = figures.latency_figure([1, 2, 3], [200.0, 50.0, 52.0], ["prefill", "decode", "decode"], prompt_tokens=10)
    pre, dec = fig.data
    assert list(pre.x) == [1] and list(pre.y) == [200.0] and "10 tokens in one pass" in pre.name
    assert list(dec.x) == [2, 3] and list(dec.y) == [50.0, 52.0]
    assert pre.marker.color != dec.line.color
    # the legend sits above the plot area (inside it, it covered the prefill marker), in one row
    # for these two short names, two rows (a taller top margin) with a third, long one
    legend = fig.layout.legend
    assert legend.orientation == "h" and legend.yanchor == "bottom" and legend.y >= 1.0
    spec = {"type": "scatter", "name": "speculative step (+tokens it produced)", "x": [], "y": []}
    three = figures.latency_figure([1, 2], [200.0, 50.0], ["prefill", "decode"], 10, spec=spec)
    assert three.layout.margin.t == fig.layout.margin.t + 18
    empty = figures.latency_figure([], [], [])
    assert "Press Generate" in empty.layout.annotations[0].text


def test_kv_figure_measured_points_and_formula_line():
    fig = figures.kv_figure([10, 11, 12], [10 * BPT, 11 * BPT, 12 * BPT], BPT, max_tokens_hint=100)
    formula, measured = fig.data
    assert list(formula.x) == [0, 100] and list(formula.y) == [0, 100 * BPT]
    assert "46,080 B" in formula.name
    assert list(measured.y) == [460_800, 506_880, 552_960]
    off = figures.kv_figure([0, 0], [0, 0], BPT, use_kv_cache=False)
    assert "OFF" in off.layout.title.text


def test_memory_figure_marks_estimates():
    fig = figures.memory_figure(memory_to_plain({"device": "cpu", "total_bytes": 30, "total_label": "process RSS",
                                                 "parts": [{"name": "weights", "bytes": 20, "measured": True},
                                                           {"name": "activations", "bytes": 10, "measured": False}]}))
    weights, acts = fig.data
    assert weights.marker.pattern.shape == "" and "(est.)" not in weights.name
    assert acts.marker.pattern.shape == "/" and acts.name.endswith("(est.)")
    assert fig.layout.barmode == "stack"
    assert "process RSS" in fig.layout.title.text
    assert figures.memory_figure(None).layout.annotations


def test_device_figure_gpu_and_cpu():
    gpu = figures.device_figure([{"t": -1, "util_pct": 40, "power_w": 120.5, "temp_c": 55},
                                 {"t": 0, "util_pct": 90, "power_w": 300.0, "temp_c": 60}], True, name="H200")
    assert [t.name for t in gpu.data] == ["GPU util %", "temp °C", "power W"]
    assert list(gpu.data[2].y) == [120.5, 300.0] and gpu.data[2].yaxis == "y2"
    cpu = figures.device_figure([{"t": 0, "cpu_pct": 50, "rss_bytes": 10**9}], False, "no NVIDIA GPU: running on CPU")
    assert cpu.layout.title.text == "no NVIDIA GPU: running on CPU"
    assert list(cpu.data[0].y) == [50]


# ---- token view --------------------------------------------------------------------------------
def test_prob_color_runs_red_to_green():
    assert tokens_view.prob_color(0.0).startswith("hsl(0,")
    assert tokens_view.prob_color(1.0).startswith("hsl(120,")
    assert tokens_view.prob_color(7) == tokens_view.prob_color(1.0)


def test_token_chip_escapes_and_carries_its_top5():
    tok = TokenView("<b>", 0.25, [("<b>", 0.25), (" a", 0.2), ("\n", 0.1)], "decode")
    chip = tokens_view.token_html(tok, 3)
    assert "<b>" not in chip and "&lt;b&gt;" in chip
    data = tokens_view.tooltip_data(tok, 3)
    assert data["i"] == "3" and data["ph"] == "decode" and float(data["p"]) == 0.25
    assert json.loads(data["top"]) == [["<b>", 0.25], [" a", 0.2], ["\n", 0.1]]
    assert json.loads(data["tt"]) == "<b>"
    assert 'data-top="[[&quot;&lt;b&gt;&quot;, 0.25]' in chip  # attribute values are escaped
    newline = tokens_view.token_html(TokenView("\n", 0.9, [], "decode"), 1)
    assert "↵<br>" in newline


def test_byte_pieces_show_the_completed_character():
    first = TokenView("\ufffd", 0.5, [("\ufffd", 0.5)], "decode", True, "")
    last = TokenView("\ufffd", 0.9, [("\ufffd", 0.9)], "decode", True, "加")
    assert tokens_view.chip_text(first) == "·" and tokens_view.chip_text(last) == "加"
    assert tokens_view.tooltip_data(first, 1)["piece"] == "1" and "done" not in tokens_view.tooltip_data(first, 1)
    assert tokens_view.tooltip_data(last, 2)["done"] == "1"
    html = tokens_view.tokens_html([first, last])
    assert "加" in html and "tok-piece" in html
    special = TokenView("<|im_end|>", 0.99, [], "decode", False, "")
    assert "tok-special" in tokens_view.token_html(special, 1)


def test_tooltip_script_reads_the_chip_attributes():
    js = tokens_view.TOOLTIP_JS
    for key in ("d.p", "d.tt", "d.top", "d.i", "d.ph", "d.piece", "d.done", "outside the top 5"):
        assert key in js


def test_inspector_has_legend_and_placeholder():
    assert "top-5" in tokens_view.inspector_html([])
    assert "appear here" in tokens_view.inspector_html([])
    # the chips are drawn by the script, appended as the value grows; Gradio never re-renders them
    assert "${value}" not in tokens_view.inspector_template()
    assert "tok-body" in tokens_view.inspector_template()
    assert "value.startsWith(drawn)" in tokens_view.TOOLTIP_JS and "appendChild" in tokens_view.TOOLTIP_JS


# ---- cards ---------------------------------------------------------------------------------------
def test_kv_formula_with_the_embedded_models_numbers():
    info = FakeInfo()
    assert cards.kv_bytes_per_token(30, 3, 64, 4) == 46_080
    html = cards.kv_formula_html(info, tokens=57, measured_bytes=57 * 46_080)
    for piece in ("30 layers", "3 KV heads", "64 head_dim", "4 bytes", "float32", "46,080 B per token",
                  "2,626,560 B", "✓ equal", "grouped-query"):
        assert piece in html
    assert "differs by 1 B" in cards.kv_formula_html(info, tokens=1, measured_bytes=46_081)


def test_stat_cards_and_rolling_table():
    html = cards.stat_cards_html({"ttft_s": 0.25, "tpot_s": 0.04, "decode_tokens_per_s": 25.0,
                                  "prefill_tokens_per_s": 400.0, "e2e_s": 3.0, "queue_time_s": 0.0,
                                  "prompt_tokens": 12, "output_tokens": 70, "final": True})
    for piece in ("TTFT", "250.0 ms", "40.0 ms", "25.0 tok/s", "400 tok/s", "3.00 s", "0.0 ms", "70 output tokens"):
        assert piece in html
    assert html.count("stat-card") == 6
    table = cards.rolling_table_html({"count": 3, "finished": 2, "aborted": 1, "failed": 0,
                                      "ttft_s": {"p50": 0.1, "p90": 0.2, "p99": 0.3},
                                      "tpot_s": {"p50": None, "p90": None, "p99": None},
                                      "e2e_s": {"p50": 1.0, "p90": 2.0, "p99": 3.0}})
    assert "100.0 ms" in table and "3.00 s" in table and "1 stopped" in table and "–" in table


def test_model_badge_names_the_model_and_its_size():
    html = cards.model_badge_html(FakeInfo())
    assert "smollm2-135m" in html and "134.5M parameters" in html and "538.1 MB" in html and "cpu" in html


def test_badge_shows_the_precision_and_the_kv_formula_follows_the_kv_dtype():
    import dataclasses

    info = dataclasses.replace(FakeInfo(), weights_bytes=94_835_584, dtype="bfloat16", dtype_bytes=2)
    info.weights, info.weights_note, info.kv_dtype, info.kv_dtype_bytes = "int4", "Q4_1 blocks", "fp8 (e4m3)", 1
    badge = cards.model_badge_html(info)
    assert "weights <b>int4</b>" in badge and "compute bfloat16" in badge and "fp8 (e4m3)" in badge
    assert "94.8 MB (int4)" in badge and "Q4_1 blocks" in badge
    html = cards.kv_formula_html(info, tokens=10, measured_bytes=115_200, pool_bytes=512 * 2**20)
    assert "× 1 bytes (fp8 (e4m3))" in html and "11,520 B per token" in html and "✓ equal" in html
    assert "holds 46,603 tokens" in html and "2× as many</b> as in bfloat16 (23,301)" in html
    plain = cards.kv_formula_html(FakeInfo(), pool_bytes=512 * 2**20)
    assert "holds 11,650 tokens." in plain and "as many" not in plain   # same dtype: no comparison


# ---- assets -------------------------------------------------------------------------------------
def test_examples_include_english_and_chinese_poems():
    examples = load_examples()
    prompts = [e["prompt"] for e in examples]
    assert any("poem about a programmer under deadline pressure" in p for p in prompts)
    assert any("程序员加班" in p for p in prompts)
    assert {e["mode"] for e in examples} == {"chat", "raw"}
    assert ".tok-tip" in read_css()


def test_examples_reject_bad_mode(tmp_path):
    bad = tmp_path / "ex.json"
    bad.write_text(json.dumps({"examples": [{"label": "x", "mode": "poem", "prompt": "p"}]}))
    with pytest.raises(ValueError, match="mode"):
        load_examples(bad)


# ---- handlers on a fake engine ------------------------------------------------------------------
def _run(pg, message="Hi", mode="chat", history=None, notes=None, **over):
    settings = dict(temperature=0.7, top_p=0.95, top_k=50, min_p=0.0, repetition_penalty=1.1,
                    max_tokens=32, seed=-1, use_kv_cache=True)
    settings.update(over)
    return list(handlers.generate(pg, "sess", mode, message, history, "Be brief.", **settings,
                                  notify=(notes.append if notes is not None else None)))


def test_generate_streams_frames_and_ends_idle(tmp_path):
    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    frames = _run(pg, history=[{"role": "user", "content": [{"type": "text", "text": "Earlier"}]},
                               {"role": "assistant", "content": "Sure"}])
    assert frames[0]["busy"] is True and frames[0]["message"] == ""
    last = frames[-1]
    assert last["busy"] is False
    assert last["chat"][-1] == {"role": "assistant", "content": "Hello, world!"}
    assert last["chat"][-2] == {"role": "user", "content": "Hi"}
    assert "Finished" in last["status"] and "status-ok" in last["status"]
    assert len(last["latency"].data[1].x) == 3
    json_path, csv_path = last["trace"]
    assert json.loads(Path(json_path).read_text())["finish_reason"] == "stop"
    assert Path(csv_path).read_text().splitlines()[0].startswith("request_id,phase")
    prompt, params, raw, kv = eng.submitted[0]
    assert prompt == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Earlier"},
                      {"role": "assistant", "content": "Sure"}, {"role": "user", "content": "Hi"}]
    assert raw is False and kv is True and params.seed is None and params.top_k == 50
    assert pg.active_count() == 0


def test_generate_raw_mode_fills_the_completion(tmp_path):
    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    last = _run(pg, message="Once", mode="raw", use_kv_cache=False, seed=7)[-1]
    assert last["completion"] == "OnceHello, world!"
    prompt, params, raw, kv = eng.submitted[0]
    assert prompt == "Once" and raw is True and kv is False and params.seed == 7


@pytest.mark.parametrize("script,message,over,expect", [
    ("ok", "   ", {}, "prompt is empty"),
    ("ok", "Hi", {"top_p": 1.5}, "top_p"),
    ("ok", "Hi", {"max_tokens": 2.5}, "max_tokens"),
    ("too_long", "Hi", {}, "context window"),
    ("queue_full", "Hi", {}, "queue is full"),
])
def test_bad_input_gives_a_visible_message(tmp_path, script, message, over, expect):
    pg = Playground(FakeEngine(script), trace_dir=tmp_path, monitor=False)
    notes = []
    frames = _run(pg, message=message, notes=notes, **over)
    assert len(frames) == 1 and frames[0]["busy"] is False
    assert "status-error" in frames[0]["status"] and expect in frames[0]["status"]
    assert notes and expect in notes[0]
    pg.engine.script = "ok"  # the next request works
    assert _run(pg)[-1]["chat"][-1]["content"] == "Hello, world!"


def test_engine_error_mid_stream_is_shown(tmp_path):
    pg = Playground(FakeEngine("error"), trace_dir=tmp_path, monitor=False)
    notes = []
    last = _run(pg, notes=notes)[-1]
    assert "status-error" in last["status"] and "NaN" in last["status"]
    assert notes and "NaN" in notes[0]
    assert last["busy"] is False


def test_stop_aborts_in_the_engine(tmp_path):
    from engine.output.handle import RequestHandle

    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    assert handlers.stop(pg, "sess") is False
    running = RequestHandle("req-9", eng.abort, lambda rid: 0)
    pg._active["sess"] = {running}
    assert handlers.stop(pg, "sess") is True
    assert eng.aborted == ["req-9"] and running.abort_requested


def test_stop_status_comes_from_the_stream_so_the_final_line_is_last(tmp_path):
    """Stop's click handler writes nothing to the page: the request's stream says
    "Stopping…" and then its final line, in that order, whatever the timing."""
    eng = FakeEngine("slow")
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    gen = handlers.generate(pg, "sess", "raw", "Count:", [], "", 1.0, 1.0, 0, 0.0, 1.0, 32, -1, True)
    next(gen)  # queued frame
    next(gen)  # the first token
    assert handlers.stop(pg, "sess") is True
    rest = list(gen)
    statuses = [f["status"] for f in rest if "status" in f]
    assert "Stopping" in statuses[0]
    assert "stopped by you" in statuses[-1] and rest[-1]["busy"] is False
    assert eng.aborted == ["req-0"]
    assert not any("Stopping" in x for x in statuses[1:])


def test_make_params_ranges():
    p = handlers.make_params(0.0, 1.0, 0, 0.0, 1.0, 16.0, 3.0)
    assert p.max_tokens == 16 and p.seed == 3 and p.greedy
    assert handlers.make_params(1, 1, -1, 0, 1, 4, -1).seed is None
    for bad in (dict(temperature=-1), dict(top_p=0), dict(repetition_penalty=0), dict(max_tokens=0),
                dict(min_p=2), dict(top_k=-5)):
        args = dict(temperature=1, top_p=1, top_k=0, min_p=0, repetition_penalty=1, max_tokens=4, seed=-1)
        args.update(bad)
        with pytest.raises(ValueError, match=next(iter(bad))):
            handlers.make_params(**args)


def test_device_monitor_gpu_and_fallback():
    class Reading:
        def __init__(self, ok):
            self.available, self.reason, self.name = ok, "ok" if ok else "no NVIDIA driver (NVML init failed)", "H200"
            self.util_pct, self.power_w, self.temp_c, self.mem_used_bytes = 50.0, 200.0, 40.0, 10

    class Gpu:
        ok = True

        def read(self):
            return Reading(self.ok)

    now = [10.0]
    gpu = Gpu()
    mon = DeviceMonitor(gpu, "cuda:0", clock=lambda: now[0])
    assert mon.sample()["power_w"] == 200.0 and mon.gpu_available and mon.name == "H200"
    gpu.ok = False
    now[0] = 11.0
    row = mon.sample()
    assert "cpu_pct" in row and not mon.gpu_available and "NVML init failed" in mon.reason
    assert [s["t"] for s in mon.samples()] == [-1.0, 0.0]
    assert no_gpu_reason("cpu") == "no NVIDIA GPU: running on CPU"
    assert "MPS" in no_gpu_reason("mps")
    assert handlers.device_frame(Playground(FakeEngine(), monitor=False))["device"].layout.title.text


def test_batch_size_shows_in_status_and_latency_hover():
    events = make_events()
    for ev in events[1:]:
        ev.batch_size = 3
    st = RunState()
    for ev in events[:-1]:
        ev.finish_reason = None
        st.add(ev)
    assert "sharing each step with 2 other requests" in st.status_line()
    fig = figures.latency_figure(st.token_index, st.step_ms, st.phases, 10, True, st.batch_sizes)
    assert list(fig.data[1].customdata) == [3, 3] and "batch of" in fig.data[1].hovertemplate


def test_memory_figure_names_a_preallocated_kv_pool():
    mem = memory_to_plain({"device": "cpu", "parts": [{"name": "kv_cache", "bytes": 536_870_912, "measured": True}]})
    fig = figures.memory_figure(mem, request_kv_bytes=4_147_200)
    assert "pool" in fig.data[0].name and "4.1 MB" in fig.data[0].name
    assert "pool" not in figures.memory_figure(mem, request_kv_bytes=536_870_912).data[0].name


def test_memory_legend_after_the_request_ended_says_its_blocks_are_free():
    mem = memory_to_plain({"device": "cpu", "parts": [{"name": "kv_cache", "bytes": 536_870_912, "measured": True}]})
    live = figures.memory_figure(mem, request_kv_bytes=13_900_000).data[0].name
    done = figures.memory_figure(mem, request_kv_bytes=13_900_000, request_done=True).data[0].name
    assert "your request uses 13.9 MB" in live
    assert "uses" not in done and "your last request used 13.9 MB, now free again" in done


def test_prefix_cache_hit_counts_the_whole_prompt():
    events = make_events(prompt_len=41)
    events[0].num_tokens = 9  # the engine computed 9 tokens; 32 came from its prefix cache
    st = RunState()
    for ev in events:
        st.add(ev)
    assert st.prompt_tokens == 41 and st.prefill_computed == 9
    fig = figures.latency_figure(st.token_index, st.step_ms, st.phases, st.prompt_tokens, True,
                                 st.batch_sizes, st.prefill_computed)
    assert "41 tokens: 9 computed, 32 from the prefix cache" in fig.data[0].name


def test_memory_figure_on_cuda_parts():
    names = ["weights", "kv_cache", "activations", "allocator_cache", "context_other", "free"]
    mem = memory_to_plain({"device": "cuda:0", "total_label": "GPU total (NVML)",
                           "parts": [{"name": n, "bytes": (i + 1) * 10**9, "measured": True} for i, n in enumerate(names)]})
    fig = figures.memory_figure(mem)
    labels = [t.name for t in fig.data]
    assert labels[0] == "weights 1.0 GB" and labels[-1] == "free 6.0 GB"
    assert "CUDA context + other 5.0 GB" in labels and "allocator cache 4.0 GB" in labels
    assert not any("(est.)" in label for label in labels)
    assert "21.0 GB" in fig.layout.title.text


def test_kv_plot_before_a_run_spans_a_context_and_after_one_its_own_tokens():
    """Empty, the formula line still runs to 256 tokens (the axes read bytes, not -1..1); a
    finished request's plot ends at its own tokens, not at prompt + max new tokens."""
    from app.render import figures

    empty = figures.kv_figure([], [], 23_040)
    assert empty.data[0]["x"] == [0, 256] and empty.data[0]["y"] == [0, 256 * 23_040]
    done = figures.kv_figure([40, 41, 42], [40 * 23_040, 41 * 23_040, 42 * 23_040], 23_040)
    assert done.data[0]["x"] == [0, 42]


def test_page_refusals_name_the_sidebar_label():
    from app.tabs.playground.handlers import make_params, page_message

    with pytest.raises(ValueError) as info:
        make_params(0.7, 0.95, 50, 0.0, 1.1, 2.5, -1)
    assert page_message(info.value).startswith("max new tokens (max_tokens) must be")
    with pytest.raises(ValueError) as info:
        make_params(0.7, 7.0, 50, 0.0, 1.1, 16, -1)
    assert page_message(info.value).startswith("top-p (top_p) must be")
    assert page_message(ValueError("prompt is empty")) == "prompt is empty"
