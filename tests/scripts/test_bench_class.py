"""``scripts/bench_class.py``'s step recorder sees the steps the engine's loop runs: its busy
fraction and mean batch (docs/performance.md, "A class of 30 pages") read 0 when the loop called
the step it was built with instead of the engine's current ``step``."""

from engine import LLMEngine, SamplingParams


def test_the_class_benchs_recorder_sees_every_step_and_request(loaded):
    from scripts.bench_class import _Recorder

    engine = LLMEngine(loaded, telemetry=False)
    try:
        recorder = _Recorder(engine)
        out = engine.generate("Count: 1, 2, 3,", SamplingParams(temperature=0, max_tokens=5))
        got = recorder.take()
    finally:
        engine.shutdown()
    assert out.metrics.output_tokens == 5
    # one prefill step and four decode steps, each with its one sequence
    assert len(got["steps"]) == 5 and all(s[2] == 1 and s[0] < s[1] for s in got["steps"]), got["steps"]
    assert sum(s[3] for s in got["steps"]) == 4 and got["steps"][0][4] > 0
    assert [r["tokens"] for r in got["requests"]] == [5]
