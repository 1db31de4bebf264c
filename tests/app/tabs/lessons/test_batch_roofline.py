"""The batch-size and memory-bound-or-compute-bound lessons without a browser: the intensity
formulas against a hand calculation, the ridge points of the published figures, the knee, the
figures' data, and lesson requests labelled as such on the real engine."""

from __future__ import annotations

import math

import pytest

from app.tabs.lessons import batch as lesson_batch, roofline as lesson_roofline
from app.tabs.lessons.runs import LESSON_PREFIX, LessonEngine, is_lesson_request
from engine.experiments import intensity
from engine.experiments.common import greedy

# the embedded model with int4 weights and a bf16 KV cache (README: 94,835,584 bytes stored,
# 23,040 B per token); 134,515,008 parameters
SMOL = intensity.DecodeShape(params=134_515_008, weight_bytes=94_835_584, kv_bytes_per_token=23_040,
                             layers=30, heads=9, head_dim=64)


def test_intensity_matches_a_hand_calculation():
    flops = 4 * (2 * 134_515_008 + 4 * 30 * 9 * 64 * 512)
    read = 94_835_584 + 4 * 512 * 23_040
    assert SMOL.flops(4, 512) == flops and SMOL.bytes_read(4, 512) == read
    assert SMOL.intensity(4, 512) == pytest.approx(flops / read)
    assert SMOL.intensity(1, 0) == pytest.approx(2 * 134_515_008 / 94_835_584)  # about 2.8 FLOPs per byte
    # a huge batch approaches the per-sequence ratio: FLOPs and KV bytes both grow with it
    assert SMOL.intensity(10**9, 512) == pytest.approx(SMOL.intensity_limit(512), rel=1e-3)
    assert math.isinf(SMOL.intensity_limit(0))


def test_published_ridges_and_crossovers():
    ridges = {g["name"]: g for g in intensity.published_ridges()}
    assert set(ridges) == {"T4", "L4", "A100 80 GB SXM", "H100 SXM", "H200 SXM"}
    assert ridges["H100 SXM"]["ridge"] == pytest.approx(989e12 / 3350e9)
    assert ridges["A100 80 GB SXM"]["ridge"] == pytest.approx(312e12 / 2039e9)
    assert all(g["source"].startswith("NVIDIA") for g in ridges.values())
    r = ridges["H200 SXM"]["ridge"]
    b = SMOL.crossover_batch(r, 0)  # the weights alone turn compute-bound ...
    assert SMOL.intensity(b, 0) >= r > SMOL.intensity(b - 1, 0)
    assert SMOL.crossover_batch(r, 512) is None  # ... the whole step at 512 tokens never does
    assert SMOL.crossover_batch(1.0, 512) == 1
    with pytest.raises(ValueError, match="bandwidth"):
        intensity.ridge_point(1e12, 0)


def test_roofline_figure_and_table_name_every_ridge():
    machine = {"device": "cpu", "dtype": "bfloat16", "bandwidth_gb_per_s": 40.0, "flops_per_s": 4e11,
               "ridge": 10.0}
    fig = lesson_roofline.roofline_figure(SMOL, 512, machine)
    names = [t.name for t in fig.data if t.name]
    assert any("this machine" in n for n in names) and sum("datasheet" in n for n in names) == 5
    curve = fig.data[0]
    assert list(curve.x) == lesson_roofline.BATCHES
    assert list(curve.y) == pytest.approx([SMOL.intensity(b, 512) for b in lesson_roofline.BATCHES])
    table = lesson_roofline.roofline_table(SMOL, 512, machine)
    assert "| this machine (cpu, bfloat16) | 40.0 GB/s | 0.4 | 10.0 |" in table
    assert f"| {SMOL.crossover_batch(10.0, 0)} | {SMOL.crossover_batch(10.0, 512)} |" in table
    assert "H200 SXM (bf16) | 4,800.0 GB/s" in table and "never" in table
    assert "this machine" not in lesson_roofline.roofline_table(SMOL, 512, None)


