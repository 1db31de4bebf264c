"""app.render.figures: the latency, KV cache, memory and device plots from plain series."""

from app.render import figures
from app.state.run_state import memory_to_plain
from tests.support.fakes import BPT


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
    assert "plotted here" in empty.layout.annotations[0].text


def test_a_chunked_prefill_is_named_by_its_chunks_not_one_pass():
    """A long prompt is prefilled over several engine steps; the legend said "in one pass"."""
    fig = figures.latency_figure([1, 2], [900.0, 50.0], ["prefill", "decode"], prompt_tokens=1751,
                                 prefill_steps=7)
    assert fig.data[0].name == "prefill (1,751 tokens in 7 chunks)"
    cached = figures.latency_figure([1], [400.0], ["prefill"], prompt_tokens=800, prefill_computed=544,
                                    prefill_steps=3)
    assert cached.data[0].name == "prefill (800 tokens: 544 computed in 3 chunks, 256 from the prefix cache)"


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


def test_long_live_traces_drop_their_markers_and_keep_appending():
    """Past MARKER_POINTS points the latency and KV traces are lines (one SVG path instead of a
    path per point): the switch is one trace sent whole, and later frames append again."""
    from app.render.live_ops import figure_op

    def latency(n):
        return figures.latency_figure(list(range(1, n + 1)), [20.0] * n, ["prefill"] + ["decode"] * (n - 1), 10)

    def kv(n):  # n - 1 points, as the latency figure's decode trace
        return figures.kv_figure(list(range(11, 10 + n)), [100 * t for t in range(11, 10 + n)], 100)

    for make, i in ((latency, 1), (kv, 1)):
        few, edge, past, more = (make(n) for n in (100, figures.MARKER_POINTS + 1, figures.MARKER_POINTS + 2,
                                                     figures.MARKER_POINTS + 12))
        assert "markers" in few.traces[i]["mode"] and "markers" in edge.traces[i]["mode"]
        assert past.traces[i]["mode"] == "lines" == more.traces[i]["mode"]
        assert str(i) in figure_op(edge, past)["tr"]               # the switch: sent whole once
        assert "tr" not in (figure_op(past, more) or {}).get("tr", {}).get(str(i), {}) and \
            len(figure_op(past, more)["ext"][str(i)]["x"]) == 10   # then appended again
