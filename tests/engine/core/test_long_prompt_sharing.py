"""A small request beside a heavy one on the embedded model (fp32, CPU): a 1,500-token prompt
prefilling, or an 800-word prompt decoded without a KV cache (the whole sequence recomputed
per token), no longer holds whole steps: the small request waits at most for the one step the
heavy request began alone (alone, a prompt is not capped: a whole budget of tokens), joins the
next step and finishes long before the heavy one, within 2 s on a quiet machine plus that one
step (it waited 8-24 s before); the bound grows with the load average, or with the small
request's own time alone, when other jobs load the CPU, and on a machine where one capped chunk
takes longer it is 1.5 times the small request's four steps, each beside one capped chunk (fp32
products on the 2-core AMD EPYC: about 2.9 s beside a 1,694-token prefill, before and after
prompts became graph rows)."""

import os
import time

import pytest

from engine import SamplingParams
from engine.config import prefill_chunk_cap

SMALL = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
SMALL_PROMPT = "Say hi."
BESIDE_S = 2.0  # the small request's bound beside a heavy one on a quiet machine
QUIET_ALONE_S = 0.35  # the small request alone on the quiet 2-core machine (0.26-0.33 s measured)


def bound_s(alone_s: float) -> float:
    """:data:`BESIDE_S`, scaled when other jobs load the machine: by the load average per CPU
    and by how much slower than on a quiet machine the small request ran alone (``alone_s``),
    whichever is larger (never below :data:`BESIDE_S`)."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return BESIDE_S * max(1.0, load, alone_s / QUIET_ALONE_S)


def alone_s(engine) -> float:
    """Seconds the small request takes alone now (the faster of two runs)."""
    runs = []
    for _ in range(2):
        t = time.perf_counter()
        engine.generate(SMALL_PROMPT, SMALL)
        runs.append(time.perf_counter() - t)
    return min(runs)


def chunk_s(engine, loaded) -> float:
    """Seconds a fresh prompt of one capped chunk takes alone, with one new token (the faster
    of two runs): what each of the small request's steps beside a long prefill also computes."""
    cap = engine.config.max_num_batched_tokens // 4
    runs = []
    for i in range(2):
        n = cap // 4
        prompt = words(n, f"c{time.time_ns()}x")
        while n > 1 and len(loaded.tokenizer(prompt)["input_ids"]) > cap - 32:   # template room
            n -= 1
            prompt = words(n, f"c{time.time_ns()}x")
        t = time.perf_counter()
        engine.generate(prompt, SamplingParams(temperature=0, max_tokens=1))
        runs.append(time.perf_counter() - t)
    return min(runs)


def bound_with_chunks(alone: float, chunk: float, budget_chunks: int) -> float:
    """:func:`bound_s`, or 1.5 × the small request's steps each beside one capped chunk when
    that is longer (a machine whose chunk steps are slower than the quiet 2-core one's), plus
    the heavy request's step under way when the small one arrives: alone, it took a whole
    budget, ``budget_chunks`` capped chunks' worth of tokens."""
    steps = SMALL.max_tokens
    return max(bound_s(alone), 1.5 * steps * (chunk + alone / steps)) + budget_chunks * chunk