def test_knee_is_the_last_size_before_doubling_stops_paying():
    rows = [{"batch": b, "throughput_tokens_per_s": t, "per_token_latency_ms": ms}
            for b, t, ms in ((1, 20, 50), (2, 38, 52), (4, 70, 55), (8, 90, 85), (16, 100, 150))]
    k = lesson_batch.knee(list(reversed(rows)))
    assert (k["batch"], k["next"]) == (4, 8)
    assert k["throughput_gain"] == pytest.approx(90 / 70) and k["latency_growth"] == pytest.approx(85 / 55)
    linear = [{**r, "throughput_tokens_per_s": 20 * r["batch"]} for r in rows]
    assert lesson_batch.knee(linear)["batch"] is None
    text = lesson_batch.batch_summary({"rows": rows, "new_tokens": 24})
    assert "knee is at batch 4" in text and "5.0×" in text
    assert "no knee yet" in lesson_batch.batch_summary({"rows": linear, "new_tokens": 24})
    fig = lesson_batch.batch_figure(rows)
    assert [list(t.x) for t in fig.data] == [[1, 2, 4, 8, 16]] * 4
    # the ideal: batch 1's decode-only rate (1 ÷ 50 ms) times the batch
    assert list(fig.data[2].y) == pytest.approx([20, 40, 80, 160, 320])


def test_batch_lesson_defines_and_computes_both_throughputs(engine):
    """Decode-only = batch ÷ TPOT and end-to-end = batch × new tokens ÷ wall time (prefill in),
    on a real sweep of three rounds in turns: the page's numbers are medians of the rounds and
    those divisions of the run's own figures, the ridge is the division it prints, and the
    prefix cache served nothing."""
    import statistics

    text = lesson_batch.TEXT
    assert "decode-only = batch ÷ TPOT" in text and "batch × new tokens ÷ wall time" in text
    assert "prefill" in text and f"{lesson_batch.REPEATS} times, in turns" in text and "median" in text
    res = lesson_batch.run_batch(engine, 4)
    rows = sorted(res["rows"], key=lambda r: r["batch"])
    assert [r["batch"] for r in rows] == list(lesson_batch.SIZES) and res["repeats"] == lesson_batch.REPEATS == 3
    for r in rows:
        assert len(r["throughput_runs"]) == len(r["per_token_latency_runs_ms"]) == 3
        assert r["throughput_tokens_per_s"] == statistics.median(r["throughput_runs"])
        assert r["per_token_latency_ms"] == statistics.median(r["per_token_latency_runs_ms"])
        assert r["cached_prompt_tokens"] == 0  # every prompt salted: nothing shared
        assert lesson_batch.decode_throughput(r) == pytest.approx(r["batch"] / (r["per_token_latency_ms"] / 1000))
        assert r["throughput_tokens_per_s"] == pytest.approx(r["batch"] * 4 / r["e2e_s"])  # an odd count
    fig = lesson_batch.batch_figure(rows)
    assert "end to end" in fig.data[1].name and "prefill included" in fig.data[1].name
    assert fig.data[3].name == "decode only: batch ÷ TPOT"
    assert list(fig.data[3].y) == pytest.approx([lesson_batch.decode_throughput(r) for r in rows])
    summary = lesson_batch.batch_summary(res)
    last = rows[-1]
    tpot = round(last["per_token_latency_ms"] / 1000, 4)
    assert f"({last['batch']} ÷ {tpot:.4f} s)" in summary
    assert "end-to-end throughput went from" in summary and "decode-only" in summary
    assert "median of 3 runs" in summary and "prefix cache served 0 tokens" in summary
    # the ridge: this machine's measured FLOP/s over its bandwidth, crossed by the model's intensity
    r = res["ridge"]
    assert r["ridge"] == r["gflops"] / r["bandwidth_gb_per_s"] > 0
    shape = lesson_roofline.model_shape(engine)
    assert r["context"] == max(x["prompt_tokens"] for x in rows) + 2  # prompt + (4 − 1) / 2, rounded
    if r["batch"] is not None:
        assert shape.intensity(r["batch"], r["context"]) >= r["ridge"]
        assert r["batch"] == 1 or shape.intensity(r["batch"] - 1, r["context"]) < r["ridge"]
        assert f"batch ≈ {r['batch']}" in summary or r["batch"] == 1
    assert f"{r['gflops']:,.1f} GFLOP/s ÷ {r['bandwidth_gb_per_s']:,.1f} GB/s = <b>{r['ridge']:,.1f} FLOPs per byte</b>" \
        in summary


