"""Engine behaviour around a request's life: stopping, refusing, aborting, failing, releasing."""

import dataclasses
import threading
import time

import pytest
import torch

from engine import SamplingParams
from engine.engine import LLMEngine
from engine.core.scheduler import QueueFullError

GREEDY = SamplingParams(temperature=0, max_tokens=24)


def wait_idle(engine, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        s = engine.stats()
        if s.running == 0 and s.waiting == 0:
            return s
        time.sleep(0.02)
    raise AssertionError(f"engine still busy: {engine.stats()}")


@pytest.mark.fast
def test_stream_events_and_metrics(engine):
    h = engine.submit("Name three colours.", SamplingParams(temperature=0, max_tokens=12))
    events = list(h)
    out = h.output
    assert events[0].phase == "prefill"
    # prefill computes the prompt except full 16-token blocks found in the prefix cache
    cached = len(out.prompt_token_ids) - events[0].num_tokens
    assert cached >= 0 and cached % 16 == 0
    assert all(e.phase == "decode" and e.num_tokens == 1 for e in events[1:])
    assert [e.token_id for e in events] == out.token_ids
    assert "".join(e.text_delta for e in events) == out.text
    assert out.text == engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    # KV cache grows by one token per decode step; bytes follow 2*L*kv_heads*head_dim*4 per token
    per_token = 2 * 30 * 3 * 64 * 4
    for e in events:
        assert e.kv_tokens == len(out.prompt_token_ids) + e.step
        assert e.kv_bytes == per_token * e.kv_tokens
    assert len(events[0].top_candidates) == 5
    assert events[0].top_candidates[0].prob >= events[0].top_candidates[-1].prob
    m = out.metrics
    assert m.output_tokens == len(out.token_ids) and m.prompt_tokens == len(out.prompt_token_ids)
    assert len(m.itl_s) == m.output_tokens - 1
    assert m.ttft_s >= m.prefill_time_s > 0 and m.e2e_s >= m.ttft_s
    assert m.tpot_s == pytest.approx(m.decode_time_s / (m.output_tokens - 1))
    assert out.kv_cache_bytes == per_token * (m.prompt_tokens + m.output_tokens - 1)


def test_same_prompt_same_output_before_and_after_other_requests(engine):
    first = engine.generate("Tell me about cats.", GREEDY)
    engine.generate("写一首诗", SamplingParams(temperature=1.0, seed=3, max_tokens=20))
    engine.generate("Count to five.", GREEDY, use_kv_cache=False)
    again = engine.generate("Tell me about cats.", GREEDY)
    assert first.token_ids == again.token_ids


def test_seeded_sampling_reproducible_and_seed_matters(engine):
    p = SamplingParams(temperature=1.0, top_p=0.95, seed=1234, max_tokens=20)
    a = engine.generate("Write a haiku about GPUs.", p)
    b = engine.generate("Write a haiku about GPUs.", p)
    c = engine.generate("Write a haiku about GPUs.",
                        SamplingParams(temperature=1.0, top_p=0.95, seed=99, max_tokens=20))
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


def test_stop_string_is_cut_and_not_streamed(engine):
    base = engine.generate("Count from 1 to 10, separated by commas.", GREEDY)
    assert "," in base.text
    stop = base.text[base.text.index(","):base.text.index(",") + 2]
    out = engine.generate("Count from 1 to 10, separated by commas.",
                          SamplingParams(temperature=0, max_tokens=24, stop=[stop]))
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert stop not in out.text and out.text == base.text[:base.text.index(stop)]
    assert "".join(out.deltas) == out.text


def test_stop_token_ids_and_eos(engine, loaded):
    base = engine.generate("Count from 1 to 10.", GREEDY)
    third = base.token_ids[2]
    out = engine.generate("Count from 1 to 10.",
                          SamplingParams(temperature=0, max_tokens=24, stop_token_ids=[third]))
    assert out.finish_reason == "stop" and out.stop_reason == third and out.token_ids[-1] == third
    assert 2 in loaded.eos_token_ids  # <|im_end|>, the chat template's end of turn
    short = engine.generate("Reply with one word: yes or no. Is fire hot?",
                            SamplingParams(temperature=0, max_tokens=64))
    assert short.finish_reason == "stop" and short.token_ids[-1] in loaded.eos_token_ids
    assert "<|im_end|>" not in short.text


def test_eos_list_from_generation_config(loaded):
    from engine.model.special_tokens import eos_token_ids

    class Gen:
        eos_token_id = [2, 0]

    class Cfg:
        eos_token_id = None

    assert {0, 2} <= eos_token_ids(loaded.tokenizer, Gen(), Cfg())


@pytest.mark.fast
def test_max_tokens_gives_length(engine):
    out = engine.generate("Write a long story about a dragon.",
                          SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))
    assert out.finish_reason == "length" and len(out.token_ids) == 5


