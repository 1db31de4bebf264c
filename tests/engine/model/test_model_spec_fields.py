"""A pasted or downloaded config.json is checked field by field before any formula runs: the
message names the key, and no value can overflow the byte and FLOP products."""

import json

import pytest

from engine.model.model_spec import ModelSpec

LLAMA = {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
         "intermediate_size": 11008, "vocab_size": 32000}


@pytest.mark.parametrize("change,message", [
    ({"hidden_size": 1e300, "num_hidden_layers": 1e300}, r"num_hidden_layers must be between 1 and 100,000, got 1e\+300"),
    ({"hidden_size": -4096}, "hidden_size must be between 1 and 10,000,000, got -4,096"),
    ({"hidden_size": "big"}, "hidden_size must be a whole number, got 'big'"),
    ({"hidden_size": 4096.5}, "hidden_size must be a whole number"),
    ({"num_key_value_heads": 0}, "num_key_value_heads must be between 1"),
    ({"num_attention_heads": 7, "num_key_value_heads": 3}, r"num_attention_heads \(7\) must be a multiple of num_key_value_heads \(3\)"),
    ({"num_attention_heads": 7}, r"hidden_size \(4096\) must be a multiple of num_attention_heads \(7\)"),
    ({"sliding_window": -5}, "sliding_window must be between 1"),
    ({"vocab_size": True}, "vocab_size must be a whole number"),
])
def test_a_bad_field_is_refused_by_name(change, message):
    with pytest.raises(ValueError, match=message):
        ModelSpec.from_config({**LLAMA, **change})


def test_missing_fields_are_named():
    cfg = {k: v for k, v in LLAMA.items() if k not in ("hidden_size", "num_attention_heads")}
    with pytest.raises(ValueError, match="your config.json lacks num_attention_heads, hidden_size"):
        ModelSpec.from_config(cfg, name="your config.json")


def test_whole_floats_and_published_configs_still_load():
    spec = ModelSpec.from_config({**LLAMA, "hidden_size": 4096.0, "sliding_window": None})
    assert spec.hidden_size == 4096 and spec.head_dim == 128
    assert spec.kv_bytes_per_token(2) == 2 * 32 * 32 * 128 * 2 == 524_288


def test_the_calculator_and_roofline_show_the_named_refusal():
    from app.tabs.lessons import roofline
    from app.tabs.lessons.calculator import calculator_view

    pasted = json.dumps({**LLAMA, "hidden_size": 1e300})
    fig, md = calculator_view("x", pasted, None, 1024, 1, "bf16")
    assert "hidden_size must be between 1 and 10,000,000, got 1e+300" in md, md
    assert "internal error" not in md and not fig.data
    with pytest.raises(ValueError, match="config.json: hidden_size must be between"):
        roofline.chosen_shape(None, "engine", "x", "bf16", "bf16", pasted)
