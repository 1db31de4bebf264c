"""app.state.run_state: one request's events folded into the series, live metrics and status
line the page draws (fake events, no engine)."""

import pytest

from app.render import figures
from engine import SamplingParams
from app.state.run_state import RunState, Throttle, memory_to_plain
from tests.support.fakes import BPT, make_events, make_output


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


def test_a_prompt_being_read_shows_its_length():
    """Before the first token (a long prompt's prefill) the status line and the cards give the
    prompt's length as the engine counted it at submit; the prefill event's count replaces it."""
    events = make_events(prompt_len=10)
    st = RunState(submitted_s=events[0].start_s - 0.01, submitted_prompt_tokens=3042)
    assert st.status_line() == "Prefill: reading the prompt (3,042 tokens)…"
    m = st.live_metrics(now=events[0].start_s)
    assert m["prompt_tokens"] == 3042 and m["ttft_s"] is None and m["prefill_tokens_per_s"] is None
    st.add(events[0])
    assert st.live_metrics(now=events[0].end_s)["prompt_tokens"] == 10


def test_the_engines_handle_knows_the_prompts_length(engine):
    handle = engine.submit("one two three", SamplingParams(max_tokens=1, temperature=0), raw=True)
    out = handle.result(60)
    assert handle.num_prompt_tokens == len(out.prompt_token_ids) > 0


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


def test_ends_within_reads_the_remaining_tokens_at_the_recent_decode_rate():
    events = make_events(texts=tuple("abcdefghij"), decode_s=0.05, finish=None)  # 10 tokens
    st = RunState()
    st.add(events[0])
    assert not st.ends_within(11, 10.0)                   # one token: no rate yet
    for ev in events[1:]:
        st.add(ev)
    # the last 8 gaps are decode steps of 0.05 s; 20 tokens left take 1.0 s
    assert st.ends_within(30, 1.01) and not st.ends_within(30, 0.99)
    assert st.ends_within(10, 0.0)                        # at its limit
    st.finish_reason = "stop"
    assert st.ends_within(30, 0.0)                        # ended: its last frame comes next


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


def test_a_prefill_in_chunks_is_named_by_its_steps():
    """The engine's prefill event counts its chunks (``num_steps``); the legend said "in one
    pass" for a 1,751-token prompt prefilled in several steps."""
    events = make_events(prompt_len=1751)
    events[0].num_steps = 5
    st = RunState()
    for ev in events:
        st.add(ev)
    assert st.prefill_steps == 5
    fig = figures.latency_figure(st.token_index, st.step_ms, st.phases, st.prompt_tokens, True,
                                 st.batch_sizes, st.prefill_computed, prefill_steps=st.prefill_steps)
    assert fig.data[0].name == "prefill (1,751 tokens in 5 chunks)"