@pytest.mark.fast
def test_context_limit_refused_before_prefill(engine):
    ctx = engine.info.context_len
    long_text = "word " * (ctx + 50)
    with pytest.raises(ValueError) as err:
        engine.submit(long_text, SamplingParams(max_tokens=8), raw=True)
    msg = str(err.value)
    assert str(ctx) in msg and "8" in msg
    with pytest.raises(ValueError, match="prompt is empty"):
        engine.submit("   ", GREEDY)
    assert engine.stats().waiting == 0


def test_generation_reaching_context_limit_ends_with_length(loaded):
    eng = LLMEngine(loaded, telemetry=False)
    eng.info, saved = dataclasses.replace(eng.info, context_len=40), eng.info
    try:
        h = eng.submit("Tell me a long story.", SamplingParams(temperature=0, max_tokens=None,
                                                                 ignore_eos=True))
        out = h.result(60)
        assert out.finish_reason == "length"
        assert len(out.prompt_token_ids) + len(out.token_ids) == 40
    finally:
        eng.info = saved
        eng.shutdown()


def test_abort_mid_decode_frees_cache(engine):
    h = engine.submit("Write a very long essay about memory bandwidth.",
                      SamplingParams(temperature=0, max_tokens=400, ignore_eos=True))
    seen = 0
    for ev in h:
        seen += 1
        if seen == 5:
            assert engine.abort(h.request_id)
    out = h.output
    assert out.finish_reason == "abort"
    assert seen <= 7  # stops within one or two decode steps of the abort
    assert out.kv_cache_bytes > 0  # it had a cache, now released
    assert wait_idle(engine).kv_bytes_live == 0
    assert engine.abort(h.request_id) is False


def test_closing_handle_aborts(engine):
    h = engine.submit("Write a very long essay about caches.",
                      SamplingParams(temperature=0, max_tokens=400, ignore_eos=True))
    it = iter(h)
    next(it)
    h.close()
    assert h.result(30).finish_reason == "abort"


@pytest.mark.fast
def test_abort_while_waiting(loaded):
    eng = LLMEngine(loaded, telemetry=False, max_num_seqs=1, kv_cache_bytes=32 * 2**20)
    try:
        long = eng.submit("Write a long essay.", SamplingParams(max_tokens=200, ignore_eos=True))
        queued = eng.submit("Hello", GREEDY)
        assert queued.queue_position() >= 1
        assert eng.abort(queued.request_id)
        out = queued.result(30)
        assert out.finish_reason == "abort" and out.token_ids == []
        long.close()
        long.result(30)
    finally:
        eng.shutdown()


def inject(monkeypatch, engine, request_id, make_bad):
    """Wrap the runner's forward pass so steps holding ``request_id`` go wrong
    (``make_bad(logits, row)``)."""
    runner = engine.runner
    real = runner.forward

    def forward(entries):
        logits = real(entries)
        sampled = [e for e in entries if e.samples]
        for row, e in enumerate(sampled):
            if e.seq.request_id == request_id and e.seq.output_ids:
                logits = make_bad(logits, row)
        return logits

    monkeypatch.setattr(runner, "forward", forward)


def test_injected_exception_fails_one_request_others_in_batch_unharmed(engine, monkeypatch):
    expected = engine.generate("Second request.", GREEDY)

    def boom(logits, row):
        raise RuntimeError("injected failure")

    inject(monkeypatch, engine, "bad-1", boom)
    bad = engine.submit("First request.", SamplingParams(temperature=0, max_tokens=30,
                                                         ignore_eos=True), request_id="bad-1")
    other = engine.submit("Second request.", GREEDY)
    out_bad = bad.result(60)
    assert out_bad.finish_reason == "error" and "injected failure" in out_bad.error
    out_ok = other.result(60)
    assert out_ok.finish_reason in ("stop", "length")
    assert out_ok.token_ids == expected.token_ids
    assert wait_idle(engine).kv_bytes_live == 0
    assert engine.stats().blocks_used == 0


