"""Sampling filters on hand-made logits: the distributions they must give."""

import math

import pytest
import torch

from engine.params import SamplingParams
from engine.worker.sampler import NonFiniteLogitsError, Sampler, apply_filters, apply_penalties

EMPTY = torch.tensor([], dtype=torch.long)


def test_temperature_zero_is_argmax_and_probs_are_temperature_one():
    logits = torch.tensor([1.0, 3.0, 2.0])
    res = Sampler().sample(logits, SamplingParams(temperature=0), EMPTY, EMPTY, None)
    assert res.token_id == 1
    expected = torch.softmax(logits, -1)
    assert res.prob == pytest.approx(float(expected[1]))
    assert res.top_ids == [1, 2, 0]


def test_temperature_scales_the_distribution():
    logits = torch.tensor([0.0, 1.0])
    p = apply_filters(logits, 2.0, 0, 1.0, 0.0)
    assert p[1] / p[0] == pytest.approx(math.exp(0.5), rel=1e-5)


def test_top_k_keeps_k_and_larger_than_vocab_is_off():
    logits = torch.tensor([0.0, 1.0, 2.0, 3.0])
    p = apply_filters(logits, 1.0, 2, 1.0, 0.0)
    assert (p[:2] == 0).all() and p[2:].sum() == pytest.approx(1.0)
    off = apply_filters(logits, 1.0, 0, 1.0, 0.0)
    big = apply_filters(logits, 1.0, 10_000, 1.0, 0.0)
    assert torch.allclose(off, big) and (big > 0).all()


def test_top_p_keeps_smallest_set_reaching_mass_and_tiny_keeps_one():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log()
    p = apply_filters(logits, 1.0, 0, 0.7, 0.0)
    assert (p > 0).tolist() == [True, True, False, False]
    assert p[0] == pytest.approx(0.5 / 0.8, rel=1e-5)
    tiny = apply_filters(logits, 1.0, 0, 1e-9, 0.0)
    assert tiny.tolist() == [1.0, 0.0, 0.0, 0.0]


def test_min_p_drops_tokens_below_fraction_of_top():
    probs = torch.tensor([0.6, 0.3, 0.06, 0.04])
    p = apply_filters(probs.log(), 1.0, 0, 1.0, 0.1)
    assert (p > 0).tolist() == [True, True, False, False]
    assert p.sum() == pytest.approx(1.0)


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    logits = torch.tensor([2.0, -2.0, 1.0])
    out = apply_penalties(logits, SamplingParams(repetition_penalty=2.0),
                          torch.tensor([0, 1, 1]), EMPTY)
    assert out.tolist() == [1.0, -4.0, 1.0]


def test_presence_and_frequency_penalties_count_output_tokens():
    logits = torch.zeros(3)
    out = apply_penalties(logits, SamplingParams(presence_penalty=0.5, frequency_penalty=0.25),
                          EMPTY, torch.tensor([2, 2, 0]))
    assert out.tolist() == pytest.approx([-0.75, 0.0, -1.0])


def test_seeded_sampling_is_reproducible_and_follows_the_distribution():
    logits = torch.tensor([0.0, math.log(3.0)])  # probabilities 0.25 / 0.75
    params = SamplingParams(temperature=1.0, seed=7)
    s = Sampler()

    def draw(seed, n):
        g = torch.Generator().manual_seed(seed)
        return [s.sample(logits, params, EMPTY, EMPTY, g).token_id for _ in range(n)]

    assert draw(7, 50) == draw(7, 50)
    ones = sum(draw(1, 4000))
    assert 0.72 < ones / 4000 < 0.78


def test_non_finite_logits_raise():
    with pytest.raises(NonFiniteLogitsError, match="non-finite"):
        Sampler().sample(torch.tensor([0.0, float("nan")]), SamplingParams(), EMPTY, EMPTY, None)
    with pytest.raises(NonFiniteLogitsError):
        Sampler().sample(torch.tensor([float("inf"), 0.0]), SamplingParams(), EMPTY, EMPTY, None)


def test_filtered_tokens_are_not_candidates():
    logits = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    res = Sampler().sample(logits, SamplingParams(temperature=1.0, top_k=2, seed=0), EMPTY, EMPTY,
                           torch.Generator().manual_seed(0))
    assert res.top_ids == [5, 4] and all(p > 0 for p in res.top_probs)


def test_finite_rows_whose_sum_overflows_are_not_errors():
    big = torch.full((8,), 3e38)  # every logit finite, their sum overflows to inf
    res = Sampler().sample(big, SamplingParams(temperature=0), EMPTY, EMPTY, None)
    assert res.token_id == 0


def _many_vs_one(params, logits, seeds):
    """Tokens and probabilities of sample_many against sample, row by row, same seeds."""
    s = Sampler()
    gens = [torch.Generator().manual_seed(x) if x is not None else None for x in seeds]
    ctx = torch.tensor([3, 3, 5]), torch.tensor([5])
    many = s.sample_many(logits, params, gens, lambda i: ctx)
    gens = [torch.Generator().manual_seed(x) if x is not None else None for x in seeds]
    alone = []
    for i, p in enumerate(params):
        try:
            alone.append(s.sample(logits[i], p, *ctx, gens[i]))
        except NonFiniteLogitsError as exc:
            alone.append(exc)
    return many, alone


