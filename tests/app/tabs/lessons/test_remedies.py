"""The Remedies lesson: the thinking questions and every remedy named with where it is shown, and
its measurements on the real embedded model (one run through the shared fp32 engine): each
figure comes from the engine and every printed equation's result is its own arithmetic."""

from __future__ import annotations

import re

import pytest

from app.tabs import lessons
from app.tabs.lessons import last_runs, remedies
from engine.experiments import remedies as measurements
from engine.telemetry.estimator import quantized_weight_bytes
from app.state.playground import Playground
from tests.support.fakes import FakeEngine

REMEDIES = ("prefix cache", "chunked prefill", "shorter prompts", "scheduling", "GQA", "fp8 KV",
            "paging and block sharing", "sliding window", "smaller batch or context", "weight quantization",
            "batching", "speculative decoding", "a compiled decode step")
BOTTLENECKS = ("High TTFT", "High TPOT", "KV cache near full", "Weights don't fit", "Throughput flat with batch")


def test_questions_and_remedies_name_where_each_is_shown():
    assert lessons.LESSONS[-1] == "remedies" and len(remedies.TITLE) <= 10
    q = remedies.questions_markdown()
    for i in range(1, 6):
        assert f"**Q{i}**" in q
    titles = {m.TITLE for m in lessons.lesson_modules()}
    md = remedies.remedies_markdown(None, {})
    for b in BOTTLENECKS:
        assert f"#### {b}" in md
    for name in REMEDIES:
        assert f"**{name}" in md, name
    for _, _, rs in remedies.BOTTLENECKS:
        for r in rs:  # a lesson tab of this bar, a top tab, or a Playground control
            named = re.findall(r"Lessons › \*\*(.+?)\*\*", r.where)
            assert all(t in titles for t in named), r.where
            assert (named or "Playground" in r.where or "Beams and samples" in r.where
                    or "this view's **Measure**" in r.where), r.where
    for _, text, where in remedies.QUESTIONS:
        assert all(t in titles for t in re.findall(r"Lessons › \*\*(.+?)\*\*", where)), where
    assert md.count(remedies.NOT_YET) >= 10  # nothing claimed before a measurement


def test_sliding_window_and_fit_are_computed_from_configs():
    s = remedies.sliding_window_bytes()
    assert s["window"] == 4096 and s["per_token"] == 2 * 32 * 8 * 128 * 2
    assert s["with_window"] == 4096 * s["per_token"] and s["without"] == 32768 * s["per_token"]
    cell = remedies.cell_sliding(None, {})
    assert "computed, not measured" in cell and "4,096 × 131,072 B" in cell
    f = remedies.fit_large_model()
    assert not f["fp16_fits"] and f["int4_fits"] and f["int4"] < f["fp16"]


def test_last_runs_are_quoted_with_their_time():
    last_runs.clear()
    off = remedies.cell_compiled(None, {"compile_run": None})
    assert "press “Time eager against compiled”" in off and "compiling is off" in off
    on = remedies.cell_compiled(None, {"compile": {"path": "compiled", "status": "ready", "ready": [1, 2],
                                                   "steps_compiled": 40, "steps_eager": 3}})
    assert "**compiled**" in on and "buckets compiled: 1, 2" in on and "40 compiled and 3 eager" in on
    last_runs.record("compile", {"batch": 1, "eager_tokens_per_s": 20.0, "compiled_tokens_per_s": 50.0})
    run = last_runs.latest("compile")
    cell = remedies.cell_compiled(None, {"compile_run": run, "compile": {"path": "compiled", "status": "ready"}})
    assert "20.0 → 50.0 tok/s" in cell and "50.0 ÷ 20.0 = 2.5×" in cell and "UTC" in cell
    last_runs.clear()
    assert last_runs.latest("compile") is None


@pytest.fixture(scope="module")
def measured(engine):
    """A Measure on the shared engine, with the batch sweep it reused as ``sweep`` (a real sweep
    of short answers run just before, so the Measure takes the recent one instead of its own)."""
    from app.tabs.lessons import batch

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batch, "REPEATS", 1)  # one round of each size: a real sweep, a third of the time
        batch.run_batch(engine, 4, None, {"cache_salt": "remedies-test"})
    kept = last_runs.latest("batch")
    m = remedies.run_measurements(engine, {"cache_salt": "remedies-test"})
    assert last_runs.latest("batch")["at"] == kept["at"]  # reused, not swept again
    return {**m, "sweep": last_runs.latest("batch")}


