"""Beam search on the embedded model (fp32, CPU) against Hugging Face ``generate(num_beams=k)``.

The engine's beams are forked sequences sharing KV blocks with copy-on-write; Hugging Face
reorders a dense cache. Same prompt ids, same EOS ids, so the best beam's tokens must match.
Where they differ, the test shows both answers' scores under Hugging Face's own scoring (a tie
within fp32 rounding is reported as such, anything larger fails as a bug).
"""

import pytest
import torch

from engine import SamplingParams
from engine.model.prompt import encode_prompt

from tests.support.prompts import PARITY_PROMPTS as ENGINE_PARITY_PROMPTS

# the greedy parity prompts, less the 1,000-token one (beams multiply its cost by k)
PROMPTS = {k: v for k, v in ENGINE_PARITY_PROMPTS.items() if k != "long_1000"}
NEW_TOKENS = 12


def hf_beams(loaded, prompt_ids, k, n_new, **kw):
    """Hugging Face's beam search: (best beam's generated ids, its score, all returned)."""
    ids = torch.tensor([prompt_ids])
    n_ret = kw.pop("num_return_sequences", 1)
    with torch.inference_mode():
        out = loaded.model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, num_beams=k,
            max_new_tokens=n_new, eos_token_id=sorted(loaded.eos_token_ids),
            pad_token_id=loaded.tokenizer.pad_token_id or 0, output_scores=True,
            return_dict_in_generate=True, num_return_sequences=n_ret, **kw)
    seqs = [s[len(prompt_ids):].tolist() for s in out.sequences]
    return seqs, out.sequences_scores.tolist()


def hf_score(loaded, prompt_ids, gen_ids, length_penalty=1.0):
    """Hugging Face's score of one finished answer: sum of log-softmax / len ** penalty."""
    ids = torch.tensor([prompt_ids + gen_ids])
    with torch.inference_mode():
        logits = loaded.model(ids).logits[0, len(prompt_ids) - 1:-1].float()
    lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(gen_ids)[:, None]).sum().item()
    return lp / len(gen_ids) ** length_penalty


def check(loaded, name, prompt_ids, got, want, want_score, length_penalty=1.0):
    if got.token_ids == want[0]:
        assert got.outputs[0].score == pytest.approx(want_score[0], abs=2e-4)
        return
    ours = hf_score(loaded, prompt_ids, got.token_ids, length_penalty)
    theirs = hf_score(loaded, prompt_ids, want[0], length_penalty)
    assert abs(ours - theirs) < 1e-4, (
        f"{name}: beams differ: engine {got.token_ids} scores {ours:.6f}, Hugging Face "
        f"{want[0]} scores {theirs:.6f} (a gap that large is not a tie)")


@pytest.fixture(scope="module")
def prompt_ids(loaded):
    return {name: encode_prompt(loaded.tokenizer, p, raw=raw) for name, (p, raw) in PROMPTS.items()}


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 4, 8])
@pytest.mark.parametrize("name", list(PROMPTS))
def test_best_beam_equals_hf_beam_search(engine, loaded, prompt_ids, name, k):
    prompt, raw = PROMPTS[name]
    ids = prompt_ids[name]
    want, scores = hf_beams(loaded, ids, k, NEW_TOKENS)
    got = engine.generate(prompt, SamplingParams(temperature=0, num_beams=k,
                                                 max_tokens=NEW_TOKENS), raw=raw)
    assert got.prompt_token_ids == ids
    check(loaded, name, ids, got, want, scores)
    if name == "eos_early":  # the best beam ended with EOS well before the limit
        assert got.finish_reason == "stop" and len(got.token_ids) < NEW_TOKENS
        assert got.token_ids[-1] in loaded.eos_token_ids
    st = engine.stats()
    assert st.running == 0 and st.blocks_used == 0


@pytest.mark.slow
@pytest.mark.parametrize("length_penalty,early_stopping", [
    (0.0, False), (2.0, False), (-1.0, False), (1.0, True), (1.0, "never"), (2.0, "never")])
def test_length_penalty_and_early_stopping_follow_hf(engine, loaded, prompt_ids,
                                                     length_penalty, early_stopping):
    prompt, raw = PROMPTS["eos_early"]
    ids = prompt_ids["eos_early"]
    want, scores = hf_beams(loaded, ids, 4, 16, length_penalty=length_penalty,
                            early_stopping=early_stopping)
    got = engine.generate(prompt, SamplingParams(
        temperature=0, num_beams=4, max_tokens=16, length_penalty=length_penalty,
        early_stopping=early_stopping), raw=raw)
    check(loaded, "eos_early", ids, got, want, scores, length_penalty)


def test_n_returned_beams_equal_hf_num_return_sequences(engine, loaded, prompt_ids):
    prompt, raw = PROMPTS["english"]
    ids = prompt_ids["english"]
    want, scores = hf_beams(loaded, ids, 4, 8, num_return_sequences=3)
    got = engine.generate(prompt, SamplingParams(temperature=0, num_beams=4, n=3, max_tokens=8),
                          raw=raw)
    assert [o.token_ids for o in got.outputs] == want
    assert [o.score for o in got.outputs] == pytest.approx(scores, abs=2e-4)
    assert got.text == got.outputs[0].text and got.token_ids == got.outputs[0].token_ids
    # the score is the cumulative logprob over the generated length (length_penalty 1)
    for o in got.outputs:
        assert o.score == pytest.approx(o.cumulative_logprob / len(o.token_ids), rel=1e-5)


def test_beams_stream_a_view_with_shared_blocks(engine):
    h = engine.submit("Explain the KV cache in one sentence.",
                      SamplingParams(temperature=0, num_beams=4, max_tokens=20))
    events = list(h)
    out = h.result()
    views = [e.beams for e in events]
    assert all(v is not None for v in views) and len(views) >= 2
    mid = views[len(views) // 2]
    assert len(mid["live"]) == 4
    # the beams share their prompt blocks: 4 sequences held in fewer physical slots
    assert mid["ref_counts"] and max(mid["ref_counts"].values()) >= 2
    assert mid["physical_tokens"] < mid["logical_tokens"]
    lengths = {len(b["token_ids"]) for b in mid["live"]}
    assert len(lengths) == 1
    assert mid["logical_tokens"] == 4 * (len(out.prompt_token_ids) + lengths.pop())
    assert any(v["pruned"] for v in views)  # some beam died along the way
    assert events[-1].finish_reason == out.finish_reason
    assert engine.stats().blocks_used == 0
