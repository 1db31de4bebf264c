"""The CUDA-graph backend (:mod:`engine.worker.backends.cuda_graph`): bucket choice, its static
buffers, and on CPU (``use_graphs`` off: the same buffers run eagerly) the greedy tokens of the
eager backend; the replay itself on a GPU only."""

import pytest
import torch


def test_bucket_choice():
    from engine.worker.buckets import BATCH_BUCKETS, block_buckets, bucket_for

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


def test_graph_backend_buckets_and_buffers(graph_engine):
    from engine import SamplingParams
    from engine.core.scheduler_output import ScheduledSeq
    from engine.core.sequence import Sequence
    from engine.worker.backends.cuda_graph import CudaGraphBackend

    backend = graph_engine.runner.backend
    assert isinstance(backend, CudaGraphBackend) and not backend.use_graphs  # CPU: eager
    scratch = backend.inputs.scratch_block
    assert scratch == len(graph_engine.block_manager.blocks)  # no sequence is given it
    seqs = []
    for i, n in enumerate((5, 20, 70)):
        s = Sequence(f"s{i}", list(range(100, 100 + n)), SamplingParams())
        s.block_table = list(range(10 * i, 10 * i + -(-(n + 1) // 16)))
        s.num_computed = n - 1
        seqs.append(s)
    entries = [ScheduledSeq.of(s, 1) for s in seqs]
    assert backend.bucket(entries) == (4, 8)  # 3 rows -> 4; 5 blocks -> 8
    assert backend.bucket(entries[:1]) == (1, 4)
    assert backend.bucket([ScheduledSeq.of(seqs[0], 2)]) is None  # not a decode step
    bufs = backend.inputs.new_static(4, 8)
    assert backend.inputs.fill(bufs, entries) == 3
    assert bufs.input_ids.tolist() == [[104, 119, 169, 0]]
    assert bufs.position_ids.tolist() == [[4, 19, 69, 0]]
    assert bufs.lens.tolist() == [5, 20, 70, 1]
    assert bufs.slots.tolist() == [0 * 16 + 4, 11 * 16 + 3, 24 * 16 + 5, scratch * 16]
    assert bufs.blocks[2].tolist() == [20, 21, 22, 23, 24] + [scratch] * 3
    assert bufs.blocks[3].tolist() == [scratch] * 8


def test_graph_backend_static_buffers_give_the_same_tokens(graph_engine, engine):
    from engine import SamplingParams

    prompts = ["The capital of France is", "def add(a, b):", "Once upon a time",
               "Water boils at", "The KV cache stores"]
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)

    def run(eng):
        hs = [eng.submit(p, params, raw=True) for p in prompts]
        return [h.result(300).token_ids for h in hs]

    want = run(engine)
    buffers = graph_engine.runner.backend.buffers
    before = dict(buffers)
    assert run(graph_engine) == want
    assert buffers and len(buffers) > len(before)
    assert graph_engine.stats().blocks_used == 0


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
        backend = eng.runner.backend
        assert backend.use_graphs and backend.buffers
        assert all(b.graph is not None for b in backend.buffers.values())
        # a fresh decode step: three sequences' last tokens, replayed and eager
        from engine.core.sequence import Sequence

        seqs = []
        for i, n in enumerate((5, 9, 30)):
            s = Sequence(f"g{i}", list(range(200, 200 + n)), SamplingParams())
            s.block_table = list(range(4 * i, 4 * i + 3))
            s.num_computed = n - 1
            seqs.append(s)
        entries = [ScheduledSeq.of(s, 1) for s in seqs]
        replayed = eng.runner.forward(entries).clone()
        eager = backend.run_packed(eng.runner.inputs.packed(entries))
        torch.testing.assert_close(replayed, eager, atol=1e-4, rtol=1e-4)
    finally:
        eng.shutdown()


def test_a_failed_capture_falls_back_to_eager(graph_engine, monkeypatch):
    from engine import SamplingParams

    backend = graph_engine.runner.backend

    def broken(bufs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(backend, "_record", broken)
    monkeypatch.setattr(backend, "use_graphs", True)
    backend.buffers.clear()
    out = graph_engine.generate("Hello there", SamplingParams(temperature=0, max_tokens=6,
                                                              ignore_eos=True), raw=True)
    assert out.finish_reason == "length" and len(out.token_ids) == 6
    assert backend.use_graphs is False and backend.buffers


def test_graph_backend_verifies_drafts_in_its_buckets(graph_engine, monkeypatch):
    """A speculative verification pass replays the decode buckets too (``k + 1`` rows; on
    CPU the same static buffers run eagerly): no verification reaches the packed pass, and the
    greedy tokens equal plain decoding's."""
    from engine import SamplingParams
    from engine.experiments.speculative import PROMPTS as SPEC_PROMPTS
    from engine.worker.input_builder import InputBuilder

    params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    prompt = SPEC_PROMPTS["copy-heavy"]
    want = graph_engine.generate(prompt, params).token_ids
    packed, plain = [], InputBuilder.packed      # every packed pass's inputs

    def spy(self, entries):
        packed.extend(e for e in entries if e.draft_ids)
        return plain(self, entries)

    monkeypatch.setattr(InputBuilder, "packed", spy)
    h = graph_engine.submit(prompt, params, speculative="ngram", num_speculative_tokens=3)
    assert h.result(600).token_ids == want
    assert h.result().speculative["accepted"] > 0 and packed == []
