"""The sampler's one-pass row summary (``row_summary.cpp``): the same tokens, probabilities and
candidates as the PyTorch operations it replaces, and clear errors for bad input."""

import pytest
import torch

from engine.params import SamplingParams
from engine.worker.kernels import row_summary
from engine.worker.sampler import NonFiniteLogitsError, Sampler

pytestmark = pytest.mark.skipif(row_summary.load() is None,
                                reason=f"no row summary operator: {row_summary.unavailable_reason()}")

SETTINGS = [SamplingParams(temperature=0), SamplingParams(temperature=0.7, seed=1),
            SamplingParams(temperature=0.9, top_k=50, top_p=0.95, repetition_penalty=1.1, seed=2),
            SamplingParams(temperature=1.0, min_p=0.1, frequency_penalty=0.5, seed=3),
            SamplingParams(temperature=0, presence_penalty=1.0),
            SamplingParams(temperature=1.3, top_p=0.5, seed=4),
            SamplingParams(temperature=0.5, top_k=3, seed=5)]


def _both(monkeypatch, logits, params):
    """sample_many with the operator and with the PyTorch operations, same generators."""
    def run():
        gens = [torch.Generator().manual_seed(i) for i in range(len(params))]
        return Sampler(exempt_ids=[0]).sample_many(logits, params, gens,
                                                   lambda i: ([1, 2, 3, 3, 7], [3, 7]))
    fast = run()
    with monkeypatch.context() as m:
        m.setattr(row_summary, "available", lambda x: False)
        slow = run()
    return fast, slow


def _same_candidates(f, s):
    """The same candidates, up to the order of equal probabilities (which the PyTorch top-k
    leaves open) and the choice among values tied at the k-th place; the operator's are in
    ascending index order within a tie."""
    last = f.top_probs[-1] if f.top_probs else None
    above = lambda r: {i for i, p in zip(r.top_ids, r.top_probs) if p != last}  # noqa: E731
    assert above(f) == above(s)
    for a, b, pa, pb in zip(f.top_ids, f.top_ids[1:], f.top_probs, f.top_probs[1:]):
        assert pa > pb or (pa == pb and a < b)


@pytest.mark.parametrize("rows,vocab", [(1, 49152), (7, 300), (33, 1000)])
def test_the_operator_gives_the_pytorch_operations_results(monkeypatch, rows, vocab):
    gen = torch.Generator().manual_seed(rows)
    for dtype in (torch.float32, torch.bfloat16):
        logits = (torch.randn(rows, vocab, generator=gen) * 4).to(dtype)
        params = [SETTINGS[i % len(SETTINGS)] for i in range(rows)]
        fast, slow = _both(monkeypatch, logits, params)
        for f, s in zip(fast, slow):
            assert (f.token_id, f.prob, f.top_probs) == (s.token_id, s.prob, s.top_probs)
            _same_candidates(f, s)


def test_ties_go_to_the_lower_index_and_non_finite_rows_fail_alone(monkeypatch):
    logits = torch.zeros(3, 64)
    logits[0, [5, 9, 40]] = 2.0                  # a three-way tie for the maximum
    logits[1, 7] = float("nan")
    logits[2, 3] = float("-inf")
    params = [SamplingParams(temperature=0)] * 3
    fast, slow = _both(monkeypatch, logits, params)
    assert fast[0].token_id == 5 == slow[0].token_id       # torch.argmax's first maximum
    assert fast[0].top_ids[:3] == [5, 9, 40]
    assert all(isinstance(o[1], NonFiniteLogitsError) for o in (fast, slow))
    assert all(isinstance(o[2], NonFiniteLogitsError) for o in (fast, slow))


def test_the_first_call_builds_in_the_background(monkeypatch):
    """available() never waits for the compiler: until the operator is loaded it says no and
    starts one build; once loaded it says yes on the CPU only."""
    started = []
    monkeypatch.setattr(row_summary, "_state", {})
    monkeypatch.setattr(row_summary.threading, "Thread",
                        lambda target, **kw: type("T", (), {"start": lambda self: started.append(target)})())
    assert not row_summary.available(torch.zeros(1, 2))
    assert not row_summary.available(torch.zeros(1, 2))
    assert started == [row_summary.load]                  # one build, in a thread
    row_summary._state.pop("building")
    assert row_summary.load() is not None                 # what the thread runs
    assert row_summary.available(torch.zeros(1, 2))
    assert not row_summary.available(torch.zeros(1, 2, device="meta"))


def test_bad_input_is_refused_with_the_field_named():
    x = torch.randn(2, 10)
    probs = torch.softmax(x, -1)
    chosen = torch.tensor([-1, 3])
    out = row_summary.row_summary(x, probs, chosen, 4)
    assert out.shape == (2, 11) and out.dtype == torch.float64
    assert out[1, 0] == 3 and out[1, 1] == float(probs[1, 3])
    with pytest.raises(RuntimeError, match="k = 11"):
        row_summary.row_summary(x, probs, chosen, 11)
    with pytest.raises(RuntimeError, match="chosen"):
        row_summary.row_summary(x, probs, torch.tensor([-1, 10]), 4)
    with pytest.raises(RuntimeError, match="scored"):
        row_summary.row_summary(x.double(), probs, chosen, 4)
    with pytest.raises(RuntimeError, match="probs"):
        row_summary.row_summary(x, probs[:1], chosen, 4)
