"""The one runner (:class:`engine.worker.model_runner.ModelRunner`): a step with packed and
no-cache sequences, its sampling path, its failures and what it tells the engine's views."""

import torch

from engine import SamplingParams
from engine.core.scheduler_output import ScheduledSeq, SchedulerOutput
from engine.core.sequence import Sequence
from engine.worker.backends.eager import EagerBackend
from engine.worker.input_builder import InputBuilder
from engine.worker.model_runner import ModelRunner
from engine.worker.runner_output import ModelRunnerOutput
from engine.worker.threads import StepThreads
from tests.support.paged import BLOCK_SIZE, PROMPTS, hf_greedy, make_pool, new_seq


def paged_runner(loaded):
    pool, threads = make_pool(loaded), StepThreads()
    backend = EagerBackend(loaded.model, InputBuilder(pool, BLOCK_SIZE, "cpu"), threads,
                           weight_stationary=False)
    return ModelRunner(loaded.model, backend=backend, inputs=backend.inputs, threads=threads)


def test_a_step_of_packed_and_no_cache_sequences_samples_hugging_faces_tokens(loaded):
    runner = paged_runner(loaded)
    want = [hf_greedy(loaded.model, p, 1)[0] for p in PROMPTS]
    a, b = new_seq("a", PROMPTS[0], 0), new_seq("b", PROMPTS[1], 8)
    r = Sequence("r", list(PROMPTS[1]), SamplingParams(temperature=0), use_kv_cache=False)
    out = runner.execute(SchedulerOutput(
        entries=[ScheduledSeq.of(a, a.num_tokens), ScheduledSeq.of(b, b.num_tokens)],
        recompute=[ScheduledSeq.of(r, r.num_tokens)]))
    assert out.errors == {}
    assert [out.sampled[k].token_id for k in "abr"] == [*want, want[1]]
    assert out.batch_size == 2 and out.spans["a"] == out.spans["b"] != out.spans["r"]
    assert out.kv_tokens == {"a": len(PROMPTS[0]), "b": len(PROMPTS[1]), "r": 0}
    assert out.kv_bytes["a"] == runner.pool.bytes_per_token * len(PROMPTS[0])


def test_without_a_pool_every_sequence_runs_alone_on_its_own_cache(loaded):
    runner = ModelRunner(loaded.model)
    s = Sequence("c", list(PROMPTS[0]), SamplingParams(temperature=0))
    want = hf_greedy(loaded.model, PROMPTS[0], 3)
    for _ in range(3):
        out = runner.execute(SchedulerOutput(entries=[ScheduledSeq.of(s, s.num_tokens -
                                                                      s.num_computed)]))
        s.num_computed = s.num_tokens
        s.output_ids.append(out.sampled["c"].token_id)
    assert s.output_ids == want
    assert out.kv_bytes["c"] == runner.kv_cache_bytes() > 0
    runner.release(["c"])
    assert runner.kv_cache_bytes() == 0


def test_one_rows_nan_fails_that_request_only(loaded):
    runner = ModelRunner(loaded.model)
    seqs = [Sequence(k, [1, 2], SamplingParams(temperature=0)) for k in "xy"]
    logits = torch.zeros(2, 8)
    logits[0, 3] = 1.0
    logits[1] = float("nan")
    out = ModelRunnerOutput(0.0, 0.0)
    runner.sample_rows(logits, [ScheduledSeq.of(s, 2) for s in seqs], out)
    assert out.sampled["x"].token_id == 3 and "x" not in out.errors
    assert "non-finite" in str(out.errors["y"])


def test_a_failing_packed_pass_is_rerun_per_sequence(loaded, monkeypatch):
    runner = paged_runner(loaded)
    real = runner.forward

    def forward(entries):
        if any(e.seq.seq_id == "bad" for e in entries):
            raise RuntimeError("injected")
        return real(entries)

    monkeypatch.setattr(runner, "forward", forward)
    ok, bad = new_seq("ok", PROMPTS[0], 0), new_seq("bad", PROMPTS[1], 8)
    out = runner.execute(SchedulerOutput(entries=[ScheduledSeq.of(ok, ok.num_tokens),
                                                  ScheduledSeq.of(bad, bad.num_tokens)]))
    assert "injected" in str(out.errors["bad"]) and "ok" in out.sampled


def test_info_names_the_backend_and_its_pool(loaded):
    assert ModelRunner(loaded.model).info().backend == "contiguous"
    runner = paged_runner(loaded)
    info = runner.info()
    assert info.backend == "eager" and info.pool is runner.pool and info.compile is None
    runner.few_rows = 3                               # the bench's knob: the one thread setting
    assert runner.backend.threads is runner.threads and runner.threads.few_rows == 3
