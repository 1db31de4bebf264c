"""The compiled backend (:mod:`engine.worker.compiled.compiled_backend`) with ``compile=False``
(the compact Llama forward run eagerly on its static buffers, fp32): Hugging Face's greedy
tokens, its bucket choice, and mixed steps split between the graph and the eager backend.
The real ``torch.compile`` path and int4 batch invariance: test_compiled_decode.py."""

import pytest
import torch

from engine.core.scheduler_output import ScheduledSeq
from engine.worker.backends.eager import EagerBackend
from engine.worker.compiled import compiled_backend
from engine.worker.compiled.compiled_backend import CompiledBackend, _chunks, is_decode_row
from engine.worker.input_builder import InputBuilder
from engine.worker.model_runner import ModelRunner
from tests.support.paged import BLOCK_SIZE, PROMPTS, greedy, hf_greedy, make_pool, new_seq

MAX_BLOCKS = 8


@pytest.fixture
def runner(loaded, monkeypatch):
    """A runner holding the compiled backend (the runner builds the inputs it runs)."""
    pool = make_pool(loaded)
    inputs = InputBuilder(pool, BLOCK_SIZE, "cpu", scratch_block=pool.num_blocks - 1)
    backend = CompiledBackend(EagerBackend(loaded.model, inputs, weight_stationary=False),
                              max_blocks_per_seq=MAX_BLOCKS, compile=False)
    monkeypatch.setattr(compiled_backend, "PREFILL_ROWS", True)     # the default; not the environment's
    assert not backend.prompt_rows      # fp32: prompts stay on transformers' code by default...
    assert backend.state.prompts == "eager" and "not the kernel" in backend.state.prompts_note
    backend.prompt_rows = True          # ...and run as rows here, to check them against it
    return ModelRunner(loaded.model, backend=backend, inputs=inputs)


@pytest.fixture
def backend(runner):
    return runner.backend


def test_greedy_tokens_equal_hugging_face_and_decode_rows_take_the_graph(runner, backend,
                                                                         loaded):
    want = [hf_greedy(loaded.model, p, 6) for p in PROMPTS]
    got = greedy(runner.forward, [new_seq("a", PROMPTS[0], 0), new_seq("b", PROMPTS[1], 8)], 6)
    assert got == want
    assert backend.state.steps_compiled == 5           # every step after the prefill
    assert set(backend.buffers) == {(2, MAX_BLOCKS)}


def test_bucket_choice_skips_buckets_not_ready(backend):
    seqs = [new_seq(str(i), PROMPTS[0], 4 * i) for i in range(3)]
    for s in seqs:
        s.num_computed, s.output_ids = s.num_tokens, [7]
    entries = [ScheduledSeq.of(s, 1) for s in seqs]
    assert all(map(is_decode_row, entries))
    assert backend.bucket(entries) == (4, MAX_BLOCKS)
    backend.state.ready = [1, 2, 8]
    assert backend.bucket(entries) == (8, MAX_BLOCKS)
    backend.state.ready = [1, 2]
    assert backend.bucket(entries) is None
    prefill = ScheduledSeq.of(new_seq("p", PROMPTS[1], 40), len(PROMPTS[1]))
    assert not is_decode_row(prefill) and backend.bucket([*entries, prefill]) is None


def test_bucket_1_compiles_first_and_a_batch_1_step_can_run_a_larger_bucket_padded(backend):
    """Bucket 1 (the commonest step, and the quicker compile) comes first, then the graph the
    larger buckets share; a batch-1 step whose bucket is not ready runs the smallest ready one,
    padded (cheaper than the eager step)."""
    assert backend.compile_order() == [1, 2, 4, 8, 16, 32]
    s = new_seq("one", PROMPTS[0], 0)
    s.num_computed, s.output_ids = s.num_tokens, [7]
    backend.state.ready = [2, 4, 8, 16, 32]
    assert backend.bucket([ScheduledSeq.of(s, 1)]) == (2, MAX_BLOCKS)