def budget_chunks(engine) -> int:
    """Capped chunks in one step's budget: the tokens a lone prompt's step takes, in chunks."""
    cfg = engine.config
    return -(-cfg.max_num_batched_tokens // prefill_chunk_cap(cfg))


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def small_beside(engine, heavy) -> float:
    """Seconds the small request took while ``heavy`` ran. Checks that it finished first and
    that every step it was in also fed the heavy request at most one capped chunk."""
    end = time.monotonic() + 60
    while engine.stats().running < 1 and time.monotonic() < end:
        time.sleep(0.01)  # the heavy request's first step is under way
    time.sleep(0.1)
    t = time.perf_counter()
    small = engine.submit(SMALL_PROMPT, SMALL)
    out = small.result(120)
    took = time.perf_counter() - t
    assert len(out.token_ids) == 4
    assert not heavy.finished, "the heavy request ended first: the small one waited for it"
    cap = engine.config.max_num_batched_tokens // 4
    shared = [dict(zip(e.batch.request_ids, e.batch.new_tokens)).get(heavy.request_id)
              for e in small.events]
    assert any(shared), "the heavy request ran in none of the small one's steps"
    steps = [e.batch.step_id for e in small.events]
    assert steps == list(range(steps[0], steps[0] + 4)), steps  # a token every step
    assert all(n <= cap for n in shared if n), (shared, cap)
    return took


@pytest.mark.slow
def test_a_small_request_beside_a_long_prefill(engine, loaded):
    alone, chunk = alone_s(engine), chunk_s(engine, loaded)
    prompt = "Summarize: " + words(450, "x")
    n = len(loaded.tokenizer(prompt)["input_ids"])
    assert 1400 <= n <= 2000, n
    heavy = engine.submit(prompt, SamplingParams(temperature=0, max_tokens=1))
    try:
        took = small_beside(engine, heavy)
    finally:
        heavy.result(300)
    assert took < bound_with_chunks(alone, chunk, budget_chunks(engine)), \
        f"the small request took {took:.2f} s beside a {n}-token prefill (a chunk alone: {chunk:.2f} s)"


@pytest.mark.slow
def test_a_small_request_beside_a_no_cache_request(engine, loaded):
    alone = alone_s(engine)
    prompt = "Summarize: " + words(800, "w")
    # one step of the heavy request alone: its prompt's first token without a cache, over the
    # capped pieces it is recomputed in
    cap = engine.config.max_num_batched_tokens // 4
    pieces = -(-len(loaded.tokenizer(prompt)["input_ids"]) // cap)
    t = time.perf_counter()
    engine.generate(prompt, SamplingParams(temperature=0, max_tokens=1), use_kv_cache=False)
    chunk = (time.perf_counter() - t) / pieces
    heavy = engine.submit(prompt, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
                          use_kv_cache=False)
    try:
        took = small_beside(engine, heavy)
    finally:
        heavy.abort()
    assert took < bound_with_chunks(alone, chunk, budget_chunks(engine)), \
        f"the small request took {took:.2f} s beside an 800-word no-cache request (a piece alone: {chunk:.2f} s)"


def test_a_chunked_prefill_reports_every_chunk_in_its_one_prefill_event(engine):
    """A prompt longer than a step's budget prefills over several steps (alone, in chunks of
    the whole budget) but yields one prefill event: it counts every computed prompt token (none
    from the prefix cache: a fresh prompt) and spans from the first chunk's start (the page once
    showed the last chunk as 'computed' and the rest as 'from prefix cache')."""
    cap = engine.config.max_num_batched_tokens // 4
    prompt = words(cap, f"fresh{time.time_ns()}x")  # several tokens a word: > the budget
    n_prompt = len(engine.tokenizer(prompt)["input_ids"])  # the chat template adds a few
    assert n_prompt > engine.config.max_num_batched_tokens
    h = engine.submit(prompt, SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    h.result(120)
    prefill = [e for e in h.events if e.phase == "prefill"]
    assert len(prefill) == 1
    first = prefill[0]
    # every computed token counted; only the chat template's first block may come from the cache
    assert first.num_tokens + first.cached_tokens == first.kv_tokens >= n_prompt
    assert first.cached_tokens <= 32 and first.num_tokens > 2 * cap
    # one step per chunk (alone in the engine: the budget at its start, less further in)
    at, steps = first.cached_tokens + min(first.num_tokens, engine.config.max_num_batched_tokens), 1
    while at < first.kv_tokens:
        at, steps = at + engine.scheduler.lone_chunk_tokens(at), steps + 1
    assert first.num_steps == steps >= 2
    chunk_steps = [e for e in h.events if e.phase == "decode"]
    assert first.end_s - first.start_s > 0 and all(e.num_tokens == 1 for e in chunk_steps)
