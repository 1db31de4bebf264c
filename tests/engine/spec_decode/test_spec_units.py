"""Speculative decoding without a model: the n-gram drafter, the verification rules (checked
statistically on hand-made distributions), the pause on low acceptance, the scheduler's
rollback of rejected drafts' KV blocks."""

import math

import pytest
import torch

from engine import SamplingParams
from engine.config import EngineConfig
from engine.core.block_manager import BlockManager
from engine.core.scheduler import Scheduler
from engine.core.sequence import Sequence
from engine.worker.runner_output import ModelRunnerOutput, SampleResult
from engine.spec_decode.config import SpeculativeConfig
from engine.spec_decode.ngram_proposer import NgramProposer
from engine.spec_decode.rejection_sampler import greedy_verify, rejection_sample
from engine.spec_decode.spec_state import SpecState, spec_state_for

EOS = 2


# ---- the drafter -----------------------------------------------------------------------------
def test_ngram_proposes_what_followed_the_longest_recent_match():
    prop = NgramProposer(min_n=2, max_n=4)
    #        0  1  2  3  4  5  6  7  8  9 10 11
    toks = [5, 6, 7, 8, 9, 1, 6, 7, 3, 4, 5, 6, 7]
    # suffix [5, 6, 7] occurs at 0..2 (followed by 8, 9); [6, 7] alone more recently at 6..7
    assert prop.propose(toks, 3) == [8, 9, 1]
    assert prop.propose(toks, 1) == [8]
    # only a 2-gram matches: the most recent occurrence wins
    assert prop.propose([1, 2, 9, 1, 2, 8, 1, 2], 2) == [8, 1]
    assert prop.propose([1, 2, 3, 4], 4) == []           # nothing repeats
    assert prop.propose([1, 2, 3, 1], 4) == []           # a 1-gram is below min_n
    assert NgramProposer(1, 4).propose([1, 2, 3, 1], 4) == [2, 3, 1]
    assert prop.propose(toks, 0) == []


# ---- verification ----------------------------------------------------------------------------
def test_greedy_verify_accepts_the_prefix_equal_to_the_argmax():
    assert greedy_verify([4, 5, 6, 7], [4, 5, 6]) == 3
    assert greedy_verify([4, 9, 6, 7], [4, 5, 6]) == 1
    assert greedy_verify([1, 5, 6, 7], [4, 5, 6]) == 0


P0 = [0.10, 0.40, 0.05, 0.30, 0.15]
P1 = [0.25, 0.25, 0.20, 0.20, 0.10]
Q0 = [0.50, 0.10, 0.20, 0.10, 0.10]


def _chi2_ok(counts, probs, n):
    """Pearson's chi-square against ``probs``; 4 degrees of freedom, p = 0.001 cut-off 18.47."""
    chi2 = sum((c - n * p) ** 2 / (n * p) for c, p in zip(counts, probs))
    return chi2 < 18.47, chi2


def test_greedy_verification_reports_the_sampler_numbers_with_or_without_its_operator(
        monkeypatch):
    """verify_one on the CPU takes argmax, probabilities and candidates from the row summary
    operator; with the PyTorch operations (no operator) the accepted tokens, their
    probabilities and their candidates are the same."""
    from engine.spec_decode.verify import verify_one
    from engine.worker.kernels import row_summary

    if row_summary.load() is None:
        pytest.skip(f"no row summary operator: {row_summary.unavailable_reason()}")
    gen = torch.Generator().manual_seed(0)
    for trial in range(6):
        logits = (torch.randn(4, 3000, generator=gen) * 3).bfloat16()
        best = logits.float().argmax(-1).tolist()
        right = trial % 4                                           # drafts equal to the argmax
        drafts = best[:right] + [t for t in (7, 8, 9, 10) if t != best[min(right, 3)]][:3 - right]
        params = SamplingParams(temperature=0, top_k=40 if trial % 2 else 0)
        fast = verify_one(logits, drafts, params, None)
        with monkeypatch.context() as m:
            m.setattr(row_summary, "available", lambda x: False)
            slow = verify_one(logits, drafts, params, None)
        assert [r.token_id for r in fast] == [r.token_id for r in slow] == best[:len(fast)]
        assert len(fast) == right + 1
        for f, s_ in zip(fast, slow):
            assert (f.prob, f.top_probs) == (s_.prob, s_.top_probs)
            assert set(f.top_ids[:-1]) <= set(s_.top_ids)


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["fixed-token", "distribution"])
def test_rejection_sampling_keeps_the_target_distribution(drafter):
    """The first emitted token of a step is distributed as the target's p_0, whatever the drafts.

    Drafts come from a fixed token (prompt lookup: q one-hot) or are drawn from Q0; 20,000
    steps, Pearson's chi-square at p = 0.001. The naive rule (always accept) would give the
    drafter's distribution instead and fail by a wide margin (checked below).
    """
    target = torch.tensor([P0, P1])
    gen = torch.Generator().manual_seed(1234)
    n = 20_000
    counts = [0] * 5
    accepted = 0
    q = torch.tensor([Q0])
    for _ in range(n):
        if drafter == "fixed-token":
            d, dp = 3, None
        else:
            d, dp = int(torch.multinomial(q[0], 1, generator=gen)[0]), q
        a, tok = rejection_sample(target, [d], dp, gen)
        first = d if a == 1 else tok
        counts[first] += 1
        accepted += a
    ok, chi2 = _chi2_ok(counts, P0, n)
    assert ok, (counts, chi2)
    # acceptance rate: p0(3) = 0.30 for a fixed draft; sum(min(p, q)) = 0.55 for drafts from Q0
    expect = 0.30 if drafter == "fixed-token" else sum(min(a, b) for a, b in zip(P0, Q0))
    assert abs(accepted / n - expect) < 4 * math.sqrt(expect * (1 - expect) / n)
    if drafter == "distribution":
        assert not _chi2_ok([int(n * x) for x in Q0], P0, n)[0]  # the test can tell q from p


