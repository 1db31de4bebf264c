"""Parallel samples on the embedded model: one prefill, forks that share blocks, each sample its
own seed stream; copy-on-write never corrupts a sibling; abort, preemption and the CLI."""

import json

import pytest

from engine import LLMEngine, SamplingParams
from engine.model.prompt import encode_prompt
from engine.params import sample_seed

from tests.support.cli import run

PROMPT = "Tell me a short story about a cat."


def test_each_seeded_sample_equals_its_one_sequence_run(engine, loaded):
    ids = encode_prompt(loaded.tokenizer, PROMPT)
    assert len(ids) % engine.block_manager.block_size != 0  # the fork lands mid-block
    params = dict(temperature=0.9, top_p=0.95, max_tokens=24, seed=1234)
    # a fresh salt: blocks an earlier test cached for this prompt must not shorten the prefill
    h = engine.submit(PROMPT, SamplingParams(n=3, **params), cache_salt=f"fork-test-{id(params)}")
    events = list(h)
    out = h.result()
    assert [o.index for o in out.outputs] == [0, 1, 2]
    # the prompt was computed once: one prefill event per sample, all from the same step
    firsts = [e for e in events if e.step == 0]
    assert sorted(e.index for e in firsts) == [0, 1, 2]
    assert len({e.batch.step_id for e in firsts}) == 1
    assert firsts[0].batch.prefill_tokens == len(ids)
    # forks share the full prompt blocks; each has its own copy of the last, partial one
    full = len(ids) // engine.block_manager.block_size
    tables = {e.index: e.block_table for e in events if e.step == 3}
    assert len({tuple(t[:full]) for t in tables.values()}) == 1
    assert len({t[full] for t in tables.values()}) == 3
    for o in out.outputs:
        solo = engine.generate(PROMPT, SamplingParams(
            **{**params, "seed": sample_seed(1234, o.index)}))
        assert o.token_ids == solo.token_ids, f"sample {o.index} differs from its solo run"
        assert o.text == solo.text
        assert o.cumulative_logprob == pytest.approx(solo.outputs[0].cumulative_logprob, abs=1e-3)
        deltas = "".join(e.text_delta for e in events if e.index == o.index)
        assert deltas == o.text
    assert out.text == out.outputs[0].text and out.token_ids == out.outputs[0].token_ids
    assert len({tuple(o.token_ids) for o in out.outputs}) == 3
    assert engine.stats().blocks_used == 0


def test_best_of_keeps_the_n_most_likely(engine):
    params = dict(temperature=1.0, max_tokens=12, seed=99)
    every = engine.generate(PROMPT, SamplingParams(n=4, **params)).outputs
    best = engine.generate(PROMPT, SamplingParams(n=2, best_of=4, **params)).outputs
    ranked = sorted(every, key=lambda o: -o.cumulative_logprob)[:2]
    assert sorted(o.index for o in best) == sorted(o.index for o in ranked)
    assert [o.token_ids for o in best] == [o.token_ids for o in sorted(ranked, key=lambda o: o.index)]


def test_abort_and_preemption_return_every_block(loaded):
    # a pool of 24 blocks of 16 tokens: three requests of four samples cannot all grow at once
    eng = LLMEngine(loaded, telemetry=False, kv_cache_bytes=24 * 16 * 46_080)
    try:
        hs = [eng.submit(f"{PROMPT} Number {i}.", SamplingParams(n=4, temperature=1.0,
                                                                  max_tokens=40, seed=i))
              for i in range(3)]
        aborted = eng.submit(PROMPT, SamplingParams(n=3, temperature=1.0, max_tokens=60))
        next(iter(aborted))
        assert aborted.abort()
        outs = [h.result(600) for h in hs]
        assert aborted.result(60).finish_reason == "abort"
        assert all(len(o.outputs) == 4 for o in outs)
        assert all(o.finish_reason in ("stop", "length") for o in outs)
        st = eng.stats()
        assert st.preemptions >= 1
        assert st.blocks_used == 0 and st.blocks_free == 24
        assert sum(b.ref_count for b in eng.block_manager.blocks) == 0
        # after preemption each sample still equals its one-sequence run
        want = eng.generate(f"{PROMPT} Number 1.", SamplingParams(
            temperature=1.0, max_tokens=40, seed=sample_seed(1, 2))).token_ids
        assert outs[1].outputs[2].token_ids == want
    finally:
        eng.shutdown()


