"""The weight-stationary layout computes the same products, only where it is meant to."""

import threading

import torch
import torch.nn.functional as F

from engine.weight_stationary import (MAX_ROWS, WeightStationaryLinear, linear_weight_stationary,
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
