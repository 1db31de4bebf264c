"""A stop string inside a speculative step is honoured even when the same step also accepts
EOS: the step's tokens are checked in order and the first stop (string, token or EOS) wins,
so speculative greedy output equals plain greedy output for every k."""

import pytest

from engine import SamplingParams

CASES = [
    ("Say exactly this sentence and nothing more: The cat sat on a mat.", "mat."),
    ("Say exactly this sentence and nothing more: The cat sat on a mat.", "."),
    ("Say exactly this sentence and nothing more: The dog ran in the park.", "park."),
    ("Say exactly this sentence and nothing more: The dog ran in the park.", "the"),
]


@pytest.fixture(scope="module")
def plain(engine):
    return {c: engine.generate(c[0], SamplingParams(temperature=0, max_tokens=60, stop=[c[1]]),
                               speculative=False) for c in CASES}


@pytest.mark.parametrize("k", range(1, 7))
def test_speculative_stop_string_matches_plain_decoding(engine, plain, k):
    for prompt, stop in CASES:
        ref = plain[(prompt, stop)]
        out = engine.generate(prompt, SamplingParams(temperature=0, max_tokens=60, stop=[stop]),
                              speculative="ngram", num_speculative_tokens=k)
        where = f"k={k} stop={stop!r}"
        assert out.text == ref.text, where
        assert stop not in out.text, where
        assert out.token_ids == ref.token_ids, where
        assert out.finish_reason == ref.finish_reason, where
        assert out.stop_reason == ref.stop_reason, where
        assert "".join(out.deltas) == out.text, where
