"""The roofline lesson's arithmetic for a model of the calculator's list or a pasted config.json,
against hand arithmetic (Llama-2-7B: 32 layers of 4,096 wide, 32 heads of 128, an 11,008-wide
gated MLP, a 32,000-token vocabulary and an untied LM head), and the lesson's view of it."""

from __future__ import annotations

import json

import pytest

from app.tabs.lessons import roofline as lesson_roofline, roofline_models as rm
from engine.experiments import intensity
from engine.telemetry.estimator import estimate, known_models, load_spec

# parameters by hand: embedding + LM head 2 × 32,000 × 4,096; per layer 4 × 4,096² (attention),
# 3 × 4,096 × 11,008 (MLP), 2 × 4,096 (norms); one final norm
LLAMA2_PARAMS = 2 * 32_000 * 4_096 + 32 * (4 * 4_096**2 + 3 * 4_096 * 11_008 + 2 * 4_096) + 4_096
H100_RIDGE = 989e12 / 3.35e12  # 295.2 FLOPs per byte


@pytest.fixture(scope="module")
def llama():
    return rm.spec_shape(load_spec("meta-llama/Llama-2-7b-hf"), "fp16", "fp16")


def test_llama2_7b_weights_flops_and_intensity_by_hand(llama):
    assert LLAMA2_PARAMS == 6_738_415_616  # the model card's count
    assert llama.params == LLAMA2_PARAMS
    assert llama.weight_bytes == 2 * LLAMA2_PARAMS == 13_476_831_232  # fp16: 2 B per weight
    assert llama.flops(1, 0) == 2 * LLAMA2_PARAMS  # FLOPs per token: 2 × params
    assert llama.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524_288  # K and V, 32 layers × 32 heads × 128, fp16
    assert llama.intensity(1, 0) == pytest.approx(1.0)      # 2P FLOPs ÷ 2P bytes
    assert llama.intensity(512, 0) == pytest.approx(512.0)  # 512 × 2P ÷ 2P
    # with a 512-token cache per sequence the bytes grow with the batch too
    flops = 512 * (2 * LLAMA2_PARAMS + 4 * 32 * 32 * 128 * 512)
    read = 2 * LLAMA2_PARAMS + 512 * 512 * 524_288
    assert llama.intensity(512, 512) == pytest.approx(flops / read)  # about 46.6
    assert llama.intensity(512, 512) < H100_RIDGE


def test_llama2_7b_turns_compute_bound_on_an_h100_near_batch_296(llama):
    ridge = next(g["ridge"] for g in intensity.published_ridges() if g["name"] == "H100 SXM")
    assert ridge == pytest.approx(H100_RIDGE)
    assert llama.crossover_batch(ridge, 0) == 296  # the first whole batch above 295.2
    assert llama.crossover_batch(ridge, 512) is None
    # int4 weights: 0.5 B of code + 4 B of scale and zero per 32 weights = 0.625 B a decoder
    # weight, 0.3125 of fp16's 2 B (the int8 embedding and LM head add a little): about 3.1× the
    # intensity at the same batch
    spec = load_spec("meta-llama/Llama-2-7b-hf")
    q = rm.spec_shape(spec, "int4", "fp16")
    assert q.weight_bytes == estimate(spec, "bf16", weights="int4").weights_bytes
    assert 0.3125 * llama.weight_bytes < q.weight_bytes < 0.33 * llama.weight_bytes
    assert q.crossover_batch(ridge, 0) == llama.crossover_batch(ridge * q.weight_bytes / llama.weight_bytes, 0)


def test_prefill_intensity_by_hand(llama):
    t = 512
    flops = 2 * LLAMA2_PARAMS * t + 4 * 32 * 32 * 128 * t * (t + 1) / 2
    moved = 2 * LLAMA2_PARAMS + t * 524_288
    assert rm.prefill_flops(llama, t) == pytest.approx(flops)
    assert rm.prefill_bytes(llama, t) == pytest.approx(moved)
    assert rm.prefill_intensity(llama, t) == pytest.approx(flops / moved)  # about 507
    n = rm.prefill_crossover(llama, H100_RIDGE)
    assert rm.prefill_intensity(llama, n) >= H100_RIDGE > rm.prefill_intensity(llama, n - 1)
    assert 280 < n < 310
    assert rm.prefill_crossover(llama, 1e9, largest=4096) is None


def test_dtypes_are_checked_by_name():
    spec = load_spec("meta-llama/Llama-2-7b-hf")
    with pytest.raises(ValueError, match="weights dtype"):
        rm.spec_shape(spec, "int3", "fp16")
    with pytest.raises(ValueError, match="KV cache dtype"):
        rm.spec_shape(spec, "fp16", "int4")


ENGINE = intensity.DecodeShape(params=134_515_008, weight_bytes=94_835_584, kv_bytes_per_token=23_040,
                               layers=30, heads=9, head_dim=64)


def view(model, pasted="", context=512, weights="fp16", kv="fp16", machine=None):
    return lesson_roofline.roofline_view(ENGINE, "smollm2-135m (int4 weights, bfloat16 KV cache)", model,
                                         weights, kv, pasted, context, machine)


def test_a_listed_7b_model_gets_both_plots_and_the_h100_answer():
    assert "meta-llama/Llama-2-7b-hf" in known_models()
    answer, decode, prefill, table, status = view("meta-llama/Llama-2-7b-hf")
    assert status == ""
    assert "from **batch 296**" in answer and "512 × 13,476,831,232 FLOPs ÷ 13,476,831,232 B = **512" in answer
    assert "never" in answer  # the whole step at 512 tokens of context
    assert list(decode.data[0].y) == pytest.approx([rm.spec_shape(load_spec("meta-llama/Llama-2-7b-hf")).intensity(b, 512)
                                                    for b in lesson_roofline.BATCHES])
    assert decode.data[2].name.startswith(lesson_roofline.ENGINE_MODEL)  # the page's model stays on it
    assert list(prefill.data[0].x) == lesson_roofline.PROMPTS
    assert sum("ridge of" in (t.name or "") for t in prefill.data) == 5
    assert "| H100 SXM (bf16) | 3,350.0 GB/s | 989 | 295.2 | 296 | never |" in table


def test_the_page_model_and_a_pasted_config():
    answer, decode, _, table, status = view(lesson_roofline.ENGINE_MODEL)
    assert status == "" and "smollm2-135m" in answer
    assert list(decode.data[0].y) == pytest.approx([ENGINE.intensity(b, 512) for b in lesson_roofline.BATCHES])
    assert not any((t.name or "").startswith(lesson_roofline.ENGINE_MODEL) for t in decode.data)
    cfg = {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
           "num_key_value_heads": 8, "vocab_size": 32000, "_name_or_path": "my-gqa-7b"}
    answer, decode, _, _, status = view(lesson_roofline.ENGINE_MODEL, json.dumps(cfg))
    assert status == "" and "my-gqa-7b" in answer
    assert decode.layout.title.text.endswith("my-gqa-7b")


@pytest.mark.parametrize("model,pasted,context,field", [
    ("no/such-model", "", 512, "model"),
    ("meta-llama/Llama-2-7b-hf", "{not json", 512, "config.json"),
    ("meta-llama/Llama-2-7b-hf", '{"hidden_size": 64}', 512, "config.json"),
    ("meta-llama/Llama-2-7b-hf", "", -5, "context"),
])
def test_bad_input_leaves_the_figures_and_names_the_field(model, pasted, context, field):
    out = view(model, pasted, context)
    assert out[:4] == (None, None, None, None)
    assert field in out[4] and "⚠" in out[4] and "Traceback" not in out[4]
