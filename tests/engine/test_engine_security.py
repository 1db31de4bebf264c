"""Engine-side hardening: end tokens, penalties that spare special tokens, tiny temperatures,
validation that names the field, per-user prefix-cache salts, and errors without tracebacks."""

import logging

import pytest

from engine import SamplingParams
from engine.core.block_manager import BlockManager
from engine.model.prompt import encode_prompt


# ---- end tokens ----------------------------------------------------------------------------
def test_endoftext_and_im_end_both_end_generation(loaded):
    vocab = loaded.tokenizer.get_vocab()
    assert vocab["<|endoftext|>"] == 0
    assert {0, vocab["<|im_end|>"]} <= loaded.eos_token_ids
    assert (0, "<|endoftext|>") in loaded.info.eos_tokens


def test_id_0_ends_generation(engine):
    # the model rarely picks id 0 by itself: make the sampler return it, as a model could
    import engine.worker.sampler as sampler_mod

    real = sampler_mod.Sampler.sample_many

    def force_zero(self, logits, params, generators, context):
        out = real(self, logits, params, generators, context)
        for r in out:
            if not isinstance(r, Exception):
                r.token_id = 0
        return out

    sampler_mod.Sampler.sample_many = force_zero
    try:
        out = engine.generate("Hello", SamplingParams(temperature=0, max_tokens=20))
    finally:
        sampler_mod.Sampler.sample_many = real
    assert out.token_ids == [0]
    assert out.finish_reason == "stop" and out.stop_reason == 0


# ---- penalties never touch end and template tokens ------------------------------------------
def test_three_turn_chat_with_penalty_1_3_ends_by_itself(engine, loaded):
    chat = [{"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is Paris."},
            {"role": "user", "content": "And of Germany?"},
            {"role": "assistant", "content": "The capital of Germany is Berlin."},
            {"role": "user", "content": "And of Italy?"}]
    out = engine.generate(chat, SamplingParams(temperature=0, repetition_penalty=1.3,
                                               max_tokens=120))
    assert out.finish_reason == "stop", out.text
    assert out.token_ids[-1] in loaded.eos_token_ids
    assert len(out.token_ids) < 120


def test_penalty_spares_exempt_ids():
    import torch

    from engine.worker.sampler import apply_penalties

    logits = torch.tensor([2.0, 2.0, -1.0, 3.0])
    exempt = torch.tensor([True, False, False, False])
    p = SamplingParams(repetition_penalty=2.0, frequency_penalty=1.0)
    ctx = torch.tensor([0, 1, 2, 0])
    out = apply_penalties(logits, p, ctx, ctx, exempt)
    assert out[0] == 2.0  # exempt: untouched by repetition and frequency penalties
    assert out[1] == pytest.approx(2.0 / 2.0 - 1.0)
    assert out[2] == pytest.approx(-1.0 * 2.0 - 1.0)
    assert out[3] == 3.0
    # a request's own stop token ids are exempt too
    p2 = SamplingParams(repetition_penalty=2.0, stop_token_ids=[1])
    out2 = apply_penalties(logits, p2, ctx, ctx, None)
    assert out2[1] == 2.0 and out2[0] == 1.0


# ---- tiny temperatures ----------------------------------------------------------------------
@pytest.mark.parametrize("t", [1e-37, 1e-45, 5e-324, 1e-6])
def test_tiny_temperature_is_greedy(engine, t):
    greedy = engine.generate("Count: one, two,", SamplingParams(temperature=0, max_tokens=8),
                             raw=True)
    tiny = engine.generate("Count: one, two,", SamplingParams(temperature=t, max_tokens=8, seed=1),
                           raw=True)
    assert tiny.finish_reason in ("stop", "length"), tiny.error
    assert tiny.token_ids == greedy.token_ids


# ---- validation names the field -------------------------------------------------------------
@pytest.mark.parametrize("kwargs, field", [
    (dict(stop=[1, 2]), "stop"),
    (dict(stop=5), "stop"),
    (dict(stop_token_ids="2"), "stop_token_ids"),
    (dict(temperature=10 ** 400), "temperature"),
    (dict(top_p=10 ** 400), "top_p"),
])
def test_params_refused_naming_the_field(kwargs, field):
    with pytest.raises(ValueError) as err:
        SamplingParams(**kwargs)
    assert str(err.value).startswith(field)
    assert len(str(err.value)) < 200


@pytest.mark.fast
def test_lone_surrogate_refused(loaded):
    with pytest.raises(ValueError, match="^prompt holds an invalid character"):
        encode_prompt(loaded.tokenizer, "hi \ud800 there")
    with pytest.raises(ValueError, match="^prompt holds"):
        encode_prompt(loaded.tokenizer, "hi \udfff", raw=True)
    with pytest.raises(ValueError, match="^system_prompt holds"):
        encode_prompt(loaded.tokenizer, [{"role": "system", "content": "\ud800"},
                                         {"role": "user", "content": "hi"}])


def test_non_string_system_prompt_refused(loaded):
    with pytest.raises(ValueError, match="^system_prompt must be a string, got int"):
        encode_prompt(loaded.tokenizer, [{"role": "system", "content": 5},
                                         {"role": "user", "content": "hi"}])


# ---- prefix-cache salts ---------------------------------------------------------------------
def test_salted_blocks_are_not_shared():
    bm = BlockManager(16, 4)
    prompt = list(range(100, 113))  # 3 full blocks + 1 token
    table, cached, _ = bm.allocate(prompt, 64, salt="alice")
    bm.register_full_blocks(table, prompt, len(prompt), 0, salt="alice")
    bm.free(table)
    for salt in ("bob", None):
        t, cached, _ = bm.allocate(prompt, 64, salt=salt)
        assert cached == 0
        bm.free(t)
    t, cached, _ = bm.allocate(prompt, 64, salt="alice")
    assert cached == 12
    bm.free(t)


def test_engine_salt_isolates_prefix_hits(engine):
    system = "You are a careful assistant. " * 12  # well over a few blocks
    chat = [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
    bm = engine.block_manager

    def hits_of(salt):
        before = bm.hit_tokens
        out = engine.generate(chat, SamplingParams(temperature=0, max_tokens=2), cache_salt=salt)
        assert out.finish_reason in ("stop", "length")
        return bm.hit_tokens - before

    hits_of("user-a")
    assert hits_of("user-b") == 0  # another user's identical prompt: no hit, no timing signal
    assert hits_of("user-a") >= 48  # the same user's second request reuses its own blocks


def test_cache_salt_must_be_a_string(engine):
    with pytest.raises(ValueError, match="^cache_salt"):
        engine.submit("hi", SamplingParams(max_tokens=1), cache_salt=5)


# ---- unexpected errors: a short message for the client, the traceback in the log ------------
def test_unexpected_exception_reaches_client_without_traceback(engine, caplog, monkeypatch):
    import engine.worker.sampler as sampler_mod

    def boom(*a, **k):
        raise KeyError("/secret/server/path.py")

    monkeypatch.setattr(sampler_mod.Sampler, "sample_many", boom)
    monkeypatch.setattr(sampler_mod.Sampler, "sample", boom)
    with caplog.at_level(logging.ERROR, logger="engine"):
        out = engine.generate("Hello", SamplingParams(temperature=0, max_tokens=4))
    assert out.finish_reason == "error"
    assert "Traceback" not in out.error and "/secret" not in out.error and 'File "' not in out.error
    assert out.request_id in out.error and "KeyError" in out.error
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert out.request_id in logged
    assert any(r.exc_info for r in caplog.records)
    assert engine.stats().running == 0
