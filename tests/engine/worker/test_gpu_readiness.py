"""GPU readiness checked on CPU with fakes: dtype choice, pool cap, pool picture cost, NVML
handle choice, one upload per step (the CUDA-graph backend: test_graph_backend.py)."""

import pytest
import torch

from engine.model.loader import resolve_dtype


@pytest.mark.parametrize("capability, want", [((7, 0), torch.float16), ((7, 5), torch.float16),
                                              ((8, 0), torch.bfloat16), ((8, 6), torch.bfloat16),
                                              ((9, 0), torch.bfloat16)])
def test_auto_dtype_follows_native_bf16_of_the_engines_own_gpu(monkeypatch, capability, want):
    asked = []

    def capability_of(device=None):
        asked.append(device)
        return capability

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability_of)
    assert resolve_dtype("auto", "cuda:1") == want
    assert asked == [torch.device("cuda:1")]  # GPU 1 itself, not the current device
    assert resolve_dtype("auto", "cpu") == torch.float32
    assert resolve_dtype("fp16", "cuda:0") == torch.float16


def test_pool_is_capped_at_what_the_scheduler_can_use():
    from engine import EngineConfig
    from engine.wiring import POOL_HEADROOM, pool_cap_blocks

    cfg = EngineConfig(max_num_seqs=32, block_size=16)
    cap = pool_cap_blocks(cfg, 8192)
    assert cap == int(32 * 512 * POOL_HEADROOM) == 20480
    # half of an H200's free memory for the embedded model in bf16 (23,040 B per token)
    from engine.worker.kv_pool import KVPool

    uncapped = KVPool.blocks_for_budget(70 * 2**30, 23_040, 16)
    assert uncapped > 200_000 and min(uncapped, cap) == cap


def test_engine_pool_respects_the_cap(loaded):
    from engine import LLMEngine

    eng = LLMEngine(loaded, telemetry=False, max_num_seqs=2, kv_cache_bytes=2**30)
    try:
        per_seq = -(-loaded.info.context_len // 16)
        assert eng.pool.num_blocks == int(2 * per_seq * 1.25)
        assert eng.pool.nbytes == eng.pool.num_blocks * 16 * 46_080
    finally:
        eng.shutdown()


class _NoIteration(list):
    def __iter__(self):
        raise AssertionError("the pool picture must not loop over every block in Python")


def test_pool_picture_at_200000_blocks_does_not_walk_the_pool():
    from engine.core.block_manager import BlockManager

    bm = BlockManager(200_000, 16)
    t, _, _ = bm.allocate(list(range(4000)), 4000)
    bm.register_full_blocks(t, list(range(4000)), 4000, 0)
    t2, _, _ = bm.allocate(list(range(9000, 9100)), 100)
    bm.free(t)
    bm.blocks = _NoIteration(bm.blocks)
    states, per_cell = bm.block_states()
    assert per_cell == 49 and len(states) == -(-200_000 // 49) <= 4096
    assert states[0] == "cached"  # the freed, keyed prefix blocks
    assert states.count("used") >= 1 and states[-1] == "free"
    small = BlockManager(100, 16)
    small_states, one = small.block_states()
    assert one == 1 and small_states == ["free"] * 100


@pytest.mark.fast
def test_paged_step_builds_no_causal_mask_and_uploads_once(engine, monkeypatch):
    """A ready 4-D mask skips transformers' mask building and its packed-sequence check;
    the step's integers go to the device in one transfer."""
    import transformers.masking_utils as mu

    import engine.worker.input_builder as ib
    from engine import SamplingParams

    checks, uploads = [], []
    real_find, real_upload = mu.find_packed_sequence_indices, ib.upload_ints
    monkeypatch.setattr(mu, "find_packed_sequence_indices",
                        lambda *a, **k: checks.append(1) or real_find(*a, **k))
    monkeypatch.setattr(ib, "upload_ints", lambda *a, **k: uploads.append(1) or real_upload(*a, **k))
    handles = [engine.submit(f"Count to {i}.", SamplingParams(temperature=0, max_tokens=4))
               for i in (3, 5)]
    outs = [h.result(60) for h in handles]
    assert all(o.finish_reason in ("stop", "length") for o in outs)
    assert checks == []
    steps = max(len(h.events) for h in handles)
    assert 0 < len(uploads) <= steps + 1  # one transfer per packed step


def test_warm_up_runs_before_serving_on_a_gpu_only(loaded):
    from engine import LLMEngine
    from tests.support.runners import ScriptedRunner

    for device, want in (("cuda", 1), ("cpu", 0)):
        runner = ScriptedRunner([2])
        runner.device = device
        runner.warmups = 0

        def warm_up(r=runner):
            r.warmups += 1

        runner.warm_up = warm_up
        eng = LLMEngine(loaded, runner=runner, telemetry=False)
        try:
            eng.call(lambda r: None).result(10)  # the loop has started
            assert runner.warmups == want
        finally:
            eng.shutdown()


def test_cuda_cache_is_kept_at_idle_and_emptied_after_out_of_memory(monkeypatch):
    from engine.wiring import release_free_memory
    from engine.worker.model_runner import after_error

    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    release_free_memory("cuda:0")
    after_error(RuntimeError("not memory"))
    assert emptied == []
    after_error(torch.OutOfMemoryError("CUDA out of memory"))
    assert emptied == [1]


def test_auto_device_warns_when_nvml_sees_a_gpu_torch_cannot_use(monkeypatch, caplog):
    import logging

    from engine.model import device as dev

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(dev, "nvml_gpu_count", lambda: 2)
    with caplog.at_level(logging.WARNING, logger="engine"):
        assert dev.resolve_device("auto") == "cpu"
    assert any("NVML sees 2 NVIDIA GPU(s) but torch cannot use CUDA" in r.getMessage()
               for r in caplog.records)
    monkeypatch.setattr(dev, "nvml_gpu_count", lambda: 0)
    caplog.clear()
    assert dev.resolve_device("auto") == "cpu" and not caplog.records
