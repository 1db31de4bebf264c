"""Each compiled runner traces its own copy of the decode step, so Dynamo's cache, guards and
recompile limit are its own: another engine of the process (a lesson's, another dtype) can no
longer push the serving runner past the recompile limit (``FailOnRecompileLimitHit``) or leave
graphs in its cache. Checked with Dynamo's eager backend (no inductor: seconds)."""

from __future__ import annotations

import torch

from engine.worker.compiled.direct_call import decode_step, private_decode_step


class Forward:
    """Stands in for the compact forward: what the step calls of it."""

    @staticmethod
    def hidden_states(input_ids, positions, slots, blocks, lens):
        return input_ids * 2 + positions


forward = Forward()


def entries(fn) -> int:
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return len(_debug_get_cache_entry_list(fn.__code__))


def call(fn, dtype):
    x = torch.ones(4, dtype=dtype)
    return fn(forward, x, x, x, x, x)


def test_each_copy_keeps_its_own_cache_and_recompile_limit(monkeypatch):
    import torch._dynamo

    torch._dynamo.reset()
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)
    serving, lesson = private_decode_step(), private_decode_step()
    assert serving.__code__ is not lesson.__code__ is not decode_step.__code__
    served = torch.compile(serving, backend="eager", fullgraph=True, dynamic=False)
    other = torch.compile(lesson, backend="eager", fullgraph=True, dynamic=False)
    assert torch.equal(call(served, torch.float32), torch.full((4,), 3.0))
    for dtype in (torch.float16, torch.bfloat16):  # the lesson's engines: other dtypes
        call(other, dtype)
    assert entries(lesson) == 2 and entries(serving) == 1  # nothing of the lesson's in ours
    call(served, torch.float64)  # our second graph: within our own limit of 2
    assert entries(serving) == 2
    torch._dynamo.reset()
