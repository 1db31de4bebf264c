"""Speculative decoding with a draft model (``speculative="draft"``), no downloads: a seeded
random 2-layer draft built from the embedded model's config, and a copy of the target itself.

Greedy tokens equal plain greedy ones whatever the draft proposes; the copy's drafts are all
accepted, which shows its cache is fed and cropped right; aborting frees the draft's cache; a
draft with another vocabulary is refused; the CLI reports method ``draft``.
"""

import copy
import json
import os
import subprocess
import sys

import pytest
import torch

from engine import LLMEngine, SamplingParams
from engine.config import EngineConfig
from engine.spec_decode.draft_loader import check_same_vocabulary, load_draft_model
from tests.support.paths import REPO

ROOT = str(REPO)
PROMPTS = {
    "english": ("Explain the KV cache in one sentence.", False),
    "chinese": ("写一首关于程序员加班的短诗。", False),
    "code": ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", True),
}
N = 32
K = 4


def random_draft(loaded, folder, layers=2, vocab_size=None, seed=0):
    """Save a seeded random ``layers``-layer model of the target's config (and its
    tokenizer) to ``folder``; returns the folder as a string."""
    from transformers import AutoModelForCausalLM

    cfg = copy.deepcopy(loaded.model.config)
    cfg.num_hidden_layers = layers
    if vocab_size is not None:
        cfg.vocab_size = vocab_size
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def draft_dir(loaded, tmp_path_factory):
    return random_draft(loaded, tmp_path_factory.mktemp("draft2"))


@pytest.fixture(scope="module")
def draft_engine(loaded, draft_dir):
    eng = LLMEngine(loaded, draft_model=draft_dir, speculative="draft",
                    num_speculative_tokens=K)
    yield eng
    eng.shutdown()


@pytest.mark.parametrize("name", list(PROMPTS))
def test_greedy_draft_tokens_equal_plain_greedy(draft_engine, name):
    p, raw = PROMPTS[name]
    greedy = SamplingParams(temperature=0, max_tokens=N)
    plain = draft_engine.generate(p, greedy, raw=raw, speculative=False)
    handle = draft_engine.submit(p, greedy, raw=raw)   # the engine's default: "draft"
    evs = list(handle)
    out = handle.output
    assert out.token_ids == plain.token_ids and out.text == plain.text
    s = out.speculative
    assert s["method"] == "draft" and s["drafted"] > 0 and s["accepted"] <= s["drafted"]
    assert [e.token_id for e in evs] == out.token_ids
    assert sum(e.draft_accepted for e in evs) == s["accepted"]
    # a random draft is rarely right: drafting pauses on low acceptance, as for n-grams
    if len(out.token_ids) == N and s["acceptance_rate"] < 0.3:
        assert s["paused_steps"] > 0
    assert handle.request_id not in draft_engine.drafter.caches   # freed when it finished


def test_sampling_with_draft_is_seeded_and_reports_draft(draft_engine):
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=16, seed=7)
    a = draft_engine.generate("Tell me about the sea.", params)
    b = draft_engine.generate("Tell me about the sea.", params)
    assert a.token_ids == b.token_ids and len(a.token_ids) > 0
    assert a.speculative["method"] == "draft" and a.speculative["drafted"] > 0


def test_draft_cache_crop_matches_a_fresh_pass(loaded, draft_dir):
    """After a partial or full acceptance the cropped cache proposes what a fresh cache
    does, and holds the sequence plus ``k - 1`` drafts."""
    prop = load_draft_model(draft_dir, loaded)
    ids = loaded.tokenizer.encode("The cat sat on the mat and then it")
    d = prop.propose("r", ids, K)
    assert len(d) == K and prop.cached_tokens("r") == len(ids) + K - 1
    other = (d[1] + 1) % loaded.model.config.vocab_size
    for nxt in (ids + d[:1] + [other], ids + d + [d[0]], ids + [(d[0] + 1) % loaded.model.config.vocab_size]):
        got = prop.propose("r", nxt, K)
        assert got == prop.propose(f"fresh-{len(nxt)}", nxt, K)
        assert prop.cached_tokens("r") == len(nxt) + K - 1 == len(prop.caches["r"].ids)
    assert prop.cache_bytes() > 0
    assert prop.release("r") and not prop.release("r")
    assert "r" not in prop.caches