def test_every_part_measured(measured):
    assert [p for p in measurements.PARTS if "error" in measured[p]] == []


def test_prefix_cache_cuts_ttft_on_the_engine(measured):
    r = measured["prefix_cache"]
    assert r["prefix_caching"] and r["cold_cached_tokens"] == 0
    assert r["cached_tokens"] > 0 and r["cached_tokens"] % 16 == 0 and r["cached_tokens"] < r["prompt_tokens"]
    assert r["warm_ttft_s"] < r["cold_ttft_s"]
    assert r["short_prompt_tokens"] < r["prompt_tokens"] // 4


def test_weight_bytes_are_the_engines_accounting(measured, engine):
    rows = {r["weights"]: r for r in measured["weights"]["rows"]}
    assert rows["fp32"]["served"] and rows["fp32"]["weights_bytes"] == engine.info.weights_bytes
    int4 = rows["int4"]["weights_bytes"]
    assert not rows["int4"]["served"] and int4 < rows["fp32"]["weights_bytes"] / 4
    # the loaded int4 model's measured storage, against the layout's formula (rotary buffers aside)
    formula = quantized_weight_bytes(engine.experiment_model().spec, "int4", 2)
    assert formula <= int4 < formula * 1.01


def test_kv_pool_bytes_per_token(measured, engine):
    r = measured["kv_pools"]
    spec = engine.experiment_model().spec
    assert r["engine_bytes_per_token"] == engine.pool.bytes_per_token == spec.kv_bytes_per_token(4)
    assert r["fp8_bytes_per_token"] == spec.kv_bytes_per_token(1)
    assert r["mha_bytes_per_token"] * r["kv_heads"] == r["engine_bytes_per_token"] * r["heads"]
    assert r["pool_bytes"] == engine.pool_bytes


def test_batching_sharing_speculation_chunking_and_sampling(measured):
    rows = {r["batch"]: r for r in measured["sweep"]["rows"]}
    assert sorted(rows) == [1, 2, 4, 8, 16] and "batch" not in measurements.PARTS
    assert rows[8]["throughput_tokens_per_s"] > rows[1]["throughput_tokens_per_s"]
    assert rows[8]["ttft_s"] >= rows[1]["ttft_s"] > 0
    s = measured["block_sharing"]
    assert s["independent_blocks"] == s["logical_blocks"] and s["grouped_blocks"] < s["independent_blocks"]
    assert s["grouped_blocks"] >= s["logical_blocks"] // s["n"]
    sp = measured["speculative"]
    assert sp["identical_tokens"] and sp["acceptance_rate"] > 0
    c = measured["chunked_prefill"]
    assert c["long_prompt_tokens"] > c["chunk_tokens"] and c["chunked"]["max_gap_s"] < c["whole"]["max_gap_s"]
    g = measured["sampling"]
    assert g["greedy_equal"] and g["sampled"][0]["text"] != g["sampled"][1]["text"]
    assert [x["seed"] for x in g["sampled"]] == [1, 2, 1] and g["sampled"][2]["text"] == g["sampled"][0]["text"]


def test_printed_equations_are_their_own_arithmetic(measured, engine):
    md = remedies.remedies_markdown(measured, remedies.engine_facts(engine))
    assert remedies.NOT_YET not in md
    divisions = re.findall(r"([\d,.]+) (?:B )?÷ ([\d,.]+) (?:B )?= ([\d,.]+)(×?)", md)
    assert len(divisions) >= 8
    for a, b, c, times in divisions:
        places = len(c.split(".")[1]) if "." in c else 0
        a, b, c = (float(x.replace(",", "")) for x in (a, b, c))
        if times:  # a ratio, printed to its places
            assert round(a / b, places) == pytest.approx(c), (a, b, c)
        else:  # a count of whole tokens
            assert a // b == c, (a, b, c)
    r = measured["kv_pools"]
    per = r["engine_bytes_per_token"]
    assert f"8 sequences × 2,048 tokens × {per:,} B" in md
    prefix = measured["prefix_cache"]
    assert f"{round(prefix['cold_ttft_s'] * 1000):,} ms → {round(prefix['warm_ttft_s'] * 1000):,} ms" in md
    examples = remedies.sampling_markdown(measured)
    assert measured["sampling"]["greedy"][0][:10] in examples and "seed 2" in examples
    assert "gave the same answer both times" in examples and "seed 1 repeated its answer" in examples