@pytest.mark.slow
def test_rejection_sampling_second_token_after_acceptance():
    """When the draft is accepted the bonus token comes from the next row, p_1."""
    target = torch.tensor([[0.0, 0.0, 0.0, 1.0, 0.0], P1])   # draft 3 always accepted
    gen = torch.Generator().manual_seed(7)
    counts = [0] * 5
    n = 10_000
    for _ in range(n):
        a, tok = rejection_sample(target, [3], None, gen)
        assert a == 1
        counts[tok] += 1
    assert _chi2_ok(counts, P1, n)[0]


def test_rejection_sampling_is_reproducible_with_a_seed_and_checks_shapes():
    target = torch.softmax(torch.randn(4, 50, generator=torch.Generator().manual_seed(0)), -1)
    draws = [rejection_sample(target, [3, 9, 11], None, torch.Generator().manual_seed(42))
             for _ in range(2)]
    assert draws[0] == draws[1]
    many = {rejection_sample(target, [3, 9, 11], None, torch.Generator().manual_seed(s))
            for s in range(40)}
    assert len(many) > 1
    with pytest.raises(ValueError, match="target_probs"):
        rejection_sample(target, [1, 2], None)
    with pytest.raises(ValueError, match="draft_probs"):
        rejection_sample(target, [1, 2, 3], target[:2])


# ---- pausing on low acceptance ---------------------------------------------------------------
def test_drafting_pauses_while_acceptance_stays_low_and_resumes():
    cfg = SpeculativeConfig(num_speculative_tokens=4, window=2, backoff_steps=3,
                            max_backoff_steps=6, min_acceptance=0.5)
    st = SpecState(cfg)
    toks = [1, 2, 3, 1, 2]           # drafts [3, 1, 2]
    assert st.propose(toks, 4) == [3, 1, 2]
    st.record(3, 0, 1)
    st.record(3, 1, 2)               # 1 of 6 accepted over the window: pause 3 steps
    assert st.paused
    assert [st.propose(toks, 4) for _ in range(3)] == [[], [], []]
    assert st.propose(toks, 4) == [3, 1, 2] and st.paused_steps == 3
    st.record(3, 0, 1)
    st.record(3, 0, 1)               # still low: the pause doubles
    assert [st.propose(toks, 4) for _ in range(6)] == [[]] * 6
    st.record(3, 3, 4)
    st.record(3, 3, 4)               # recovered: the next low window pauses 3 again
    st.record(3, 0, 1)
    st.record(3, 0, 1)
    assert [st.propose(toks, 4) for _ in range(4)] == [[], [], [], [3, 1, 2]]
    s = st.summary()
    assert s["drafted"] == 24 and s["accepted"] == 7 and s["verify_steps"] == 8
    assert s["acceptance_rate"] == pytest.approx(7 / 24)
    assert s["mean_accepted_length"] == pytest.approx(7 / 8)
    assert s["tokens_per_step"] == pytest.approx(15 / 8)


