"""The eager backend (:mod:`engine.worker.backends.eager`): transformers' forward over the
paged pool gives Hugging Face's logits and greedy tokens (fp32), alone and packed together."""

import torch

from engine.core.scheduler_output import ScheduledSeq
from engine.worker.backends.eager import EagerBackend
from engine.worker.input_builder import InputBuilder
from tests.support.paged import BLOCK_SIZE, PROMPTS, greedy, hf_greedy, make_pool, new_seq


def backend_for(loaded):
    pool = make_pool(loaded)
    backend = EagerBackend(loaded.model, InputBuilder(pool, BLOCK_SIZE, "cpu"),
                           weight_stationary=False)
    return backend, lambda entries: backend.run_packed(backend.inputs.packed(entries))


def test_packed_prefill_logits_equal_transformers(loaded):
    _, forward = backend_for(loaded)
    seqs = [new_seq("a", PROMPTS[0], 0), new_seq("b", PROMPTS[1], 8)]
    logits = forward([ScheduledSeq.of(s, len(s.prompt_ids)) for s in seqs])
    assert logits.shape == (2, loaded.model.config.vocab_size)
    for row, prompt in zip(logits, PROMPTS):
        with torch.inference_mode():
            want = loaded.model(input_ids=torch.tensor([prompt])).logits[0, -1]
        torch.testing.assert_close(row, want, atol=1e-4, rtol=1e-4)


def test_greedy_tokens_equal_hugging_face_alone_and_packed(loaded):
    want = [hf_greedy(loaded.model, p, 8) for p in PROMPTS]
    _, forward = backend_for(loaded)
    alone = [greedy(forward, [new_seq(f"s{i}", p, 16 * i)], 8)[0]
             for i, p in enumerate(PROMPTS)]
    packed = greedy(forward, [new_seq("x", PROMPTS[0], 0),
                                      new_seq("y", PROMPTS[1], 16)], 8)
    assert alone == want and packed == want


def test_a_step_of_prefill_chunks_only_returns_no_rows(loaded):
    backend, forward = backend_for(loaded)
    s = new_seq("c", PROMPTS[1], 0)
    e = ScheduledSeq.of(s, 4)                         # a first chunk: nothing to sample
    assert backend.plan([e]).packed == [0] and backend.plan([e]).static == []
    assert forward([e]).shape == (0, loaded.model.config.vocab_size)
    assert backend.info().backend == "eager" and backend.info().pool is backend.inputs.pool