def test_q1_is_answered_on_the_remedies_tab_itself():
    """Q1 in one click: the 7B model's H100 crossing, by the roofline lesson's formula, sits
    under the questions (13,476,831,232 FLOPs over as many bytes: 1 FLOP per byte per sequence,
    so the weights alone reach the 295 FLOPs-per-byte ridge from batch 296)."""
    from app.tabs.lessons.remedies import questions_markdown

    md = questions_markdown()
    assert "memory-bound" in md and "Llama-2-7b" in md
    assert "from **batch 296**" in md and "295 FLOPs per byte" in md


def test_q4_examples_run_long_enough_and_mark_an_answer_cut_at_the_limit():
    """Sampled answers stopped at 12 tokens mid-sentence with nothing said; now they have room
    for a sentence or two, and one that still stops at the limit is marked as cut."""
    import inspect

    from engine.experiments import remedies as experiment

    limit = inspect.signature(experiment.sampling_examples).parameters["new_tokens"].default
    assert limit >= 32
    m = {"sampling": {"prompt": "Give a name for a small grey cat.", "greedy": ["Smokey.", "Smokey."],
                      "greedy_cut": [False, False], "greedy_equal": True, "temperature": 1.0,
                      "new_tokens": limit,
                      "sampled": [{"seed": 1, "text": "How about Ash, a name that", "cut": True},
                                  {"seed": 2, "text": "Pebble.", "cut": False},
                                  {"seed": 1, "text": "How about Ash, a name that", "cut": True}]}}
    md = remedies.sampling_markdown(m)
    assert f"| temperature 1, seed 1 | How about Ash, a name that… *(cut at {limit} tokens)* |" in md
    # the seed run twice says so on its second row (the student read two identical rows)
    assert md.count("| temperature 1, seed 1 (the same seed again) |") == 1
    assert "| temperature 1, seed 2 | Pebble. |" in md and "| greedy, run 1 | Smokey. |" in md


def test_q4_says_the_playground_chat_keeps_its_history_and_names_its_clear_button(tmp_path):
    """Greedy against sampling on "the same question" in the Playground differ in context, since
    the chat keeps its history: Q4's pointer says so and names the button that starts afresh,
    a button the built page has."""
    import gradio as gr

    from app.page import build_demo

    q4 = next(where for q, _, where in remedies.QUESTIONS if q == "Q4")
    assert "keeps its history" in q4 and "**Clear**" in q4
    demo = build_demo(Playground(FakeEngine(), trace_dir=tmp_path, monitor=False))
    assert [b for b in demo.blocks.values() if isinstance(b, gr.Button) and b.value == "Clear"]


SWEEP = [{"batch": b, "throughput_tokens_per_s": t, "per_token_latency_ms": ms, "ttft_s": ttft,
          "decode_throughput_tokens_per_s": t * 1.2, "prompt_tokens": 30, "cached_prompt_tokens": 0}
         for b, t, ms, ttft in ((1, 28.7, 18.0, 0.09), (2, 50.0, 19.0, 0.12), (4, 78.0, 21.0, 0.2),
                                (8, 104.4, 40.0, 0.41), (16, 110.0, 90.0, 0.8))]


