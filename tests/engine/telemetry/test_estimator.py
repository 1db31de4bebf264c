"""The memory estimator and ModelSpec: seed figures, the shipped table, config parsing."""

import json

import pytest

from engine.model.model_spec import ModelSpec
from engine.telemetry import estimator
from engine.telemetry.estimator import (DTYPE_BYTES, activation_estimate, dtype_bytes, estimate,
                                        known_models, load_spec)

REQUIRED = [
    "meta-llama/Llama-2-7b-hf", "meta-llama/Meta-Llama-3-8B", "mistralai/Mistral-7B-v0.1",
    "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct",
    "HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct",
    "HuggingFaceTB/SmolLM2-1.7B-Instruct", "google/gemma-2-2b",
    "microsoft/Phi-3-mini-4k-instruct", "openai-community/gpt2",
]


def test_seed_llama7b_fp16_5_tokens():
    spec = ModelSpec.from_config({"num_hidden_layers": 32, "num_attention_heads": 32,
                                  "num_key_value_heads": 32, "hidden_size": 4096,
                                  "intermediate_size": 11008, "vocab_size": 32000})
    assert spec.head_dim == 128
    assert spec.kv_cache_bytes(5, 2) == 2_621_440
    assert estimate("meta-llama/Llama-2-7b-hf", "fp16", 1, 5).kv_bytes == 2_621_440


def test_seed_qwen25_7b_fp16_8192_tokens():
    est = estimate("Qwen/Qwen2.5-7B-Instruct", dtype="fp16", batch=1, seq_len=8192)
    assert (est.spec.layers, est.spec.kv_heads, est.spec.head_dim) == (28, 4, 128)
    assert est.kv_bytes == 469_762_048
    assert est.kv_bytes_per_token == 57_344
    assert est.total_bytes == est.weights_bytes + est.kv_bytes + est.activation_bytes


def test_kv_scales_with_batch_and_dtype():
    spec = load_spec("smollm2-135m")
    assert spec.kv_bytes_per_token(4) == 46_080  # 2 × 30 × 3 × 64 × 4
    assert spec.kv_cache_bytes(100, 2, batch=3) == 3 * 100 * 23_040
    assert spec.kv_cache_bytes(10, DTYPE_BYTES["int4"]) == 10 * 23_040 // 4
    assert "2 × 30 layers × 3 KV heads × 64 head_dim × 4 B = 46,080 B per token" == \
        spec.formula_text(4)


@pytest.mark.parametrize("model_id", REQUIRED)
def test_every_required_model_in_table_loads(model_id):
    assert model_id in known_models()
    spec = load_spec(model_id.upper())  # exact id, case-insensitive
    assert spec.name == model_id
    assert "config.json" in spec.source and "huggingface.co" in spec.source
    est = estimate(spec, "bf16", batch=2, seq_len=1024)
    assert est.weights_bytes > 0 and est.kv_bytes > 0 and est.activation_bytes > 0
    assert est.kv_bytes_per_token == 2 * spec.layers * spec.kv_heads * spec.head_dim * 2
    json.dumps(est.to_dict())  # JSON-ready


def test_parameter_count_matches_published_count():
    table = json.loads(estimator.TABLE_PATH.read_text())["models"]
    for model_id, entry in table.items():
        assert load_spec(model_id).weight_count() == entry["published_params"], model_id


def test_explicit_head_dim_differs_from_hidden_over_heads():
    spec = load_spec("google/gemma-2-2b")
    assert spec.hidden_size // spec.heads == 288
    assert spec.head_dim == 256
    assert spec.kv_bytes_per_token(2) == 2 * 26 * 4 * 256 * 2
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "head_dim": 32,
           "num_key_value_heads": 1, "intermediate_size": 128, "vocab_size": 10}
    assert ModelSpec.from_config(cfg).kv_bytes_per_token(1) == 2 * 2 * 1 * 32


def test_sliding_window_caps_sliding_layers():
    mistral = load_spec("mistralai/Mistral-7B-v0.1")  # every layer slides, window 4096
    assert mistral.kv_cache_bytes(10_000, 2) == mistral.kv_cache_bytes(4096, 2)
    assert mistral.kv_cache_bytes(1000, 2) == 1000 * mistral.kv_bytes_per_token(2)
    gemma = load_spec("google/gemma-2-2b")  # alternating: 13 sliding, 13 full
    assert gemma.sliding_layers == 13
    per_layer_tok = 2 * 4 * 256 * 2
    assert gemma.kv_cache_bytes(8192, 2) == per_layer_tok * (13 * 8192 + 13 * 4096)
    assert gemma.formula_text(2, 8192) == ("2 × 4 KV heads × 256 head_dim × 2 B × 1 batch × (13 full layers "
                                           "× 8,192 tokens + 13 sliding layers × 4,096 tokens) = 654,311,424 B")


