"""The engine's step with a fake runner (no forward pass): events, text and metrics of one
request follow from the runner's results alone."""

import threading

import pytest

from engine import FinishReason, LLMEngine, SamplingParams
from tests.support.runners import ScriptedRunner


@pytest.fixture
def fake(loaded):
    tok = loaded.tokenizer
    script = tok.encode(" Hello world, again and again.", add_special_tokens=False)
    script = script + [tok.convert_tokens_to_ids("<|im_end|>")]
    runner = ScriptedRunner(script)
    eng = LLMEngine(loaded, runner=runner, telemetry=False)
    yield eng, runner, script
    eng.shutdown()


@pytest.mark.fast
def test_one_request_events_and_metrics_with_a_fake_runner(fake, loaded):
    eng, runner, script = fake
    handle = eng.submit("Say hello.", SamplingParams(temperature=0, max_tokens=50))
    events = list(handle)
    out = handle.result(10)
    n_prompt = len(out.prompt_token_ids)

    assert out.token_ids == script and out.finish_reason is FinishReason.STOP
    assert out.stop_reason == script[-1]
    assert out.text == loaded.tokenizer.decode(script, skip_special_tokens=True)
    assert "".join(e.text_delta for e in events) == out.text == "".join(out.deltas)
    # one event per token: the first from prefill, then decode steps of one token each
    assert [e.phase for e in events] == ["prefill"] + ["decode"] * (len(script) - 1)
    assert [e.step for e in events] == list(range(len(script)))
    assert events[0].num_tokens == n_prompt and all(e.num_tokens == 1 for e in events[1:])
    assert [e.kv_tokens for e in events] == [n_prompt + i for i in range(len(script))]
    assert events[-1].kv_bytes == out.kv_cache_bytes == (n_prompt + len(script) - 1) * 1000
    assert events[-1].finish_reason is FinishReason.STOP
    assert all(e.finish_reason is None for e in events[:-1])
    assert events[0].top_candidates[0].prob == 0.5
    # every metric comes from the token times, which are the runner's step ends
    m = out.metrics
    ends = [e.end_s for e in events]
    assert m.output_tokens == len(script) and m.prompt_tokens == n_prompt
    assert m.itl_s == pytest.approx([b - a for a, b in zip(ends, ends[1:])])
    assert m.decode_time_s == pytest.approx(ends[-1] - ends[0])
    assert m.tpot_s == pytest.approx(m.decode_time_s / (len(script) - 1))
    assert m.ttft_s == pytest.approx(m.queue_time_s + m.prefill_time_s)
    assert m.e2e_s >= m.ttft_s + m.decode_time_s
    assert m.prefill_tokens_per_s == pytest.approx(n_prompt / m.prefill_time_s)
    # the runner was told to drop the finished request's state; the pool is empty again
    assert runner.released == [out.request_id]
    assert eng.stats().blocks_used == 0 and eng.stats().finished == 1


def test_stop_string_ends_the_request_and_frees_its_blocks(fake):
    eng, runner, script = fake
    out = eng.generate("Say hello.", SamplingParams(temperature=0, max_tokens=50, stop=["world"]))
    assert out.finish_reason is FinishReason.STOP and out.stop_reason == "world"
    assert out.text == " Hello "
    assert eng.stats().blocks_used == 0 and eng.stats().running == 0


def test_batched_requests_share_steps(fake):
    eng, runner, script = fake
    handles = [eng.submit(f"Request {i}.", SamplingParams(temperature=0, max_tokens=4))
               for i in range(3)]
    outs = [h.result(10) for h in handles]
    assert all(o.token_ids == script[:4] and o.finish_reason == "length" for o in outs)
    assert max(len(s) for s in runner.steps) == 3  # the three decoded side by side


def test_engine_call_runs_on_the_engine_thread(fake):
    eng, _, _ = fake
    seen = eng.call(lambda runner: (threading.current_thread().name, runner)).result(10)
    assert seen[0] == "llm-engine" and seen[1] is eng.runner
