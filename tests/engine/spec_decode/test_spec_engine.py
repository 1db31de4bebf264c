"""Speculative decoding on the embedded model: greedy tokens equal plain greedy tokens, in
continuous batching too, with the acceptance figures, events and KV bytes it reports."""

import pytest

from engine import SamplingParams
from tests.support.paths import REPO

CODE = '''def add_numbers(a, b):
    """Return the sum of a and b."""
    resutl = a + b
    return resutl


def multiply(a, b):
    """Return the product of a and b."""
    return a * b
'''
COPY = "Fix the typo in this code and print the whole code again:\n\n" + CODE
QUOTE = ("Summarise this text, quoting its key sentence: \"The tide came in slowly over the "
         "grey stones while the keeper counted the ships. Each evening he wrote the wind, the "
         "clouds and the colour of the water in his log.\"")
PROMPTS = {
    "copy": (COPY, False),
    "quote": (QUOTE, False),
    "english": ("Explain the KV cache in one sentence.", False),
    "chinese": ("写一首关于程序员加班的短诗。", False),
    "code": ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", True),
    "list": ("List five fruits and describe each one briefly.", False),
    "eos_early": ("Reply with exactly one word: yes or no. Is water wet?", False),
    "repeat": ("Repeat this line three times: the cat sat on the mat.", False),
}
N = 48


@pytest.fixture(scope="module")
def plain(engine):
    return {name: engine.generate(p, SamplingParams(temperature=0, max_tokens=N), raw=raw,
                                  speculative=False)
            for name, (p, raw) in PROMPTS.items()}


@pytest.mark.parametrize("name", list(PROMPTS))
def test_greedy_speculative_tokens_equal_plain_greedy(engine, plain, name):
    p, raw = PROMPTS[name]
    handle = engine.submit(p, SamplingParams(temperature=0, max_tokens=N), raw=raw,
                           speculative="ngram", num_speculative_tokens=4)
    evs = list(handle)
    out = handle.output
    assert out.token_ids == plain[name].token_ids
    assert out.text == plain[name].text
    s = out.speculative
    assert s["method"] == "ngram" and s["accepted"] <= s["drafted"]
    assert s["decode_passes"] <= len(out.token_ids) - 1
    if name == "copy":  # the answer copies the prompt: drafts are accepted, passes are saved
        assert s["accepted"] > 0 and s["tokens_per_step"] > 1.2
        assert s["decode_passes"] < len(out.token_ids) - 1
    # the stream: one event per token, accepted drafts marked, tokens per step consistent
    assert [e.token_id for e in evs] == out.token_ids
    assert sum(e.draft_accepted for e in evs) == s["accepted"]
    for e in evs:
        assert e.tokens_in_step >= 1 and (e.num_drafted > 0 or e.tokens_in_step == 1)
        assert not e.draft_accepted or e.num_drafted > 0


def test_verification_shares_steps_with_plain_requests(engine, plain):
    """Continuous batching: requests that speculate and requests that do not share forward
    passes, and each gets the tokens it gets alone; every block returns afterwards."""
    greedy = SamplingParams(temperature=0, max_tokens=N)
    handles = {
        "copy": engine.submit(COPY, greedy, speculative="ngram"),
        "list": engine.submit(PROMPTS["list"][0], greedy, speculative=False),
        "quote": engine.submit(QUOTE, greedy, speculative="ngram"),
    }
    events = {k: list(h) for k, h in handles.items()}
    for k, h in handles.items():
        assert h.output.token_ids == plain[k].token_ids, k
    plain_id = handles["list"].request_id
    mixed = [e for e in events["copy"] + events["quote"]
             if e.num_drafted and plain_id in e.batch.request_ids]
    assert mixed, "no step verified drafts beside a plain decode"
    assert engine.block_manager.stats().used == 0


def test_stop_string_inside_a_verified_step(engine):
    params = SamplingParams(temperature=0, max_tokens=N, stop=["multiply"])
    a = engine.generate(COPY, params, speculative=False)
    b = engine.generate(COPY, params, speculative="ngram")
    assert a.finish_reason == b.finish_reason == "stop"
    assert b.text == a.text and "multiply" not in b.text
    assert b.token_ids == a.token_ids


def test_seeded_sampling_with_speculation_is_reproducible(engine):
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=N, seed=11)
    a = engine.generate(COPY, params, speculative="ngram")
    b = engine.generate(COPY, params, speculative="ngram")
    assert a.token_ids == b.token_ids and a.speculative == b.speculative
    assert a.speculative["drafted"] > 0


def test_kv_bytes_count_only_kept_tokens_and_bad_input_is_refused(engine):
    out = engine.generate(COPY, SamplingParams(temperature=0, max_tokens=N),
                          speculative="ngram")
    per_token = engine.pool.bytes_per_token
    assert out.kv_cache_bytes == per_token * (len(out.prompt_token_ids) + len(out.token_ids) - 1)
    with pytest.raises(ValueError, match="speculative"):
        engine.submit("hi", speculative="medusa")
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        engine.submit("hi", speculative="ngram", num_speculative_tokens=-1)
    pen = engine.generate("Say hi.", SamplingParams(temperature=0, max_tokens=4,
                                                    repetition_penalty=1.3), speculative="ngram")
    assert pen.speculative["drafted"] == 0 and "penalties" in pen.speculative["off_reason"]
    assert engine.generate("Say hi.", SamplingParams(max_tokens=2)).finished_ok


@pytest.mark.slow
def test_cli_generate_speculative_json():
    import json
    import os
    import subprocess
    import sys

    root = str(REPO)
    r = subprocess.run([sys.executable, "-m", "engine", "generate", "--prompt", COPY,
                        "--temperature", "0", "--max-tokens", "24", "--speculative", "ngram",
                        "--num-speculative-tokens", "3", "--json"],
                       cwd=root, env=dict(os.environ, HF_HUB_OFFLINE="1"), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["speculative"]
    for key in ("drafted", "accepted", "acceptance_rate", "tokens_per_step"):
        assert key in s
    assert s["num_speculative_tokens"] == 3 and 0 <= s["accepted"] <= s["drafted"]
    bad = subprocess.run([sys.executable, "-m", "engine", "generate", "--prompt", "hi",
                          "--speculative", "ngram", "--num-speculative-tokens", "0"],
                         cwd=root, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "num_speculative_tokens" in bad.stderr
    assert "Traceback" not in bad.stderr