@pytest.mark.fast
def test_groups_are_refused_where_they_cannot_run(loaded, engine):
    with pytest.raises(ValueError, match="do not fit the KV cache pool"):
        engine.submit(PROMPT, SamplingParams(n=16, temperature=1.0, max_tokens=8000))
    eng = LLMEngine(loaded, telemetry=False, batching=False)
    try:
        with pytest.raises(ValueError, match="need the paged KV cache"):
            eng.submit(PROMPT, SamplingParams(temperature=0, num_beams=2))
    finally:
        eng.shutdown()
    with pytest.raises(ValueError, match="need the paged KV cache"):
        engine.submit(PROMPT, SamplingParams(n=2, temperature=1.0), use_kv_cache=False)


@pytest.mark.slow
def test_cli_beams_and_samples_json():
    r = run("generate", "--prompt", "Explain the KV cache in one sentence.", "--beams", "4",
            "--n", "2", "--max-tokens", "12", "--weights", "fp32", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["outputs"]) == 2
    assert out["text"] == out["outputs"][0]["text"]
    assert out["token_ids"] == out["outputs"][0]["token_ids"]
    for o in out["outputs"]:
        assert set(o) >= {"text", "token_ids", "cumulative_logprob", "finish_reason", "score"}
    assert out["outputs"][0]["score"] >= out["outputs"][1]["score"]
    beams = [s for s in out["steps"] if s["kv_tokens_logical"] is not None]
    assert beams and any(s["kv_tokens_physical"] < s["kv_tokens_logical"] for s in beams)
    r = run("generate", "--prompt", "Name a colour.", "--n", "3", "--temperature", "1.0",
            "--seed", "5", "--max-tokens", "8", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [o["index"] for o in out["outputs"]] == [0, 1, 2]
    assert out["text"] == out["outputs"][0]["text"]
    bad = run("generate", "--prompt", "x", "--n", "0")
    assert bad.returncode == 2 and "n must be in [1, 16]" in bad.stderr
    bad = run("generate", "--prompt", "x", "--n", "3", "--best-of", "2")
    assert bad.returncode == 2 and "best_of must be in" in bad.stderr


def test_parallel_samples_case_of_the_batch_experiment(engine):
    from engine.experiments.parallel_samples import compare

    res = compare(engine, groups=2, n=4, new_tokens=6, repeats=1)
    g, x = res["grouped"], res["independent"]
    assert res["groups"] == 2 and res["n"] == 4 and len(res["ratio_runs"]) == 1
    # the groups prefill each prompt once; independent requests prefill it up to 4 times (less
    # what the prefix cache serves to those arriving after the first computed its full blocks)
    assert g["prefill_tokens"] < x["prefill_tokens"] <= 4 * g["prefill_tokens"]
    assert g["peak_blocks_used"] < x["peak_blocks_used"]
    assert res["blocks_ratio"] == g["peak_blocks_used"] / x["peak_blocks_used"]
    assert res["throughput_ratio"] == g["throughput_tokens_per_s"] / x["throughput_tokens_per_s"]
    assert engine.stats().blocks_used == 0


def test_a_stop_string_ends_each_sample_on_its_own(engine):
    h = engine.submit(PROMPT, SamplingParams(n=3, temperature=1.0, max_tokens=40, seed=11,
                                             stop=[" the "]))
    events = list(h)
    out = h.result()
    assert len(out.outputs) == 3
    for o in out.outputs:
        assert " the " not in o.text
        assert "".join(e.text_delta for e in events if e.index == o.index) == o.text
        ended = [e for e in events if e.index == o.index and e.finish_reason is not None]
        assert len(ended) == 1 and ended[0].finish_reason == o.finish_reason
    assert any(o.finish_reason == "stop" for o in out.outputs)
    assert out.deltas and "".join(out.deltas) == out.text
    assert engine.stats().blocks_used == 0