def test_identical_copy_accepts_every_draft(loaded, tmp_path):
    """A draft that is the target: every draft is accepted at temperature 0 (the last step
    may fall short at max_tokens or a stop token), so its cache matches the sequence."""
    folder = tmp_path / "copy"
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    eng = LLMEngine(loaded, draft_model=str(folder), num_speculative_tokens=K)
    try:
        greedy = SamplingParams(temperature=0, max_tokens=N)
        for name in ("english", "code"):
            p, raw = PROMPTS[name]
            plain = eng.generate(p, greedy, raw=raw, speculative=False)
            out = eng.generate(p, greedy, raw=raw, speculative="draft")
            s = out.speculative
            assert out.token_ids == plain.token_ids, name
            assert s["drafted"] - s["accepted"] <= K, s
            assert s["accepted"] >= s["drafted"] - K and s["tokens_per_step"] > 3, s
        mem = eng.memory_snapshot()
        assert mem is None or any("draft model" in n for n in mem.notes)
    finally:
        eng.shutdown()


def test_abort_frees_the_draft_cache(draft_engine):
    handle = draft_engine.submit("Write a long story about a lighthouse keeper.",
                                 SamplingParams(temperature=0, max_tokens=200, ignore_eos=True))
    it = iter(handle)
    for _ in range(3):
        next(it)
    assert draft_engine.drafter.cached_tokens(handle.request_id) > 0
    handle.abort()
    out = handle.result()
    assert out.finish_reason == "abort"
    assert handle.request_id not in draft_engine.drafter.caches


def test_mismatched_vocabulary_is_refused(loaded, tmp_path):
    folder = random_draft(loaded, tmp_path / "small_vocab", vocab_size=1000)
    with pytest.raises(ValueError, match="different vocabulary.*vocab_size 1000"):
        LLMEngine(loaded, draft_model=folder, speculative="draft")

    class OtherTokenizer:
        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

    with pytest.raises(ValueError, match="different tokenizer"):
        check_same_vocabulary("other", 10, 10, OtherTokenizer(), loaded.tokenizer)


@pytest.mark.fast
def test_draft_needs_a_draft_model(engine):
    with pytest.raises(ValueError, match="draft_model"):
        EngineConfig(speculative="draft")
    with pytest.raises(ValueError, match="draft_model"):
        engine.submit("Hi", SamplingParams(max_tokens=2), speculative="draft")


def test_cli_generate_with_draft_model(draft_dir):
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, "-m", "engine", "generate", "--prompt",
                        "Explain the KV cache in one sentence.", "--temperature", "0",
                        "--max-tokens", "12", "--speculative", "draft", "--draft-model",
                        draft_dir, "--num-speculative-tokens", "3", "--json"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["speculative"]
    assert s["method"] == "draft" and s["num_speculative_tokens"] == 3 and s["drafted"] > 0
    bad = subprocess.run([sys.executable, "-m", "engine", "generate", "--prompt", "x",
                          "--speculative", "draft"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and "needs --draft-model" in bad.stderr


def test_low_acceptance_pauses_the_draft_model_and_a_failure_turns_it_off():
    """The pause of :class:`SpecState` applies to draft-model drafting: while paused no draft
    pass runs; a draft pass that raises turns drafting off for the request."""
    from engine.spec_decode.config import SpeculativeConfig
    from engine.spec_decode.draft_proposer import RequestDrafter
    from engine.spec_decode.spec_state import SpecState, spec_state_for

    class CountingDrafter:
        calls = 0
        error = ""

        def propose(self, token_ids, k):
            self.calls += 1
            return [0] * k

    drafter = CountingDrafter()
    state = SpecState(SpeculativeConfig("draft", 4), drafter=drafter)
    for _ in range(4):   # a window of rejected drafts
        assert state.propose([1, 2, 3], 4) == [0, 0, 0, 0]
        state.record(4, 0, 1)
    assert state.paused
    calls = drafter.calls
    for _ in range(8):
        assert state.propose([1, 2, 3], 4) == []
    assert drafter.calls == calls and state.paused_steps == 8
    assert state.summary()["method"] == "draft"

    class Broken:
        name = "broken"

        def propose(self, request_id, token_ids, k):
            raise RuntimeError("out of memory")

        def release(self, request_id):
            return False

    failing = SpecState(SpeculativeConfig("draft", 2), drafter=RequestDrafter(Broken(), "r"))
    assert failing.propose([1, 2], 2) == [] and "out of memory" in failing.off_reason
    with pytest.raises(ValueError, match="draft_model"):
        spec_state_for(EngineConfig(), None, "draft", None, True)
