"""Prompt tokens served from the prefix cache are reported apart from computed ones, and the
prefill speed counts only the computed ones (vLLM reports ``num_cached_tokens`` apart too).
Also: after N output tokens the KV cache holds prompt + N − 1 tokens, as the page explains."""

import pytest

from engine import SamplingParams
from engine.output.metrics import RequestMetrics, RequestTimes

PROMPT = ("You are a patient teacher of physics. Answer in two short sentences and never use "
          "jargon without explaining it first. " * 4) + "Why is the sky blue?"


def test_prefill_speed_counts_computed_tokens_only():
    times = RequestTimes(arrival=0.0, scheduled=0.5, token_times=[1.5, 2.0, 2.5], finished=2.6)
    m = RequestMetrics.from_times(times, prompt_tokens=640, cached_prompt_tokens=623)
    assert (m.cached_prompt_tokens, m.computed_prompt_tokens) == (623, 17)
    assert m.prefill_tokens_per_s == pytest.approx(17 / 1.0)
    plain = RequestMetrics.from_times(times, prompt_tokens=640)
    assert plain.computed_prompt_tokens == 640 and plain.prefill_tokens_per_s == pytest.approx(640)
    clamped = RequestMetrics.from_times(times, prompt_tokens=10, cached_prompt_tokens=99)
    assert clamped.cached_prompt_tokens == 10 and clamped.computed_prompt_tokens == 0


@pytest.mark.fast
def test_a_prefix_cache_hit_is_reported_apart(engine):
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    salt = "test-cached-prompt-metrics"
    first = engine.generate(PROMPT, params, cache_salt=salt)
    n = len(first.prompt_token_ids)
    assert n > 64 and first.metrics.cached_prompt_tokens == 0
    assert first.metrics.computed_prompt_tokens == n

    handle = engine.submit(PROMPT, params, cache_salt=salt)
    second = handle.result()
    m = second.metrics
    block = 16
    assert m.cached_prompt_tokens == (n - 1) // block * block  # every full block but the last token's
    assert m.computed_prompt_tokens == n - m.cached_prompt_tokens
    assert m.prefill_tokens_per_s == pytest.approx(m.computed_prompt_tokens / m.prefill_time_s)
    prefill = [e for e in handle.events if e.phase == "prefill"]
    assert prefill[-1].cached_tokens == m.cached_prompt_tokens
    assert all(e.cached_tokens == 0 for e in handle.events if e.phase == "decode")

    other = engine.generate(PROMPT, params, cache_salt=salt + "-other")  # another salt: no hit
    assert other.metrics.cached_prompt_tokens == 0


def test_cache_holds_prompt_plus_n_minus_one_tokens(engine):
    handle = engine.submit("Count to five.", SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    out = handle.result()
    p = len(out.prompt_token_ids)
    for n, ev in enumerate(handle.events, 1):  # after the n-th output token
        assert ev.kv_tokens == p + n - 1