def test_layer_types_and_qwen_sliding_flag():
    cfg = {"num_hidden_layers": 4, "num_attention_heads": 2, "hidden_size": 8,
           "sliding_window": 16,
           "layer_types": ["sliding_attention", "full_attention", "full_attention", "full_attention"]}
    assert ModelSpec.from_config(cfg).sliding_layers == 1
    qwen = load_spec("Qwen/Qwen2.5-7B-Instruct")  # sliding_window set but use_sliding_window false
    assert qwen.sliding_window is None and qwen.sliding_layers == 0


def test_gpt2_names():
    spec = load_spec("gpt2")
    assert (spec.layers, spec.heads, spec.kv_heads, spec.head_dim) == (12, 12, 12, 64)
    assert spec.intermediate_size == 4 * 768  # n_inner None
    assert spec.max_positions == 1024 and spec.tie_word_embeddings
    assert spec.weight_count() == 124_439_808


def test_from_transformers_config_object():
    from transformers import Gemma2Config, LlamaConfig

    spec = ModelSpec.from_config(LlamaConfig(num_hidden_layers=3, hidden_size=64,
                                             num_attention_heads=4, num_key_value_heads=2,
                                             intermediate_size=128, vocab_size=100))
    assert (spec.layers, spec.kv_heads, spec.head_dim) == (3, 2, 16)
    g = ModelSpec.from_config(Gemma2Config(num_hidden_layers=4))
    assert g.sliding_layers == 2 and g.head_dim == 256


def test_local_config_json_and_folder(tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "hidden_size": 32, "intermediate_size": 64,
           "vocab_size": 50, "tie_word_embeddings": True}
    folder = tmp_path / "tiny-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    by_folder, by_file = load_spec(str(folder)), load_spec(str(folder / "config.json"))
    assert by_folder.name == by_file.name == "tiny-model"
    assert by_folder.kv_bytes_per_token(4) == 2 * 2 * 2 * 8 * 4
    assert "local file" in by_folder.source
    # 50·32 embed + 2 × (attn 32·32·2 + 32·16·2, MLP 3·32·64, 2 norms of 32) + final norm
    assert by_folder.weight_count() == 1600 + 2 * (2048 + 1024 + 6144 + 64) + 32


def test_unknown_model_offline_is_one_line_lookup_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(LookupError) as err:
        load_spec("nobody/no-such-model")
    msg = str(err.value)
    assert "nobody/no-such-model" in msg and "\n" not in msg and "HF_HUB_OFFLINE" in msg


def test_hub_lookup_when_allowed(monkeypatch, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 5, "num_attention_heads": 2,
                                "hidden_size": 16, "num_key_value_heads": 1}))
    monkeypatch.setattr(estimator, "_hub_config_path", lambda repo: str(path))
    spec = load_spec("someone/tiny", allow_hub=True)
    assert spec.layers == 5 and spec.name == "someone/tiny" and "Hub" in spec.source


def test_activation_estimate_formula():
    spec = load_spec("smollm2-135m")
    # b·T·hidden·bytes + 3·b·T·I·bytes + b·V·4
    assert activation_estimate(spec, 4, 2, 10) == 2 * 10 * 576 * 4 + 3 * 2 * 10 * 1536 * 4 \
        + 2 * 49152 * 4


def test_dtype_names():
    assert dtype_bytes("bfloat16") == 2 and dtype_bytes("torch.float32") == 4
    assert dtype_bytes("int8") == 1
    with pytest.raises(ValueError):
        dtype_bytes("fp12")


def test_a_local_file_that_is_no_config_is_named(tmp_path):
    from engine.telemetry.estimator import load_spec

    bad = tmp_path / "notes.txt"
    bad.write_text("root:x:0:0\n")
    with pytest.raises(ValueError, match=r"model: .*notes.txt is not a readable config.json"):
        load_spec(str(bad))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds no JSON object"):
        load_spec(str(tmp_path / "list.json"))
