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


def _tied(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """Logits with many exact ties, as bf16 logits have (values on a 1/8 grid)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, vocab, generator=g) * 3 * 8).round() / 8


@pytest.mark.parametrize("seed", range(6))
def test_top_k_and_top_p_keep_what_the_one_row_rule_keeps_ties_included(seed):
    """Rows using top-k and top-p (the page's defaults among them) keep exactly the tokens of
    the one-row rule (apply_filters: top-k, then a stable sort of the row for the nucleus),
    with logits tied with the k-th and at the nucleus's edge. Filtering one after the other
    let a logit tied with the k-th past the nucleus's window survive, and took ties in topk's
    order: 13 of these 36 rows differed from the rule."""
    from engine.worker.sampler import apply_filters
    from engine.worker.sampling_ops import top_k_top_p_rows

    x = _tied(6, 4000, seed)
    ks, ps = [50, 20, 50, 0, 7, 50], [0.95, 0.9, 1.0, 0.9, 0.5, 0.95]
    got = torch.softmax(top_k_top_p_rows(x, ks, ps), dim=-1)
    for i in range(6):
        want = apply_filters(x[i], 1.0, ks[i], ps[i], 0.0)
        assert torch.equal(got[i], want), i


def test_a_rows_nucleus_does_not_depend_on_the_other_rows_k():
    from engine.worker.sampling_ops import top_k_top_p_rows

    x = _tied(4, 4000, 99)
    ks, ps = [20, 50, 20, 200], [0.9, 0.95, 0.8, 0.99]
    together = top_k_top_p_rows(x, ks, ps)
    for i in range(4):
        assert torch.equal(top_k_top_p_rows(x[i:i + 1], ks[i:i + 1], ps[i:i + 1])[0], together[i])