def test_nan_logits_error_and_engine_keeps_serving(engine, monkeypatch):
    def nan(logits, row):
        logits = logits.clone()
        logits[row] = float("nan")
        return logits

    inject(monkeypatch, engine, "nan-1", nan)
    other = engine.submit("hello", GREEDY)
    out = engine.generate("hello", GREEDY, request_id="nan-1")
    assert out.finish_reason == "error" and "non-finite" in out.error
    assert other.result(60).finish_reason in ("stop", "length")
    assert engine.generate("hello", GREEDY).finish_reason in ("stop", "length")


def test_one_at_a_time_mode_failures(loaded, monkeypatch):
    """The fallback path (own contiguous cache per request) isolates failures too."""
    eng = LLMEngine(loaded, telemetry=False, batching=False)
    try:
        real = eng.runner.alone.decode
        calls = {"n": 0}

        def flaky(token_id, cache):
            calls["n"] += 1
            if calls["n"] == 3:
                raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
            return real(token_id, cache)

        monkeypatch.setattr(eng.runner.alone, "decode", flaky)
        bad = eng.submit("First.", SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))
        queued = eng.submit("Second.", GREEDY)
        out_bad = bad.result(60)
        assert out_bad.finish_reason == "error" and "out of memory" in out_bad.error
        assert queued.result(60).finish_reason in ("stop", "length")
        assert wait_idle(eng).kv_bytes_live == 0
        assert not eng.stats().batching
    finally:
        eng.shutdown()


def test_queue_full_gives_clear_error(loaded):
    eng = LLMEngine(loaded, max_queue=1, telemetry=False, max_num_seqs=1,
                    kv_cache_bytes=32 * 2**20)
    try:
        a = eng.submit("a long one", SamplingParams(max_tokens=200, ignore_eos=True))
        deadline = time.time() + 10
        while eng.stats().running == 0 and time.time() < deadline:
            time.sleep(0.01)
        b = eng.submit("waits", GREEDY)
        with pytest.raises(QueueFullError, match="queue is full"):
            eng.submit("refused", GREEDY)
        a.close()
        b.close()
    finally:
        eng.shutdown()


def test_submit_is_thread_safe_and_fifo(engine):
    handles, lock = [], threading.Lock()

    def go(i):
        h = engine.submit(f"Say the number {i}.", SamplingParams(temperature=0, max_tokens=4))
        with lock:
            handles.append(h)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outs = [h.result(120) for h in handles]
    assert all(o.finish_reason in ("stop", "length") for o in outs)
    assert len({o.request_id for o in outs}) == 6


def test_requests_run_first_come_first_served(loaded):
    # one running sequence at a time, so later arrivals visibly wait for earlier ones
    eng = LLMEngine(loaded, telemetry=False, max_num_seqs=1, kv_cache_bytes=32 * 2**20)
    try:
        handles = [eng.submit(f"Say {i}.", SamplingParams(temperature=0, max_tokens=3))
                   for i in range(4)]
        for h in handles:
            h.result(60)
        starts = [h.events[0].start_s for h in handles]
        assert starts == sorted(starts)
        waits = [h.output.metrics.queue_time_s for h in handles]
        assert waits == sorted(waits) and waits[-1] > waits[0]
    finally:
        eng.shutdown()


def test_out_of_memory_frees_cache(engine, monkeypatch):
    def oom(logits, row):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    inject(monkeypatch, engine, "oom-1", oom)
    out = engine.generate("hello there", SamplingParams(temperature=0, max_tokens=10),
                          request_id="oom-1")
    assert out.finish_reason == "error" and "out of memory" in out.error
    s = wait_idle(engine)
    assert s.kv_bytes_live == 0 and s.blocks_used == 0


def test_pool_is_one_figure_before_and_after_a_request(engine):
    """The pool as allocated (blocks x block bytes) is what the memory breakdown and the KV card
    show, the same before the first request and after one: not the 512 MiB budget it came from."""
    from app.render.cards import kv_formula_html

    pool = engine.pool
    as_allocated = pool.num_blocks * pool.block_bytes
    assert engine.pool_bytes == as_allocated == pool.nbytes
    assert as_allocated <= 512 * 2**20 < as_allocated + pool.block_bytes  # the budget, whole blocks

    def kv_part(memory):
        return next(p.bytes for p in memory.parts if p.name == "kv_cache")

    before = kv_part(engine.memory_snapshot())
    card_before = kv_formula_html(engine.info, pool_bytes=engine.pool_bytes)
    out = engine.submit("Say hello.", SamplingParams(temperature=0, max_tokens=4)).result(timeout=300)
    assert before == kv_part(out.memory) == kv_part(engine.memory_snapshot()) == as_allocated
    assert kv_formula_html(engine.info, pool_bytes=engine.pool_bytes) == card_before