def test_spec_state_choices_and_bad_input():
    cfg = EngineConfig()
    greedy = SamplingParams(temperature=0)
    assert spec_state_for(cfg, greedy, None, None, True) is None
    assert spec_state_for(cfg, greedy, "off", None, True) is None
    st = spec_state_for(cfg, greedy, "ngram", 6, True)
    assert st.config.num_speculative_tokens == 6 and not st.off_reason
    on = spec_state_for(EngineConfig(speculative="ngram"), greedy, None, None, True)
    assert on is not None and on.config.num_speculative_tokens == 3
    assert "paged" in spec_state_for(cfg, greedy, "ngram", None, False).off_reason
    pen = SamplingParams(temperature=0, repetition_penalty=1.2)
    assert "penalties" in spec_state_for(cfg, pen, "ngram", None, True).off_reason
    with pytest.raises(ValueError, match="speculative"):
        spec_state_for(cfg, greedy, "medusa", None, True)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        spec_state_for(cfg, greedy, "ngram", 0, True)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        EngineConfig(speculative="ngram", num_speculative_tokens=99)


# ---- the scheduler: drafts in a step, rollback after it --------------------------------------
def _spec_seq(rid, prompt, max_tokens=32, k=4):
    s = Sequence(seq_id=rid, prompt_ids=list(prompt),
                 params=SamplingParams(temperature=0, max_tokens=max_tokens))
    s.spec = SpecState(SpeculativeConfig(num_speculative_tokens=k))
    return s


def _result(tok):
    return SampleResult(tok, 1.0, [tok], [1.0])


def test_scheduler_verifies_drafts_and_rolls_back_rejected_blocks():
    bm = BlockManager(32, 4)
    sched = Scheduler(bm, {EOS}, max_num_batched_tokens=64)
    prompt = [10, 11, 12, 13, 14, 15, 10, 11, 12]          # 9 tokens; "10 11 12" repeats
    spec, plain = _spec_seq("a", prompt), Sequence("b", [50, 51, 52],
                                                   SamplingParams(temperature=0, max_tokens=8))
    sched.add(spec)
    sched.add(plain)
    so = sched.schedule()                                   # both prefill
    out = ModelRunnerOutput(0.0, 0.0, sampled={"a": _result(13), "b": _result(60)})
    sched.update_from_output(so, out)
    assert spec.all_ids[-4:] == [10, 11, 12, 13] and spec.num_computed == 9
    so = sched.schedule()                                   # a verifies, b decodes plainly
    ea, eb = so.entries
    assert ea.draft_ids == [14, 15, 10, 11] and ea.num_new == 5 and ea.phase == "decode"
    assert eb.draft_ids == [] and eb.num_new == 1
    assert len(spec.block_table) == bm.blocks_needed(9 + 5) == 4
    used = bm.stats().used
    # the model accepts 14, rejects 15 and says 20 instead
    out = ModelRunnerOutput(0.0, 0.0, sampled={"a": _result(20), "b": _result(61)},
                            spec_accepted={"a": [_result(14)]})
    sched.update_from_output(so, out)
    assert spec.output_ids == [13, 14, 20] and plain.output_ids == [60, 61]
    assert spec.num_computed == 11                          # prompt + 13 + 14 have KV
    assert len(spec.block_table) == bm.blocks_needed(11) == 3
    assert bm.stats().used == used - 1                      # the rejected drafts' block freed
    s = spec.spec.summary()
    assert (s["drafted"], s["accepted"], s["verify_steps"], s["decode_passes"]) == (4, 1, 1, 1)
    assert s["tokens_per_step"] == 2.0


def test_scheduler_caps_drafts_at_max_tokens_and_stops_at_eos_inside_a_step():
    bm = BlockManager(32, 4)
    sched = Scheduler(bm, {EOS}, max_num_batched_tokens=64)
    spec = _spec_seq("a", [10, 11, 12, 13, 14, 15, 10, 11, 12], max_tokens=3)
    sched.add(spec)
    sched.update_from_output(sched.schedule(), ModelRunnerOutput(
        0.0, 0.0, sampled={"a": _result(13)}))
    so = sched.schedule()
    assert so.entries[0].draft_ids == [14]                  # 3 - 1 output - 1 own token
    spec2 = _spec_seq("b", [10, 11, 12, 13, EOS, 15, 10, 11, 12])
    sched.add(spec2)
    sched.update_from_output(so, ModelRunnerOutput(
        0.0, 0.0, sampled={"a": _result(16)}, spec_accepted={"a": [_result(14)]}))
    assert spec.is_finished and spec.finish_reason == "length"
    so = sched.schedule()                                   # b prefills
    sched.update_from_output(so, ModelRunnerOutput(0.0, 0.0, sampled={"b": _result(13)}))
    so = sched.schedule()
    assert so.entries[0].draft_ids == [EOS, 15, 10, 11]
    finished = sched.update_from_output(so, ModelRunnerOutput(
        0.0, 0.0, sampled={"b": _result(30)},
        spec_accepted={"b": [_result(EOS), _result(15)]}))
    assert finished == [spec2] and spec2.output_ids == [13, EOS]
    assert spec2.finish_reason == "stop" and bm.stats().used == 0