def test_remedies_and_the_batch_lesson_print_one_sweep():
    """The student read batch-8 latency 32 ms in Remedies against 45 ms in Batch size, and 28.1 →
    52.9 tok/s "flat" against 28.7 → 78.9 tok/s with a knee: two sweeps. Now there is one: every
    batching figure Remedies prints is the Batch size lesson's last sweep, and the figures both
    panels (and the profile panel) print for one quantity are equal as printed."""
    from app.tabs.lessons import batch, profile_panel

    last_runs.clear()
    try:
        batch.record_last_run(SWEEP, 24)
        run = last_runs.latest("batch")
        facts = {"batch_run": run, "max_num_batched_tokens": 512}
        _, summary = batch.last_sweep_view()
    finally:
        last_runs.clear()
    k = batch.knee(SWEEP)["batch"]
    cell = remedies.cell_batching(None, facts)
    assert "**28.7 → 104 tok/s** from batch 1 to 8 (104 ÷ 28.7 = 3.6×" in cell and f"knee at batch {k}" in cell
    assert "from the **Batch size** sweep at" in cell and "24 new tokens, medians of 3 rounds" in cell
    tpot = remedies.cell_smaller_batch_tpot(None, facts)
    assert "TPOT **18 ms** at batch 1, **40 ms** at batch 8" in tpot
    ttft = remedies.cell_scheduling(None, facts)
    assert "TTFT **90 ms** alone, **410 ms** (median) when 8 requests" in ttft
    # the lesson's own summary prints the same batch-1 throughput, TPOT and knee
    assert "<b>28.7 tok/s</b>" in summary and "from 18 ms" in summary and f"knee is at batch {k}" in summary
    assert "went from 90 ms alone" in summary  # the TTFT the scheduling remedy's link points at
    side = profile_panel.batching_line(run)
    assert "<b>18 ms</b>" in side and "28.7 tok/s → 110 tok/s" in side and f"knee at batch {k}" in side
    # before a sweep, nothing is claimed
    assert remedies.cell_batching(None, {}) == remedies.NOT_YET


def test_measure_reuses_a_recent_sweep_and_runs_one_when_stale(monkeypatch):
    """Remedies' Measure prints the server's sweep: a recent one is reused, an old or missing one
    is run anew, by the Batch size lesson's own routine and answer length."""
    from app.tabs.lessons import batch

    ran = []

    def fake_run(engine, n, progress=None, submit_kwargs=None):
        ran.append(n)
        batch.record_last_run(SWEEP, n)

    monkeypatch.setattr(batch, "run_batch", fake_run)
    last_runs.clear()
    try:
        first = batch.sweep(object())
        assert ran == [batch.DEFAULT_NEW_TOKENS] and first["rows"][0]["batch"] == 1
        again = batch.sweep(object())
        assert ran == [batch.DEFAULT_NEW_TOKENS] and again["at"] == first["at"]
        batch.sweep(object(), clock=lambda: first["at"] + batch.machine_profile.MAX_AGE_S + 1)
        assert len(ran) == 2
    finally:
        last_runs.clear()


def test_each_remedy_sits_under_what_its_figure_measures_and_points_where_it_is_shown():
    """Chunked prefill's figure is a running answer's longest gap between tokens: it sits under
    High TPOT, not High TTFT; scheduling's TTFT figure is the Batch size sweep's, and that
    lesson's summary now prints it (it showed no TTFT)."""
    groups = {title: {r.name: r for r in rs} for title, _, rs in remedies.BOTTLENECKS}
    tpot = next(g for t, g in groups.items() if t.startswith("High TPOT"))
    ttft = next(g for t, g in groups.items() if t.startswith("High TTFT"))
    assert "chunked prefill" in tpot and "chunked prefill" not in ttft
    assert "gaps" in tpot["chunked prefill"].where and "TTFT" in tpot["chunked prefill"].where
    side = {"max_gap_s": 0.09, "ttft_s": 1.2, "tokens_during": 4}
    m = {"chunked_prefill": {"chunked": side, "whole": {**side, "max_gap_s": 0.9, "ttft_s": 1.0,
                                                        "tokens_during": 1},
                             "long_prompt_tokens": 512, "chunk_tokens": 128}}
    cell = remedies.cell_chunked(m, {})
    assert "longest gap **90 ms**" in cell and "900 ÷ 90 = 10.0×" in cell and "1,200 − 1,000 = 200 ms of TTFT" in cell
    busy = {"chunked_prefill": {**m["chunked_prefill"], "whole": {**side, "max_gap_s": 0.08, "ttft_s": 1.0,
                                                                  "tokens_during": 1}}}
    cell = remedies.cell_chunked(busy, {})
    assert "Chunking cut" not in cell and "did not cut the gap (80 ÷ 90 = 0.9×)" in cell
    assert "#lesson-batch-status" in ttft["scheduling"].where and "time to first token" in ttft["scheduling"].where