def test_a_prompts_last_token_after_a_prefix_hit_is_no_decode_row():
    s = new_seq("h", PROMPTS[1], 0)
    s.num_computed = len(PROMPTS[1]) - 1              # all but the last prompt token cached
    assert not is_decode_row(ScheduledSeq.of(s, 1))


def test_a_mixed_step_keeps_entry_order_across_graph_and_eager(runner, backend, loaded):
    dec = new_seq("d", PROMPTS[0], 0)
    runner.forward([ScheduledSeq.of(dec, dec.num_tokens)])
    dec.num_computed, dec.output_ids = dec.num_tokens, [hf_greedy(loaded.model, PROMPTS[0], 1)[0]]
    pre = new_seq("p", PROMPTS[1], 8)
    entries = [ScheduledSeq.of(pre, pre.num_tokens), ScheduledSeq.of(dec, 1)]
    plan = backend.plan(entries)
    assert plan.rows == [0] and plan.static == [[1]] and not plan.packed   # the prompt as rows
    logits = runner.forward(entries)
    eager = backend.run_packed(runner.inputs.packed(entries))
    torch.testing.assert_close(logits, eager, atol=1e-4, rtol=1e-4)
    assert backend.state.steps_compiled == 1


def test_prompt_chunks_as_graph_rows_give_transformers_logits_and_cut_anywhere(runner, backend,
                                                                                loaded):
    """Prompts as rows of the graph (every token a row attending through its table): two
    prompts in one call give transformers' logits at their last tokens, a prompt cut into
    chunks of 1, 3 and the rest gives the same last logits as uncut (a chunk's rows write
    their keys before any of them attends; bit for bit in bf16 and int4, where attention runs
    in the kernel: test_compiled_decode.py), and a prompt too long for one call of the graph
    goes to the packed pass."""
    a, b = new_seq("a", PROMPTS[0], 0), new_seq("b", PROMPTS[1], 8)
    entries = [ScheduledSeq.of(a, a.num_tokens), ScheduledSeq.of(b, b.num_tokens)]
    assert backend.plan(entries).rows == [0, 1]
    logits = runner.forward(entries)
    with torch.inference_mode():
        for row, prompt in zip(logits, PROMPTS[:2]):
            want = loaded.model(torch.tensor([prompt])).logits[0, -1]
            torch.testing.assert_close(row, want, atol=1e-4, rtol=1e-4)
    c = new_seq("c", PROMPTS[1], 16)
    for n in (1, 3):
        part = ScheduledSeq.of(c, n)
        assert not part.samples and runner.forward([part]).shape[0] == 0
        c.num_computed += n
    rest = runner.forward([ScheduledSeq.of(c, c.num_tokens - c.num_computed)])
    torch.testing.assert_close(rest[0], logits[1], atol=1e-4, rtol=1e-4)
    backend.max_rows = 4
    long = ScheduledSeq.of(new_seq("l", PROMPTS[1], 24), len(PROMPTS[1]))
    assert backend.plan([long]).packed == [0] and not backend.plan([long]).rows


def test_chunks_keep_an_entrys_rows_together():
    class E:
        def __init__(self, k):
            self.draft_ids = [0] * k

    entries = [E(0), E(3), E(1), E(0)]              # 1, 4, 2, 1 rows
    assert list(_chunks(entries, [0, 1, 2, 3], 4)) == [[0], [1], [2, 3]]


def test_the_background_compile_runs_below_the_engine_threads_priority():
    """The compile thread lowers its own priority (Linux: the thread's nice), so requests served
    while it compiles keep their core; the caller's thread and the process keep theirs."""
    import os
    import threading

    from engine.worker.compiled import compiled_backend

    seen = {}

    def body():
        with compiled_backend._yielding():
            seen["inside"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    if before != 0:
        pytest.skip(f"the tests run at nice {before}, not 0")
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen["inside"] == compiled_backend.COMPILE_NICE
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
