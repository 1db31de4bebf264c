"""The weight-stationary layout computes the same products, only where it is meant to."""

import threading

import torch
import torch.nn.functional as F

from engine.worker.weight_stationary import (MAX_ROWS, WeightStationaryLinear, linear_weight_stationary,
                                      use_weight_stationary)


def test_same_product_as_linear_with_and_without_bias():
    torch.manual_seed(0)
    w, b = torch.randn(96, 40), torch.randn(96)
    for shape in [(2, 40), (1, 3, 40), (4, 40)]:
        x = torch.randn(shape)
        for bias in (None, b):
            got = linear_weight_stationary(x, w, bias)
            assert got.shape == F.linear(x, w, bias).shape and got.is_contiguous()
            torch.testing.assert_close(got, F.linear(x, w, bias), rtol=1e-5, atol=1e-5)


def test_mode_takes_small_row_counts_on_this_thread_only():
    w = torch.randn(32, 16)
    mode = WeightStationaryLinear()
    seen_elsewhere = []
    with mode:
        F.linear(torch.randn(1, 16), w)                 # one row: linear's own kernel
        F.linear(torch.randn(1, 2, 16), w)              # two rows: weight-stationary
        F.linear(torch.randn(MAX_ROWS + 1, 16), w)      # too many rows: passes through
        t = threading.Thread(target=lambda: seen_elsewhere.append(F.linear(torch.randn(2, 16), w)))
        t.start()
        t.join()
    assert mode.calls == 1 and len(seen_elsewhere) == 1


def test_used_only_for_batched_decode_steps_on_cpu():
    cpu = torch.device("cpu")
    assert use_weight_stationary(cpu, 2, decode_only=True)
    assert not use_weight_stationary(cpu, 1, decode_only=True)           # keeps generate's kernels
    assert not use_weight_stationary(cpu, 3, decode_only=False)          # prefill in the step
    assert not use_weight_stationary(cpu, MAX_ROWS + 1, decode_only=True)
    assert not use_weight_stationary(torch.device("cuda", 0), 2, decode_only=True)


def test_engine_runner_uses_the_layout_only_when_allowed(loaded):
    """A decode step of two sequences goes through the layout; with the option off it doesn't."""
    from engine import LLMEngine, SamplingParams
    import engine.worker.backends.eager as mr

    seen = []
    real = mr.WeightStationaryLinear

    class Counting(real):
        def __exit__(self, *exc):
            seen.append(self.calls)
            return super().__exit__(*exc)

    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    outs = {}
    for allowed in (True, False):
        mr.WeightStationaryLinear = Counting
        try:
            eng = LLMEngine(loaded, telemetry=False, weight_stationary=allowed)
            hs = [eng.submit(p, params) for p in ("Name a colour.", "Name a fruit.")]
            outs[allowed] = [h.result().token_ids for h in hs]
            eng.shutdown()
        finally:
            mr.WeightStationaryLinear = real
        if allowed:
            assert seen and all(n > 0 for n in seen)  # every linear of those steps took it
            seen.clear()
        else:
            assert not seen
    assert outs[True] == outs[False]  # same greedy tokens either way
