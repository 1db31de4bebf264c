"""LLMEngine.hold(): requests submitted inside it start in the same step."""

import time

import pytest

from engine import SamplingParams


@pytest.mark.fast
def test_requests_submitted_while_held_share_their_first_step(engine):
    params = SamplingParams(temperature=0, max_tokens=3)
    with engine.hold():
        a = engine.submit("Name a colour.", params, cache_salt="hold-a")
        time.sleep(0.05)  # an idle engine would have started a's prefill by now
        b = engine.submit("Name a fruit.", params, cache_salt="hold-b")
    a.result(), b.result()
    first_a, first_b = a.events[0], b.events[0]
    assert first_a.batch_size == first_b.batch_size == 2
    assert (first_a.start_s, first_a.end_s) == (first_b.start_s, first_b.end_s)


def test_a_hold_that_is_never_released_stalls_for_its_timeout_only(engine):
    held = engine.hold(timeout_s=0.3)
    held.__enter__()
    try:
        t = time.perf_counter()
        out = engine.generate("Hi", SamplingParams(temperature=0, max_tokens=1))
        assert out.finished_ok and time.perf_counter() - t < 5
    finally:
        held.__exit__(None, None, None)
