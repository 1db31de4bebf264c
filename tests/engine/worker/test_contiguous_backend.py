"""The contiguous backend (:mod:`engine.worker.backends.contiguous`): one request on its own
cache gives the logits of a recompute, in one piece or several, and gives its memory back."""

import torch

from engine import SamplingParams
from engine.core.scheduler_output import ScheduledSeq
from engine.core.sequence import Sequence
from engine.worker.backends.contiguous import ContiguousBackend
from tests.support.paged import PROMPTS


def test_prefill_then_decode_equal_recompute_and_release_frees_the_cache(loaded):
    backend = ContiguousBackend(loaded.model)
    s = Sequence("a", list(PROMPTS[1]), SamplingParams(temperature=0))
    first = backend.forward(ScheduledSeq.of(s, s.num_tokens))
    torch.testing.assert_close(first, backend.recompute(s.all_ids), atol=1e-4, rtol=1e-4)
    s.num_computed = s.num_tokens
    s.output_ids.append(int(first.argmax()))
    second = backend.forward(ScheduledSeq.of(s, 1))
    torch.testing.assert_close(second, backend.recompute(s.all_ids), atol=1e-4, rtol=1e-4)
    assert backend.kv_bytes("a") == backend.kv_cache_bytes() > 0
    backend.release(["a"])
    assert backend.kv_bytes("a") == 0 == backend.kv_cache_bytes()


def test_a_recompute_in_pieces_equals_one_piece_and_keeps_no_keys(loaded):
    backend = ContiguousBackend(loaded.model)
    s = Sequence("r", list(PROMPTS[1]), SamplingParams(temperature=0), use_kv_cache=False)
    first = backend.recompute_piece(ScheduledSeq.of(s, 4))    # not the last piece
    assert "r" in backend.scratch and first.shape == (loaded.model.config.vocab_size,)
    s.num_computed = 4
    last = backend.recompute_piece(ScheduledSeq.of(s, s.num_tokens - 4))
    torch.testing.assert_close(last, backend.recompute(s.all_ids), atol=1e-4, rtol=1e-4)
    assert backend.scratch == {} and backend.caches == {}