def test_ridge_crossing_prints_an_exact_division():
    """The ridge is the quotient of the rounded figures the page prints, and the batch is the
    first whose intensity reaches it (the roofline lesson's formula)."""
    machine = {"flops_per_s": 123.456e9, "bandwidth_gb_per_s": 9.87, "device": "cpu", "dtype": "float32"}
    r = lesson_batch.ridge_crossing(SMOL, machine, 40)
    assert (r["gflops"], r["bandwidth_gb_per_s"]) == (123.5, 9.9) and r["ridge"] == 123.5 / 9.9
    assert r["batch"] == SMOL.crossover_batch(123.5 / 9.9, 40) and r["batch"] > 1
    assert r["intensity_before"] < r["ridge"] <= r["intensity_at"]
    html_ = lesson_batch.ridge_html(r, 4)
    assert "123.5 GFLOP/s ÷ 9.9 GB/s = <b>12.5 FLOPs per byte</b>" in html_ and f"batch ≈ {r['batch']}" in html_
    assert "knee measured above is at batch 4" in html_
    never = lesson_batch.ridge_crossing(SMOL, {**machine, "flops_per_s": 1e15}, 4096)
    assert never["batch"] is None and "memory-bound at any batch" in lesson_batch.ridge_html(never, None)
    assert lesson_batch.mean_context([{"prompt_tokens": 30}, {"prompt_tokens": 33}], 24) == 45  # 33 + 11.5


def test_batch_lesson_refuses_a_bad_answer_length(engine):
    with pytest.raises(ValueError, match="new_tokens"):
        lesson_batch.run_batch(engine, 1000)
    with pytest.raises(ValueError, match="new_tokens"):
        lesson_batch.run_batch(engine, "many")


def test_lesson_requests_carry_lesson_ids(engine):
    eng = LessonEngine(engine, "batch", {"cache_salt": "s1"})
    handle = eng.submit("Say hi.", greedy(2))
    out = handle.result()
    assert out.finished_ok and handle.request_id.startswith(LESSON_PREFIX + "batch-")
    assert is_lesson_request(out.request_id) and not is_lesson_request("req-3")
    assert eng.info is engine.info  # everything else is the engine's


def test_overhead_bars_and_table_come_from_one_compile_run():
    """The third regime's stacked bars and table read one ``compile`` experiment result: the
    bars are the timed steps split by the profile's shares, the ratio and the roof shares are
    the result's own."""
    parts = {"matrix products": 6.0, "attention": 1.5, "other operators": 3.0, "python and dispatch": 9.5}
    fast = {**parts, "python and dispatch": 2.5}
    res = {"batch_sizes": [1], "eager_tokens_per_s": {1: 50.0}, "compiled_tokens_per_s": {1: 80.0},
           "roofline_fraction": {"eager": 50 / 320, "compiled": 80 / 320},
           "rounds": {"eager": {1: [49.0, 51.0]}, "compiled": {1: [79.0, 81.0]}},
           "bandwidth_gb_per_s": 31.6, "bytes_per_step": 98_000_000, "ceiling_tokens_per_s": 322.4,
           "compile": {"compile_s": 61.2, "cache_hits": 0},
           "parity": [{"equal": True}, {"equal": False, "first_difference": 30}],
           "profile": {"eager": parts, "compiled": fast}}
    fig = lesson_roofline.overhead_figure(res)
    assert [t.name for t in fig.data] == list(lesson_roofline.PARTS)
    # the compiled bar: 12.5 ms a step (1000 / 80 tok/s) in the profile's shares of its 13 ms
    assert [t.y[1] for t in fig.data] == pytest.approx([6.0 * 12.5 / 13, 1.5 * 12.5 / 13,
                                                        3.0 * 12.5 / 13, 2.5 * 12.5 / 13])
    assert sum(t.y[0] for t in fig.data) == pytest.approx(20.0)        # eager: 20 ms a step
    table = lesson_roofline.overhead_table(res)
    assert "| compiled | 80.0 | 12.5 | 25.0% |" in table and "**1.60×**" in table
    assert "= 322 tokens/s" in table and "61 s" in table and "1 of 2 prompts" in table
    assert "Not measured" in lesson_roofline.overhead_table(None)
    assert len(lesson_roofline.overhead_figure(None).layout.annotations) == 1


