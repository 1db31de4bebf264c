"""The compiled decode step on the embedded model (int4, CPU): the compact Llama forward gives
transformers' tokens, greedy answers don't depend on the batch, padding never leaks, a failed
compile falls back to eager, and the real ``torch.compile`` path matches eager."""

import math
import time

import pytest
import torch

from engine import LLMEngine, SamplingParams
from engine.model.loader import load_model
from engine.model.prompt import encode_prompt

GREEDY = SamplingParams(temperature=0, max_tokens=40)
TOPICS = ["the ocean", "volcanoes", "GPUs", "bread", "chess", "rivers", "owls", "comets"]
PROMPTS = [f"Tell me one fact about {t}." + " Please be precise and brief." * i
           for i, t in enumerate(TOPICS)]


@pytest.fixture(scope="module")
def int4():
    """The default CPU model: int4 weights straight from the GGUF, bf16 compute."""
    return load_model("smollm2-135m")


@pytest.fixture(scope="module")
def eager_tokens(int4):
    """Each prompt's greedy tokens alone on transformers' model code (the reference)."""
    eng = LLMEngine(int4, compile="off", telemetry=False)
    try:
        return [eng.generate(p, GREEDY).token_ids for p in PROMPTS]
    finally:
        eng.shutdown()


def together(eng, prompts, params=GREEDY, stagger_s=0.0, sizes=None):
    """Submit all ``prompts`` at once (or ``stagger_s`` apart); their outputs in order. The
    largest batch each request decoded in is appended to ``sizes`` when given."""
    handles = []
    for p in prompts:
        handles.append(eng.submit(p, params))
        time.sleep(stagger_s)
    outs = [h.result(600) for h in handles]
    if sizes is not None:
        sizes.extend(max(e.batch_size for e in h.events) for h in handles)
    return outs


@pytest.fixture
def no_compiler(monkeypatch):
    """``torch.compile`` as the identity: the compiled runner's buckets, buffers and compact
    forward run eagerly (seconds instead of minutes)."""
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)


@pytest.mark.slow
def test_eager_decode_is_batch_invariant(int4, eager_tokens):
    """transformers' path: 8 concurrent, and 8 staggered, greedy requests give exactly the
    tokens each gives alone, and seeded sampling the same draws (int4, the default weights)."""
    eng = LLMEngine(int4, compile="off", telemetry=False)
    try:
        sizes = []
        outs = together(eng, PROMPTS, sizes=sizes)
        assert max(sizes) == len(PROMPTS)                  # all eight shared decode steps
        assert [o.token_ids for o in outs] == eager_tokens
        assert [o.token_ids for o in together(eng, PROMPTS, stagger_s=0.05)] == eager_tokens
        seeded = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=24, seed=3)
        solo = [eng.generate(p, seeded).token_ids for p in PROMPTS]
        assert [o.token_ids for o in together(eng, PROMPTS, seeded)] == solo
    finally:
        eng.shutdown()


@pytest.mark.slow
def test_compact_forward_gives_transformers_tokens_alone_and_batched(int4, eager_tokens,
                                                                   no_compiler):
    eng = LLMEngine(int4, compile="on", telemetry=False)
    try:
        status = eng.wait_compiled(60)
        assert status.status == "ready" and status.ready == (1, 2, 4, 8, 16, 32)
        assert [eng.generate(p, GREEDY).token_ids for p in PROMPTS] == eager_tokens
        assert [o.token_ids for o in together(eng, PROMPTS)] == eager_tokens
        assert eng.compile_status().steps_compiled > 0
    finally:
        eng.shutdown()


