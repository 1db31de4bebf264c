"""GPU readiness checked on CPU with fakes: dtype choice, pool cap, pool picture cost, NVML
handle choice, and the CUDA-graph runner's bucket and buffer handling."""

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

    import engine.worker.paged_model_runner as pmr
    from engine import SamplingParams

    checks, uploads = [], []
    real_find, real_upload = mu.find_packed_sequence_indices, pmr.upload_ints
    monkeypatch.setattr(mu, "find_packed_sequence_indices",
                        lambda *a, **k: checks.append(1) or real_find(*a, **k))
    monkeypatch.setattr(pmr, "upload_ints", lambda *a, **k: uploads.append(1) or real_upload(*a, **k))
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


# ---- the CUDA-graph decode runner: buckets and static buffers (eager on CPU) -----------------
def test_bucket_choice():
    from engine.worker.cuda_graph_runner import BATCH_BUCKETS, block_buckets, bucket_for

    assert [bucket_for(n, BATCH_BUCKETS) for n in (1, 2, 3, 5, 9, 17, 32, 33)] == \
        [1, 2, 4, 8, 16, 32, 32, None]
    assert block_buckets(512) == (4, 8, 16, 32, 64, 128, 256, 512)
    assert block_buckets(3) == (4,) and block_buckets(5) == (4, 8)


@pytest.fixture(scope="module")
def graph_engine(loaded):
    from engine import LLMEngine

    eng = LLMEngine(loaded, telemetry=False, cuda_graphs=True, kv_cache_bytes=64 * 2**20)
    yield eng
    eng.shutdown()


def test_graph_runner_buckets_and_buffers(graph_engine):
    from engine import SamplingParams
    from engine.core.scheduler_output import ScheduledSeq
    from engine.core.sequence import Sequence
    from engine.worker.cuda_graph_runner import CudaGraphRunner

    runner = graph_engine.runner
    assert isinstance(runner, CudaGraphRunner) and not runner.use_graphs  # CPU: eager
    scratch = runner.scratch_block
    assert scratch == len(graph_engine.block_manager.blocks)  # no sequence is given it
    seqs = []
    for i, n in enumerate((5, 20, 70)):
        s = Sequence(f"s{i}", list(range(100, 100 + n)), SamplingParams())
        s.block_table = list(range(10 * i, 10 * i + -(-(n + 1) // 16)))
        s.num_computed = n - 1
        seqs.append(s)
    entries = [ScheduledSeq.of(s, 1) for s in seqs]
    assert runner.bucket(entries) == (4, 8)  # 3 rows -> 4; 5 blocks -> 8
    assert runner.bucket(entries[:1]) == (1, 4)
    assert runner.bucket([ScheduledSeq.of(seqs[0], 2)]) is None  # not a decode step
    bufs = runner._new_buffers(4, 8)
    runner.fill(bufs, entries)
    assert bufs.input_ids.tolist() == [[104, 119, 169, 0]]
    assert bufs.position_ids.tolist() == [[4, 19, 69, 0]]
    assert bufs.lens.tolist() == [5, 20, 70, 1]
    assert bufs.slots.tolist() == [0 * 16 + 4, 11 * 16 + 3, 24 * 16 + 5, scratch * 16]
    assert bufs.blocks[2].tolist() == [20, 21, 22, 23, 24] + [scratch] * 3
    assert bufs.blocks[3].tolist() == [scratch] * 8


def test_graph_runner_static_buffers_give_the_same_tokens(graph_engine, engine):
    from engine import SamplingParams

    prompts = ["The capital of France is", "def add(a, b):", "Once upon a time",
               "Water boils at", "The KV cache stores"]
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)

    def run(eng):
        hs = [eng.submit(p, params, raw=True) for p in prompts]
        return [h.result(300).token_ids for h in hs]

    want = run(engine)
    before = dict(graph_engine.runner.buffers)
    assert run(graph_engine) == want
    assert graph_engine.runner.buffers and len(graph_engine.runner.buffers) > len(before)
    assert graph_engine.stats()["blocks_used"] == 0


@pytest.mark.gpu
def test_cuda_graph_replay_equals_eager_logits(loaded):
    """On a GPU: the replayed decode step's logits equal the eager packed pass's."""
    from engine import LLMEngine, SamplingParams
    from engine.core.scheduler_output import ScheduledSeq
    from engine.model.loader import load_model

    gpu = load_model("smollm2-135m", device="cuda", dtype="float32", progress=None)
    eng = LLMEngine(gpu, telemetry=False)
    try:
        hs = [eng.submit(f"Prompt number {i} is", SamplingParams(temperature=0, max_tokens=8),
                         raw=True) for i in range(3)]
        [h.result(60) for h in hs]
        runner = eng.runner
        assert runner.use_graphs and runner.buffers
        assert all(b.graph is not None for b in runner.buffers.values())
        # a fresh decode step: three sequences' last tokens, replayed and eager
        from engine.core.sequence import Sequence

        seqs = []
        for i, n in enumerate((5, 9, 30)):
            s = Sequence(f"g{i}", list(range(200, 200 + n)), SamplingParams())
            s.block_table = list(range(4 * i, 4 * i + 3))
            s.num_computed = n - 1
            seqs.append(s)
        entries = [ScheduledSeq.of(s, 1) for s in seqs]
        replayed = runner.forward(entries).clone()
        eager = super(type(runner), runner).forward(entries)
        torch.testing.assert_close(replayed, eager, atol=1e-4, rtol=1e-4)
    finally:
        eng.shutdown()


def test_a_failed_capture_falls_back_to_eager(graph_engine, monkeypatch):
    from engine import SamplingParams

    runner = graph_engine.runner

    def broken(bufs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(runner, "_record", broken)
    monkeypatch.setattr(runner, "use_graphs", True)
    runner.buffers.clear()
    out = graph_engine.generate("Hello there", SamplingParams(temperature=0, max_tokens=6,
                                                              ignore_eos=True), raw=True)
    assert out.finish_reason == "length" and len(out.token_ids) == 6
    assert runner.use_graphs is False and runner.buffers


def test_graph_runner_verifies_drafts_in_its_buckets(graph_engine, monkeypatch):
    """A speculative verification pass replays the decode buckets too (``k + 1`` rows; on
    CPU the same static buffers run eagerly): no verification reaches the packed pass, and the
    greedy tokens equal plain decoding's."""
    from engine import SamplingParams
    from engine.experiments.speculative import PROMPTS as SPEC_PROMPTS
    from engine.worker.paged_model_runner import PagedModelRunner

    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    prompt = SPEC_PROMPTS["copy-heavy"]
    want = graph_engine.generate(prompt, params).token_ids
    packed, plain = [], PagedModelRunner.forward

    def spy(self, entries):
        packed.extend(e for e in entries if e.draft_ids)
        return plain(self, entries)

    monkeypatch.setattr(PagedModelRunner, "forward", spy)
    h = graph_engine.submit(prompt, params, speculative="ngram", num_speculative_tokens=3)
    assert h.result(600).token_ids == want
    assert h.result().speculative["accepted"] > 0 and packed == []
