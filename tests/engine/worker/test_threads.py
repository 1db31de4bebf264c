"""The one place the engine thread's intra-op threads are set (:mod:`engine.worker.threads`)."""

import torch

from engine.worker.threads import StepThreads


def test_few_rows_run_on_decode_threads_and_larger_steps_on_the_own_setting():
    own = torch.get_num_threads()
    threads = StepThreads(decode_threads=1, few_rows=4)
    try:
        threads.use(4)
        assert torch.get_num_threads() == 1
        threads.use(5)
        assert torch.get_num_threads() == own
        threads.use(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(own)


def test_zero_decode_threads_leaves_pytorchs_setting_alone(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n))
    threads = StepThreads(decode_threads=0, few_rows=8)
    threads.use(1)
    threads.use(100)
    assert calls == []