def test_knee_and_ridge_labels_sit_on_their_lines():
    """On the log batch axis a label goes at log10 of its batch (a shape at the batch itself),
    so each label stands beside its own line."""
    rows = [{"batch": b, "throughput_tokens_per_s": t, "per_token_latency_ms": ms}
            for b, t, ms in ((1, 20, 50), (2, 38, 52), (4, 70, 55), (8, 90, 85), (16, 100, 150))]
    fig = lesson_batch.batch_figure(rows, ridge_batch=6)
    labels = {a.text.strip(): a.x for a in fig.layout.annotations if a.text.strip().startswith(("knee", "ridge"))}
    assert labels == {"knee: batch 4": pytest.approx(math.log10(4)), "ridge: batch ≈ 6": pytest.approx(math.log10(6))}
    assert sorted(s.x0 for s in fig.layout.shapes) == [4, 4, 6]
    # a ridge past the axis gets no line, and its label sits at the axis's right edge saying so
    off = lesson_batch.batch_figure(rows, ridge_batch=64)
    assert sorted(s.x0 for s in off.layout.shapes) == [4, 4]
    assert [(a.text, a.x) for a in off.layout.annotations if "ridge" in a.text] == \
        [("ridge: batch ≈ 64, off this axis →", lesson_batch.X_RANGE[1])]


def test_the_step_drawing_and_the_read_time_follow_the_tables_own_figures():
    """The student's run: the profiler's steps came to ~148 ms (eager) and ~45 ms (compiled)
    while the table said 20.3 and 60.9 tok/s; the bars now add up to the table's ms per step, and
    the time to read a step's bytes is worked out from the bandwidth the table prints (no fixed
    "about 3 ms" in the text)."""
    import re

    eager = {"matrix products": 40.0, "attention": 8.0, "other operators": 30.0, "python and dispatch": 70.0}
    comp = {"matrix products": 30.0, "attention": 5.0, "other operators": 5.0, "python and dispatch": 5.0}
    res = {"batch_sizes": [1], "eager_tokens_per_s": {1: 20.3}, "compiled_tokens_per_s": {1: 60.9},
           "roofline_fraction": {"eager": 0.1, "compiled": 0.3},
           "rounds": {"eager": {1: [20.0, 20.6]}, "compiled": {1: [60.0, 61.8]}},
           "bandwidth_gb_per_s": 15.9, "bytes_per_step": 96_000_000, "ceiling_tokens_per_s": 165.6,
           "compile": {"compile_s": 5.0, "cache_hits": 3}, "parity": [{"equal": True}],
           "profile": {"eager": eager, "compiled": comp}}
    fig = lesson_roofline.overhead_figure(res)
    table = lesson_roofline.overhead_table(res)
    for col, path in enumerate(("eager", "compiled")):
        drawn = sum(t.y[col] for t in fig.data)
        printed = float(re.search(rf"\| {path}[^|]*\| [\d.]+ \| ([\d.]+) \|", table).group(1))
        assert round(drawn, 1) == printed == round(1000 / res[f"{path}_tokens_per_s"][1], 1)
    bw, mb, ms = re.search(r"Reading a step's ([\d.]+) MB .* at the ([\d.]+) GB/s measured in this "
                           r"run takes \*\*([\d.]+) ms\*\*", table).group(2, 1, 3)
    assert float(ms) == round(float(mb) / float(bw), 1) == 6.0
    assert "3 ms" not in lesson_roofline.OVERHEAD_TEXT