@pytest.mark.slow
def test_bucket_padding_never_reaches_outputs_or_kv_accounting(int4, no_compiler):
    """3 requests run in bucket 4: the spare row writes only the scratch block, which the block
    manager never hands out, and each request's KV bytes equal the formula."""
    eng = LLMEngine(int4, compile="on", telemetry=False)
    ref = LLMEngine(int4, compile="off", telemetry=False)
    try:
        eng.wait_compiled(60)
        pool, backend = eng.runner.pool, eng.runner.backend
        assert eng.block_manager.stats().num_blocks == pool.num_blocks - 1
        assert backend.inputs.scratch_block == pool.num_blocks - 1
        sizes = []
        outs = together(eng, PROMPTS[:3], sizes=sizes)
        assert max(sizes) == 3 and (4, backend.width) in backend.buffers
        refs = together(ref, PROMPTS[:3])
        per_token = int4.spec.kv_bytes_per_token(pool.k[0].element_size())
        for o, r, p in zip(outs, refs, PROMPTS[:3]):
            assert o.token_ids == r.token_ids
            assert o.kv_cache_bytes == r.kv_cache_bytes
            tokens = len(encode_prompt(int4.tokenizer, p)) + len(o.token_ids) - 1
            assert o.kv_cache_bytes == per_token * tokens
        assert eng.stats().blocks_used == 0            # everything returned to the pool
    finally:
        eng.shutdown()
        ref.shutdown()


@pytest.mark.slow
def test_a_failed_compile_falls_back_to_eager_with_a_note(int4, eager_tokens, monkeypatch):
    def broken(fn, **kw):
        def call(*a, **k):
            raise RuntimeError("inductor: no C++ compiler found")
        return call

    monkeypatch.setattr(torch, "compile", broken)
    eng = LLMEngine(int4, compile="on", telemetry=False)
    try:
        status = eng.wait_compiled(60)
        assert status.status == "failed" and status.path == "eager"
        assert "no C++ compiler" in status.error
        assert eng.generate(PROMPTS[0], GREEDY).token_ids == eager_tokens[0]
        assert eng.compile_status().steps_compiled == 0
    finally:
        eng.shutdown()


@pytest.mark.slow
def test_compile_option_is_checked_and_other_architectures_stay_eager(int4):
    with pytest.raises(ValueError, match="compile must be one of"):
        LLMEngine(int4, compile="fast")
    eng = LLMEngine(int4, compile="on", kv_cache_dtype="fp8", telemetry=False)
    try:
        assert eng.compile_status().path == "eager"
        assert "fp8" in eng.batching_note
    finally:
        eng.shutdown()


@pytest.mark.slow
def test_torch_compile_matches_eager_and_is_batch_invariant(int4, eager_tokens):
    """The real inductor path, buckets 1 and 8 (minutes on 2 cores the first time, then from the
    on-disk cache): compiled greedy tokens equal eager's, or where they part the two tokens are
    within two bf16 roundings of a tie (at the logits' magnitude); 8 concurrent requests give
    exactly their solo tokens (prompts as rows of the shared graph, the default)."""
    eng = LLMEngine(int4, compile="on", compile_batch_sizes=(1, 8), telemetry=False)
    try:
        status = eng.wait_compiled(1500)
        assert status.status == "ready", status
        assert status.direct == (1, 8)     # both buckets called without Dynamo's frame hook
        solo = [eng.generate(p, GREEDY).token_ids for p in PROMPTS]
        equal = sum(a == b for a, b in zip(solo, eager_tokens))
        for p, a, b in zip(PROMPTS, eager_tokens, solo):
            if a != b:
                k = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
                ids = encode_prompt(int4.tokenizer, p) + a[:k]
                with torch.inference_mode():
                    logits = int4.model(input_ids=torch.tensor([ids]), logits_to_keep=1).logits[0, -1]
                gap = float(logits[a[k]] - logits[b[k]])
                # a bf16 logit's spacing at its magnitude (0.25 from 32 to 64): the prompt and
                # the answer so far went through the graph, not transformers' code, so a near-tie
                # can fall either way by a rounding or two
                ulp = 2.0 ** (math.floor(math.log2(abs(float(logits[a[k]])))) - 7)
                print(f"compiled parts from eager at token {k}: logit gap {gap:.3f} ({ulp} a step)")
                assert abs(gap) <= 2 * ulp, f"token {k}: gap {gap:.3f} is no rounding near-tie"
        # no count of equal answers is asserted: with prompts as graph rows the whole answer is
        # the graph's arithmetic, and 3 to 8 of these 8 prompts have given eager's 40 tokens
        # exactly; every parting above is checked to be a near-tie instead
        print(f"{equal} of {len(PROMPTS)} compiled answers equal eager's")
        assert [o.token_ids for o in together(eng, PROMPTS)] == solo
        assert eng.compile_status().steps_compiled > 0
    finally:
        eng.shutdown()


