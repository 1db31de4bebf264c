"""Continuous batching on the embedded model: batched tokens equal solo tokens (fp32, CPU)."""

import threading
import time

import pytest

from engine import SamplingParams
from engine.engine import LLMEngine
from tests.support.parity import assert_same_or_tie

GREEDY = SamplingParams(temperature=0, max_tokens=32)
TOPICS = ["the ocean", "volcanoes", "GPUs", "bread", "chess", "rivers", "owls", "comets"]


def prompts():
    # different lengths: 0..7 repetitions of a clause
    return [f"Tell me one fact about {t}." + " Please be precise and brief." * i
            for i, t in enumerate(TOPICS)]


@pytest.fixture(scope="module")
def solo(engine):
    return [engine.generate(p, GREEDY) for p in prompts()]


def test_eight_staggered_requests_match_solo_runs(engine, loaded, solo):
    handles = []
    for p in prompts():
        handles.append(engine.submit(p, GREEDY))
        time.sleep(0.05)  # arrive at different times, while others decode
    outs = [h.result(300) for h in handles]
    sizes = [e.batch_size for h in handles for e in h.events]
    assert max(sizes) >= 4  # requests really shared decode steps
    shared = [e.batch.request_ids for h in handles for e in h.events if e.batch_size > 1]
    assert shared and all(len(set(ids)) == len(ids) for ids in shared)
    for p, a, b in zip(prompts(), solo, outs):
        assert b.finish_reason in ("stop", "length")
        assert_same_or_tie(loaded, p, a.token_ids, b.token_ids)
        assert b.text == engine.tokenizer.decode(b.token_ids, skip_special_tokens=True)


def test_prefix_cache_hits_give_the_same_tokens(loaded):
    system = "You are a patient teacher of computer architecture. " * 6
    chats = [[{"role": "system", "content": system}, {"role": "user", "content": q}]
             for q in ("What is a cache line?", "What is a TLB?", "What is DRAM?")]
    plain = LLMEngine(loaded, telemetry=False, enable_prefix_caching=False,
                      kv_cache_bytes=64 * 2**20)
    cached = LLMEngine(loaded, telemetry=False, kv_cache_bytes=64 * 2**20)
    try:
        want = [plain.generate(c, GREEDY).token_ids for c in chats]
        got = [cached.generate(c, GREEDY) for c in chats]
        stats = cached.stats()
        assert plain.stats().prefix_hit_rate == 0
        assert stats.prefix_hit_rate > 0.3
        # the second and third requests skipped the shared system prompt's full blocks
        n_prompt = len(got[1].prompt_token_ids)
        assert cached_tokens(got[1]) >= 64 and cached_tokens(got[1]) < n_prompt
        for c, w, g in zip(chats, want, got):
            assert_same_or_tie(loaded, c, w, g.token_ids)
    finally:
        plain.shutdown()
        cached.shutdown()


def cached_tokens(out):
    return out.metrics.prompt_tokens - out._prefill_tokens


@pytest.fixture(autouse=True)
def _record_prefill_tokens(monkeypatch):
    """Let tests read how many prompt tokens a request's prefill actually computed."""
    from engine.output import handle as handle_mod

    real = handle_mod.RequestHandle._finish

    def _finish(self, output):
        output._prefill_tokens = sum(e.num_tokens for e in self.events if e.phase == "prefill")
        real(self, output)

    monkeypatch.setattr(handle_mod.RequestHandle, "_finish", _finish)


def test_preemption_when_blocks_run_out(loaded, solo):
    # 12 blocks of 16 tokens: four requests of ~40-90 tokens each cannot all fit at once
    eng = LLMEngine(loaded, telemetry=False, kv_cache_bytes=12 * 16 * 46_080)
    try:
        ps = prompts()[:4]
        hs = [eng.submit(p, GREEDY) for p in ps]
        outs = [h.result(300) for h in hs]
        st = eng.stats()
        assert st.preemptions >= 1
        assert st.blocks_used == 0 and st.blocks_free == 12
        for p, want, got in zip(ps, solo[:4], outs):
            assert got.finish_reason in ("stop", "length")
            assert_same_or_tie(loaded, p, want.token_ids, got.token_ids)
    finally:
        eng.shutdown()


def test_chunked_prefill_matches(loaded, engine):
    long_prompt = "Summarise: " + "The scheduler packs tokens into steps. " * 40
    want = engine.generate(long_prompt, GREEDY)
    eng = LLMEngine(loaded, telemetry=False, max_num_batched_tokens=64,
                    kv_cache_bytes=64 * 2**20, enable_prefix_caching=False)
    try:
        h = eng.submit(long_prompt, GREEDY)
        out = h.result(300)
        # the prompt went through in chunks of at most 64 tokens: its first token came late
        assert len(out.prompt_token_ids) > 64
        # the prefill event counts every chunk's tokens (the chunks themselves: in the steps)
        assert h.events[0].num_tokens + h.events[0].cached_tokens == h.events[0].kv_tokens
        assert_same_or_tie(loaded, long_prompt, want.token_ids, out.token_ids)
    finally:
        eng.shutdown()


def test_reserved_but_unused_kv_is_under_one_block_per_sequence(engine):
    p = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    hs = [engine.submit(f"Count slowly to {i}.", p) for i in range(6)]
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            snap = engine.block_snapshot()
            for t in snap.tables:
                seen.append(len(t.blocks) * snap.block_size - t.tokens)
            time.sleep(0.01)

    w = threading.Thread(target=watch)
    w.start()
    for h in hs:
        h.result(300)
    stop.set()
    w.join()
    assert seen and max(seen) < 16  # blocks are taken on demand, one at a time
    assert engine.stats().blocks_used == 0


def test_architecture_without_paged_support_runs_one_at_a_time(loaded, monkeypatch):
    monkeypatch.setattr(loaded.model.config, "model_type", "gpt2")
    eng = LLMEngine(loaded, telemetry=False)
    try:
        assert not eng.paged and "one request at" in eng.stats().batching_note
        a = eng.submit("one", SamplingParams(temperature=0, max_tokens=6))
        b = eng.submit("two", SamplingParams(temperature=0, max_tokens=6))
        assert a.result(60).finish_reason in ("stop", "length")
        assert b.result(60).finish_reason in ("stop", "length")
        assert max(e.batch_size for e in a.events + b.events) == 1
    finally:
        eng.shutdown()