def test_sample_many_gives_each_row_what_sampling_it_alone_gives():
    torch.manual_seed(0)
    logits = torch.randn(7, 300) * 3
    params = [SamplingParams(temperature=0), SamplingParams(temperature=0.7, seed=1),
              SamplingParams(temperature=1.0, seed=2), SamplingParams(temperature=1.3, seed=3),
              SamplingParams(temperature=0.8, top_p=0.9, seed=4),  # filters: one-by-one path
              SamplingParams(temperature=0, repetition_penalty=1.5),  # penalty: one-by-one
              SamplingParams(temperature=2.0, seed=5, top_k=20, min_p=0.05)]
    for _ in range(5):  # several draws: the generators must advance the same way
        many, alone = _many_vs_one(params, logits, [None, 1, 2, 3, 4, None, 5])
        for m, a in zip(many, alone):
            assert m.token_id == a.token_id
            assert m.prob == a.prob  # bit-identical, not approximately equal
            assert m.top_ids == a.top_ids and m.top_probs == a.top_probs
        logits = logits.roll(1, dims=1)


def test_sample_many_fails_only_the_row_with_non_finite_logits():
    logits = torch.randn(3, 50)
    logits[1, 7] = float("nan")
    params = [SamplingParams(temperature=0)] * 3
    out = Sampler().sample_many(logits, params, [None] * 3, lambda i: (EMPTY, EMPTY))
    assert isinstance(out[1], NonFiniteLogitsError)
    assert out[0].token_id == int(logits[0].argmax()) and out[2].token_id == int(logits[2].argmax())


def test_vectorised_rows_equal_the_one_row_reference_rules():
    """Each row of sample_many against apply_penalties + apply_filters on that row alone
    (the rules as written for one row), for a mix of every setting in one step."""
    for seed in range(4):
        _check_rows_against_reference(seed)


def _check_rows_against_reference(seed):
    torch.manual_seed(seed)
    logits = torch.randn(9, 400) * 4
    params = [SamplingParams(temperature=0), SamplingParams(temperature=0.7, seed=1),
              SamplingParams(temperature=0.8, top_p=0.9, seed=4),
              SamplingParams(temperature=0, repetition_penalty=1.5),
              SamplingParams(temperature=2.0, seed=5, top_k=20, min_p=0.05),
              SamplingParams(temperature=1.1, top_k=7, top_p=0.8, seed=6,
                             presence_penalty=0.5, frequency_penalty=0.3),
              SamplingParams(temperature=1.0, min_p=0.2, repetition_penalty=0.8, seed=7),
              SamplingParams(temperature=0.5, top_k=1, seed=8),
              SamplingParams(temperature=0.7, top_k=50, top_p=0.95, repetition_penalty=1.1,
                             seed=9)]  # the page's defaults
    ctx = ([3, 3, 5, 9, 250], [5, 9, 9])
    exempt = torch.zeros(400, dtype=torch.bool)
    exempt[9] = True
    s = Sampler(exempt_ids=[9])
    gens = [torch.Generator().manual_seed(i) for i in range(9)]
    many = s.sample_many(logits, params, gens, lambda i: ctx)
    for i, p in enumerate(params):
        x = apply_penalties(logits[i], p, torch.tensor(ctx[0]), torch.tensor(ctx[1]), exempt)
        probs = apply_filters(x, p.temperature, p.top_k, p.top_p, p.min_p)
        got = many[i]
        if p.greedy:
            assert got.token_id == int(torch.argmax(x))
        assert got.prob == float(probs[got.token_id])  # bit-identical
        top = torch.topk(probs, 5)
        want = [(int(t), float(v)) for t, v in zip(top.indices, top.values) if v > 0]
        assert list(zip(got.top_ids, got.top_probs)) == want


def test_one_host_device_wait_per_step_for_any_mix(monkeypatch):
    """Every read of a tensor's value on the host (.item, .tolist, int(), float(), bool())
    is counted: a step of mixed settings makes exactly one."""
    waits = []
    for name in ("item", "tolist", "__int__", "__float__", "__bool__", "__index__"):
        real = getattr(torch.Tensor, name)

        def wrapped(self, *a, _real=real, _name=name, **k):
            waits.append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, wrapped)
    logits = torch.randn(6, 300)
    params = [SamplingParams(temperature=0), SamplingParams(temperature=0.7, seed=1),
              SamplingParams(temperature=0.9, top_k=50, top_p=0.95, repetition_penalty=1.1,
                             seed=2),
              SamplingParams(temperature=1.0, min_p=0.1, frequency_penalty=0.5, seed=3),
              SamplingParams(temperature=0, presence_penalty=1.0, stop_token_ids=[4]),
              SamplingParams(temperature=1.3, top_p=0.5)]
    gens = [torch.Generator().manual_seed(i) for i in range(6)]
    out = Sampler(exempt_ids=[0, 2]).sample_many(
        logits, params, gens, lambda i: ([1, 2, 3, 3, 7], [3, 7]))
    assert all(not isinstance(o, Exception) for o in out)
    assert waits == ["tolist"]