def test_a_page_load_draws_the_last_measure_again():
    """A reload wiped Measure: the tables and the status are drawn at every page load from the
    server's last Measure (and the lessons' last runs), so a reload keeps them."""
    import gradio as gr

    from tests.support.fakes import FakeEngine

    with gr.Blocks() as demo:
        lessons.build_lessons(FakeEngine())
    load = next(f for f in demo.fns.values() if f.name == "drawn_now")
    assert load.api_visibility == "private"
    m = {"sampling": {"prompt": "Give a name for a small grey cat.", "greedy": ["Smokey.", "Smokey."],
                      "greedy_cut": [False, False], "greedy_equal": True, "temperature": 1.0, "new_tokens": 40,
                      "sampled": [{"seed": 1, "text": "Ash.", "cut": False}]},
         "elapsed_s": {"sampling": 3.0}}
    last_runs.clear()
    try:
        remedies.keep_measure(m)
        from app.tabs.lessons import batch
        batch.record_last_run(SWEEP, 24)  # the server's sweep: drawn on the Batch size tab too
        table, chunk_fig, sampling, status, batch_fig, batch_summary, version = load.fn()
        assert version == last_runs.version()
    finally:
        last_runs.clear()
    assert "The server's last sweep" in batch_summary and len(batch_fig.data) == 4
    assert "**28.7 → 104 tok/s** from batch 1 to 8" in table
    assert "| temperature 1, seed 1 | Ash. |" in sampling
    assert re.fullmatch(r"Measured at \d\d:\d\d UTC in 3 s\.", status), status
    assert "#### High TTFT" in table


def test_a_lesson_finishing_redraws_the_remedies_without_a_reload():
    """The figures picked up a lesson's last run only at a page load: a timer now redraws them
    when a run was recorded since this page drew (and sends nothing otherwise)."""
    import gradio as gr

    from tests.support.fakes import FakeEngine

    with gr.Blocks() as demo:
        lessons.build_lessons(FakeEngine())
    tick = next(f for f in demo.fns.values() if f.name == "redrawn")
    assert tick.api_visibility == "private"
    last_runs.clear()
    try:
        drawn_at = last_runs.version()
        unchanged = tick.fn(drawn_at)
        assert unchanged[-1] == drawn_at and all(isinstance(v, dict) and v.get("__type__") == "update"
                                                 and len(v) == 1 for v in unchanged[:-1]), unchanged[:-1]
        last_runs.record("compile", {"batch": 1, "eager_tokens_per_s": 20.0, "compiled_tokens_per_s": 50.0})
        table, *_, now = tick.fn(drawn_at)
    finally:
        last_runs.clear()
    assert now != drawn_at and "20.0 → 50.0 tok/s" in table


def test_the_batching_verdict_diagnoses_the_decode_step_as_the_other_lessons_do():
    """The student met three diagnoses of one CPU: "Decode is memory-bound" (Prefill and
    decode), "the step is compute- or overhead-bound here" (Remedies) and a knee at batch 1
    (Batch size). Remedies' flat verdict now keeps the decode step memory-bound, as the others
    say, and names what flattens its end-to-end figure: the prefills it counts, and overhead."""
    rows = [{"batch": 1, "throughput_tokens_per_s": 28.1, "per_token_latency_ms": 28.0, "ttft_s": 0.1},
            {"batch": 8, "throughput_tokens_per_s": 52.9, "per_token_latency_ms": 90.0, "ttft_s": 0.5}]
    run = {"rows": rows, "new_tokens": 16, "rounds": 3, "knee": None, "at": 0.0}
    flat = remedies.cell_batching(None, {"batch_run": run})
    assert "decode step itself is memory-bound" in flat and "compute- or overhead-bound" not in flat
    assert "prefill" in flat and "third regime" in flat
    rows[1]["throughput_tokens_per_s"] = 120.0
    assert "the decode step is memory-bound" in remedies.cell_batching(None, {"batch_run": run})