def test_the_free_line_never_lies_below_the_decode_only_curve_and_the_ridge_is_named():
    """The student's sweep: 28.7 tok/s end to end at batch 1 (prefill included) but 1 ÷ 18 ms =
    55.6 tok/s decoding; a line of batch × 28.7 fell below the measured decode-only points. The
    ridge's batch 39 lies past the axis's 16: the plot names it at the edge."""
    rows = [{"batch": b, "throughput_tokens_per_s": t, "per_token_latency_ms": ms}
            for b, t, ms in ((1, 28.7, 18.0), (2, 50.0, 19.0), (4, 78.9, 21.0), (8, 95.0, 40.0),
                             (16, 110.0, 90.0))]
    fig = lesson_batch.batch_figure(rows, ridge_batch=39)
    ideal = next(t for t in fig.data if t.name.startswith("if sequences were free"))
    decode = next(t for t in fig.data if t.name.startswith("decode only"))
    assert all(i >= d - 1e-9 for i, d in zip(ideal.y, decode.y)), (ideal.y, decode.y)
    assert ideal.y[0] == pytest.approx(decode.y[0]) == pytest.approx(1000 / 18)
    # a larger batch that ran faster per sequence sets the slope, and the line still covers it
    fast = [dict(r) for r in rows]
    fast[1]["per_token_latency_ms"] = 8.0      # batch 2: 250 tok/s, 125 per sequence
    fig2 = lesson_batch.batch_figure(fast)
    ideal2 = next(t for t in fig2.data if t.name.startswith("if sequences were free"))
    decode2 = next(t for t in fig2.data if t.name.startswith("decode only"))
    assert all(i >= d - 1e-9 for i, d in zip(ideal2.y, decode2.y)) and "batch 2's" in ideal2.name
    notes = [a.text for a in fig.layout.annotations]
    assert any("ridge: batch ≈ 39" in t and "off this axis" in t for t in notes), notes


def test_the_decode_share_quotes_the_batch_lessons_batch_1_tpot_beside_its_own(engine):
    """Batch-1 time per token read 18 ms in the Batch size lesson and 10.3 ms in the decode share,
    with nothing tying them: the decode share now prints the lesson's last batch-1 TPOT beside its
    own, in the same format, with the time it ran and why they differ."""
    import re

    from app.tabs.lessons import batch as lesson, last_runs, prefill

    last_runs.clear()
    try:
        assert lesson.batch1_tpot_note(10.3, 100) == ""  # nothing quoted before the lesson ran
        lesson.record_last_run([{"batch": 1, "throughput_tokens_per_s": 50.0, "per_token_latency_ms": 18.04},
                                {"batch": 2, "throughput_tokens_per_s": 90.0, "per_token_latency_ms": 21.0}], 24)
        _, msg = prefill.run_share(engine, 20)
    finally:
        last_runs.clear()
    own = re.search(r"one decode step \(TPOT\) took ([\d.]+ ms)\.", msg).group(1)
    assert f"measured <b>18.0 ms</b> at batch 1 against {own} here" in msg, msg
    assert "24 new tokens there, 20 here" in msg
    assert "so the two differ" in msg or "the longer answer was the faster one" in msg


def test_the_tpot_note_blames_the_kv_cache_only_when_the_longer_answer_was_slower():
    """The student read "a longer answer reads a longer KV cache at every step" beside a longer
    answer that was the faster of the two: the reason given now follows the figures."""
    from app.tabs.lessons import batch as lesson, last_runs

    last_runs.clear()
    try:
        lesson.record_last_run([{"batch": 1, "throughput_tokens_per_s": 50.0, "per_token_latency_ms": 11.0}], 24)
        slower = lesson.batch1_tpot_note(7.6, 100)  # the longer answer (here) the faster one
        faster = lesson.batch1_tpot_note(14.0, 100)
        same = lesson.batch1_tpot_note(14.0, 24)
    finally:
        last_runs.clear()
    assert "the longer answer was the faster one" in slower and "longer KV cache at" not in slower
    assert "a longer answer reads a longer KV cache at every step" in faster
    assert "the same answer length (24 new tokens)" in same


def test_the_summary_names_the_decode_only_peak_when_it_is_not_the_knee():
    """The student read "knee at batch 1" beside a decode-only curve that peaked at batch 4:
    the summary now names that peak and why the two differ; where they agree it adds nothing."""
    from app.tabs.lessons.batch import decode_peak_html, knee

    rows = [{"batch": 1, "throughput_tokens_per_s": 51.1, "per_token_latency_ms": 11.0},
            {"batch": 2, "throughput_tokens_per_s": 60.0, "per_token_latency_ms": 19.0},
            {"batch": 4, "throughput_tokens_per_s": 80.0, "per_token_latency_ms": 19.5},
            {"batch": 16, "throughput_tokens_per_s": 95.8, "per_token_latency_ms": 110.0}]
    k = knee(rows)["batch"]
    assert k == 1
    text = decode_peak_html(rows, k)
    assert "peaks at <b>batch 4</b>" in text and "(4 ÷ 0.0195 s)" in text and "past the end-to-end knee" in text
    assert decode_peak_html(rows, 4) == ""
