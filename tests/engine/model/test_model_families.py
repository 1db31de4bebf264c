"""Paged continuous batching on the other families it supports: Qwen2 and Mistral.

No weights for those families can be downloaded here, so each test builds a tiny model of the
family from its config (random weights, fp32), saves it with the embedded model's tokenizer,
loads it through the normal local-folder path, and checks that batched greedy tokens equal
Hugging Face ``generate`` on the same model. Mistral's sliding window (8 tokens here) is
shorter than the sequences, so the paged attention's window masking is exercised too.
"""

import pytest
import torch

from engine import SamplingParams
from engine.engine import LLMEngine
from engine.model.loader import load_model

PROMPTS = ["one two three", "the cat sat on the mat and then", "a", "prefill and decode steps"]
NEW = 24


def tiny(family: str):
    from transformers import MistralConfig, Qwen2Config

    common = dict(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    if family == "qwen2":
        return Qwen2Config(**common)
    return MistralConfig(sliding_window=8, **common)


@pytest.fixture(params=["qwen2", "mistral"])
def family_model(request, loaded, tmp_path):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny(request.param))
    for p in model.parameters():  # sharper logits than the default init, so no near-ties
        p.data.normal_(0.0, 0.2)
    model.save_pretrained(tmp_path)
    loaded.tokenizer.save_pretrained(tmp_path)
    lm = load_model(str(tmp_path), device="cpu", dtype="float32", progress=None)
    lm.model.generation_config.eos_token_id = None
    return request.param, lm


def hf_greedy(lm, ids):
    t = torch.tensor([ids])
    with torch.inference_mode():
        out = lm.model.generate(t, attention_mask=torch.ones_like(t), do_sample=False,
                                max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0)
    return out[0, len(ids):].tolist()


def test_batched_tokens_equal_hf_generate(family_model):
    family, lm = family_model
    assert lm.model.config.model_type == family
    eng = LLMEngine(lm, telemetry=False, kv_cache_bytes=8 * 2**20, block_size=4)
    try:
        assert eng.paged
        params = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)
        handles = [eng.submit(p, params, raw=True) for p in PROMPTS]
        outs = [h.result(120) for h in handles]
        assert max(e.batch_size for h in handles for e in h.events) > 1
        for out in outs:
            assert out.token_ids == hf_greedy(lm, out.prompt_token_ids), family
        assert eng.stats().blocks_used == 0
    finally:
        eng.shutdown()
