"""The sampler's chunked argmax and top-k give PyTorch's answers on vocabulary-sized rows."""

import pytest
import torch

from engine.worker.sampling_ops import CHUNK, row_argmax, row_topk


@pytest.mark.parametrize("vocab", [5, CHUNK - 1, CHUNK + 1, 32000, 49152])
def test_row_argmax_is_argmax_first_index_included(vocab):
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(6, vocab, generator=g)
    x[1, vocab - 1] = x[1, 0] = 50.0          # a tie: the first index wins, as in argmax
    x[2, vocab // 2] = x[2, vocab - 1] = 50.0
    x[3] = 0.0                               # all equal
    assert torch.equal(row_argmax(x), torch.argmax(x, dim=-1))
    assert row_argmax(x)[1] == 0 and row_argmax(x)[3] == 0


@pytest.mark.parametrize("vocab", [3, CHUNK * 4, 49152, 49153])
def test_row_topk_has_topks_values_and_indices(vocab):
    g = torch.Generator().manual_seed(vocab)
    probs = torch.softmax(torch.randn(8, vocab, generator=g) * 3, dim=-1)
    k = min(5, vocab)
    values, indices = row_topk(probs, k)
    want = torch.topk(probs, k, dim=-1)
    assert torch.equal(values, want.values) and torch.equal(indices, want.indices)
    # the largest values gathered in one chunk, and spread one per chunk, are both found
    x = torch.zeros(2, vocab)
    x[0, :k] = torch.arange(k, 0, -1).float()
    x[1, torch.arange(k) * (vocab // k)] = torch.arange(k, 0, -1).float()
    values, indices = row_topk(x, k)
    assert torch.equal(values, torch.topk(x, k, dim=-1).values)
    assert torch.equal(x.gather(1, indices), values)