@pytest.mark.slow
def test_every_row_of_a_compiled_bucket_has_its_bits_alone(int4, monkeypatch):
    """The inductor graphs themselves, on K/V drawn at random (which makes rounding flips
    frequent): 320 rows run as 40 batch-8 steps, each row's logits bit-equal to that row run in
    the batch-1 graph; then a prompt prefilled as rows of the shared graph whole and in chunks
    of 7 tokens gives the same probabilities and tokens. Fails when a fused kernel sums a row in an order that depends on the
    bucket (inductor vectorized the norms across rows while the embedding lookup was fused into
    them: 6 of 304 rows differed, docs/compiled-decode.md); and prompt rows of several
    sequences in one call have the bits of their sequence's call alone. (The attention kernel's
    paired rows once broke that for 25 of 1,249 rows in 30 such trials with another seed; this
    test's 30 trials did not meet such a row on the old build: the kernel's own test,
    test_a_row_computed_in_a_pair_has_the_bits_of_the_row_alone, is the one that fails there.)"""
    from engine.worker.compiled import compiled_backend

    monkeypatch.setattr(compiled_backend, "PREFILL_ROWS", True)     # the default; not the environment's
    eng = LLMEngine(int4, compile="on", compile_batch_sizes=(1, 8), telemetry=False,
                    enable_prefix_caching=False)
    try:
        assert eng.wait_compiled(1500).status == "ready"
        runner = eng.runner.backend
        fwd, bs = runner.forward_fn, runner.inputs.block_size
        scratch = runner.inputs.scratch_block
        gen = torch.Generator().manual_seed(0)
        for pool in (*fwd.k_pool, *fwd.v_pool):     # nothing is cached: any K/V will do
            pool.copy_(torch.randn(pool.shape, generator=gen))
        per_row = -(-200 // bs)                    # each row its own blocks, below the scratch one
        assert 8 * per_row < scratch

        def run(toks, positions, firsts):
            bufs = runner.buffers[(8 if len(toks) > 1 else 1, runner.width)]
            bufs.slots.fill_(scratch * bs)
            bufs.blocks.fill_(scratch)
            bufs.lens.fill_(1)
            bufs.input_ids.zero_()
            bufs.position_ids.zero_()
            for j, (t, p, first) in enumerate(zip(toks, positions, firsts)):
                table = torch.arange(first, first + p // bs + 1)
                bufs.input_ids.view(-1)[j], bufs.position_ids.view(-1)[j] = t, p
                bufs.blocks[j, :len(table)] = table
                bufs.slots[j] = table[-1] * bs + p % bs
                bufs.lens[j] = p + 1
            runner._run(bufs)
            return bufs.logits[:len(toks)].clone()

        differing = 0
        for _ in range(40):
            toks = torch.randint(0, int4.model.config.vocab_size, (8,), generator=gen).tolist()
            positions = torch.randint(5, 200, (8,), generator=gen).tolist()
            firsts = [r * per_row for r in range(8)]
            batch = run(toks, positions, firsts)
            differing += sum(not torch.equal(batch[j], run([toks[j]], [positions[j]], [firsts[j]])[0])
                             for j in range(8))
        assert differing == 0, f"{differing} of 320 rows differ from the row alone"

        # prompt rows of several sequences in one call: each sequence's rows have the bits they
        # have in a call of their own (where the attention kernel pairs them differently)
        from engine.worker.input_builder import GraphRows

        def rows_of(seqs):
            cols = [[] for _ in range(5)]
            for first, cached, toks in seqs:
                table = list(range(first, first + -(-(cached + len(toks)) // bs)))
                for j, t in enumerate(toks):
                    p = cached + j
                    for col, x in zip(cols, (t, p, table[p // bs] * bs + p % bs, p + 1,
                                             table + [scratch] * (runner.width - len(table)))):
                        col.append(x)
            ids, pos = (torch.tensor([c], dtype=torch.long).view(-1) for c in cols[:2])  # as InputBuilder.rows
            slots, lens, blocks = (torch.tensor(c, dtype=torch.long) for c in cols[2:])
            return GraphRows(ids, pos, slots, blocks, lens, torch.arange(len(cols[0])), len(cols[0]))

        differing = total = 0
        for _ in range(30):
            seqs = []
            for s in range(int(torch.randint(2, 6, (1,), generator=gen))):
                n = int(torch.randint(2, 20, (1,), generator=gen))
                seqs.append((s * per_row, int(torch.randint(0, 80, (1,), generator=gen)),
                             torch.randint(0, int4.model.config.vocab_size, (n,), generator=gen).tolist()))
            together, at = eng.call(lambda _: runner.run_rows(rows_of(seqs))).result(), 0
            for seq in seqs:
                alone = eng.call(lambda _: runner.run_rows(rows_of([seq]))).result()
                differing += sum(not torch.equal(alone[j], together[at + j]) for j in range(len(seq[2])))
                total, at = total + len(seq[2]), at + len(seq[2])
        assert differing == 0, f"{differing} of {total} prompt rows differ from their sequence alone"

        # prompts run as rows of the same graph: however a prompt is cut into chunks, its first
        # token's probabilities and its greedy tokens are the same bits
        backend_calls = []
        run_rows = runner.run_rows
        runner.run_rows = lambda rows: backend_calls.append(rows.used) or run_rows(rows)
        whole = eng.submit(PROMPTS[7], GREEDY)
        whole.result(600)
        eng.scheduler.max_num_batched_tokens = 7   # chunks of 7 tokens (alone, a prompt is not capped)
        cut = eng.submit(PROMPTS[7], GREEDY)
        cut.result(600)
        assert not runner.rows_error and max(backend_calls) > 7 and 7 in backend_calls
        assert eng.compile_status().prompts == "rows"
        assert cut.output.token_ids == whole.output.token_ids
        assert [e.top_candidates[0].logprob for e in cut.events] == \
            [e.top_candidates[0].logprob for e in whole.events]
    finally:
        eng.shutdown()


def test_inductor_caches_go_to_the_playground_cache_unless_told_otherwise(monkeypatch, tmp_path):
    """torch sets $TORCHINDUCTOR_CACHE_DIR to its /tmp default once inductor runs; that default
    gives way to the playground's cache folder, a folder the user chose does not."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir

    from engine.worker.compiled.compiled_backend import inductor_cache_dir

    monkeypatch.setenv("LLM_PLAYGROUND_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    assert inductor_cache_dir() == str(tmp_path / "cache" / "inductor")
    assert cache_dir() == str(tmp_path / "cache" / "inductor")   # what inductor itself reads
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert inductor_cache_dir() == str(tmp_path / "mine")


@pytest.mark.slow
def test_a_prefix_cache_hit_gives_the_same_logits(int4):
    """The second run of a prompt finds all but its last token in the prefix cache, so that
    token is computed alone instead of inside the prefill: the attention kernel gives it the
    same bits, so the probabilities and greedy tokens are the same (they were not with SDPA)."""
    eng = LLMEngine(int4, compile="off", telemetry=False)
    try:
        first = eng.submit(PROMPTS[2], GREEDY)
        first.result(600)
        again = eng.submit(PROMPTS[2], GREEDY)
        again.result(600)
        assert again.events[0].cached_tokens > 0 and again.events[0].num_tokens == 1
        assert again.output.token_ids == first.output.token_ids
        assert [e.top_candidates[0].logprob for e in again.events] == \
            [e.top_candidates[0].logprob for e in first.events]
    finally:
        eng.shutdown()


@pytest.mark.slow
def test_decode_rows_of_a_mixed_step_run_in_the_compiled_graph(int4, no_compiler, monkeypatch):
    """Staggered requests: while one is prefilled, the others' decode rows still go through
    the bucket's graph (not transformers' code), so every output token of a request comes
    from one path and the answers equal the solo ones."""
    from engine.worker.compiled.compiled_backend import is_decode_row
    from engine.worker.input_builder import InputBuilder

    eng = LLMEngine(int4, compile="on", telemetry=False)
    eager_decode_rows = []
    plain = InputBuilder.packed      # every packed (eager) pass's inputs are built here

    def spy(self, entries):
        eager_decode_rows.extend(e for e in entries if is_decode_row(e))
        return plain(self, entries)

    try:
        eng.wait_compiled(60)
        solo = [eng.generate(p, GREEDY).token_ids for p in PROMPTS[:4]]
        monkeypatch.setattr(InputBuilder, "packed", spy)
        before = eng.compile_status().steps_compiled
        sizes = []
        outs = together(eng, PROMPTS[:4], stagger_s=0.05, sizes=sizes)
        assert [o.token_ids for o in outs] == solo
        assert max(sizes) > 1 and eager_decode_rows == []
        assert eng.compile_status().steps_compiled > before
    finally:
        eng.shutdown()


@pytest.mark.slow
def test_the_status_says_which_attention_runs(int4, monkeypatch):
    eng = LLMEngine(int4, compile="off", telemetry=False)
    try:
        assert eng.compile_status().attention == "kernel"
    finally:
        eng.shutdown()
    from engine.worker.kernels import decode_attention as kernel

    monkeypatch.setattr(kernel, "_state", {"error": "no C compiler (cc, gcc or $CC)"})
    eng = LLMEngine(int4, compile="off", telemetry=False)
    try:
        status = eng.compile_status()
        assert status.attention == "sdpa" and "no C compiler" in status.attention_note
        assert eng.generate(PROMPTS[0], GREEDY).token_ids   # still serves, on SDPA
    finally:
        eng.shutdown()


@pytest.mark.slow
def test_verification_passes_run_in_the_compiled_graph(int4, no_compiler, monkeypatch):
    """Speculative decoding on the compiled path: a pass verifying ``k`` drafts is ``k + 1``
    rows of the bucket graph (none goes through transformers' code), drafts are accepted, and
    the greedy tokens equal plain decoding's, alone and beside a second request."""
    from engine.experiments.speculative import PROMPTS as SPEC_PROMPTS
    from engine.worker.input_builder import InputBuilder

    eng = LLMEngine(int4, compile="on", telemetry=False)
    backend = eng.runner.backend
    eager_verify, buckets = [], []
    plain, compiled = InputBuilder.packed, backend.buffers_for

    def spy(self, entries):
        eager_verify.extend(e for e in entries if e.draft_ids)
        return plain(self, entries)

    def spy_compiled(entries):
        if any(e.draft_ids for e in entries):
            buckets.append((sum(1 + len(e.draft_ids) for e in entries),
                            backend.bucket(entries)[0]))
        return compiled(entries)

    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    copy = SPEC_PROMPTS["copy-heavy"]
    try:
        eng.wait_compiled(60)
        want = eng.generate(copy, params).token_ids
        other = eng.generate(PROMPTS[1], params).token_ids
        monkeypatch.setattr(InputBuilder, "packed", spy)
        monkeypatch.setattr(backend, "buffers_for", spy_compiled)
        h = eng.submit(copy, params, speculative="ngram", num_speculative_tokens=3)
        assert h.result(600).token_ids == want
        assert h.result().speculative["mean_accepted_length"] > 0
        pair = [eng.submit(copy, params, speculative="ngram", num_speculative_tokens=3),
                eng.submit(PROMPTS[1], params)]
        assert [p.result(600).token_ids for p in pair] == [want, other]
        assert eager_verify == []
        assert buckets and all(rows <= b for rows, b in buckets)
        assert (4, 4) in buckets      # one sequence verifying 3 drafts: 4 rows, bucket 4
    finally:
        eng.shutdown()


@pytest.mark.slow
def test_without_dynamos_cache_entries_the_buckets_run_through_its_hook(int4, eager_tokens,
                                                                        monkeypatch):
    """The direct call reads a private Dynamo API: where it is missing, compiling still
    succeeds and steps go through Dynamo's frame hook, with the same tokens as direct calls."""
    import torch._dynamo.eval_frame as eval_frame

    def missing(code):
        raise AttributeError("no cache entries here")

    direct = LLMEngine(int4, compile="on", compile_batch_sizes=(1,), telemetry=False)
    try:
        assert direct.wait_compiled(1500).direct == (1,)
        want = direct.generate(PROMPTS[1], GREEDY).token_ids
    finally:
        direct.shutdown()
    monkeypatch.setattr(eval_frame, "_debug_get_cache_entry_list", missing)
    eng = LLMEngine(int4, compile="on", compile_batch_sizes=(1,), telemetry=False)
    try:
        status = eng.wait_compiled(1500)
        assert status.status == "ready" and status.direct == ()
        assert eng.generate(PROMPTS[1], GREEDY).token_ids == want
        assert eng.compile_status().steps_compiled > 0
    finally:
        eng.shutdown()


def test_the_layers_halves_are_traced_once_for_every_layer(int4, monkeypatch):
    """With regions (the default), Dynamo's graph calls two subgraphs, each once per layer, and
    holds no layer's norms itself: inductor generates one layer, not 30 (the cold compile's
    cost, docs/performance.md "Bucket 1 within a minute"). Inlined, the graph calls none and
    holds every norm. Both give the eager forward's hidden states bit for bit."""
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)    # the runner's own stays eager
    eng = LLMEngine(int4, compile="on", compile_batch_sizes=(1,), telemetry=False)
    try:
        runner = eng.runner.backend
        fwd = runner.forward_fn
        bufs = runner.inputs.new_static(4, runner.width)
        bs = runner.inputs.block_size
        for j in range(4):
            bufs.input_ids.view(-1)[j], bufs.position_ids.view(-1)[j] = 100 + j, j
            bufs.blocks[j, 0] = 0
            bufs.slots[j] = j
            bufs.lens[j] = j + 1
        assert bs > 4
        args = runner._args(bufs)
        with torch.inference_mode():
            want = fwd.hidden_states(*args)
        layers = len(fwd.layers)
        for regions, calls, subgraphs, norms in ((True, 2 * layers, 2, 1),
                                                 (False, 0, 0, 2 * layers + 1)):
            graphs = []

            def capture(gm, example_inputs):
                graphs.append(gm)
                return gm.forward

            monkeypatch.setattr(fwd, "regions", regions)
            torch._dynamo.reset()
            with torch.inference_mode():
                got = real_compile(fwd.hidden_states, backend=capture, fullgraph=True)(*args)
            assert torch.equal(got, want)
            (gm,) = graphs
            invoked = [n for n in gm.graph.nodes
                       if n.target is torch.ops.higher_order.invoke_subgraph]
            assert len(invoked) == calls
            assert len({n.args[0].target for n in invoked}) == subgraphs
            assert sum(n.target is torch.rsqrt for n in gm.graph.nodes) == norms
            attention = [n for n in gm.graph.nodes if "attention" in str(n.target)]
            assert len(attention) == layers          # the op that writes the pool stays outside
    finally:
        torch._dynamo.reset()
        eng.shutdown()
