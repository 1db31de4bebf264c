"""app.server.assets: the example prompts and the stylesheet from assets/."""

import json

import pytest

from app.server.assets import load_examples, read_css


def test_examples_include_english_and_chinese_poems():
    examples = load_examples()
    prompts = [e["prompt"] for e in examples]
    assert any("poem about a programmer under deadline pressure" in p for p in prompts)
    assert any("程序员加班" in p for p in prompts)
    assert {e["mode"] for e in examples} == {"chat", "raw"}
    assert ".tok-tip" in read_css()


def test_examples_reject_bad_mode(tmp_path):
    bad = tmp_path / "ex.json"
    bad.write_text(json.dumps({"examples": [{"label": "x", "mode": "poem", "prompt": "p"}]}))
    with pytest.raises(ValueError, match="mode"):
        load_examples(bad)
