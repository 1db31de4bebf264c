"""``python -m engine kv-size``: the JSON object, the human table and the offline error."""

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO



def _run(*args, **env):
    e = {**os.environ, "HF_HUB_OFFLINE": "1", **env}
    return subprocess.run([sys.executable, "-m", "engine", "kv-size", *args], cwd=REPO, env=e,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_json_qwen_seed_figure():
    p = _run("--model", "Qwen/Qwen2.5-7B-Instruct", "--tokens", "8192", "--dtype", "fp16",
             "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["kv_bytes"] == 469_762_048 and d["bytes_per_token"] == 57_344
    assert (d["layers"], d["kv_heads"], d["head_dim"], d["dtype_bytes"]) == (28, 4, 128, 2)
    assert d["weights_bytes"] == 7_615_616_512 * 2
    assert d["total_bytes"] == d["weights_bytes"] + d["kv_bytes"] + d["activation_bytes"]


@pytest.mark.slow
def test_json_batch_dtype_and_local_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
        "hidden_size": 256, "intermediate_size": 512, "vocab_size": 1000}))
    p = _run("--model", str(tmp_path), "--tokens", "100", "--batch", "3", "--dtype", "int8",
             "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["bytes_per_token"] == 2 * 4 * 2 * 32 * 1
    assert d["kv_bytes"] == 3 * 100 * d["bytes_per_token"]


def test_human_table_shows_formula():
    p = _run("--model", "smollm2-135m", "--tokens", "10", "--dtype", "fp32")
    assert p.returncode == 0, p.stderr
    assert "2 × 30 layers × 3 KV heads × 64 head_dim × 4 B × 10 tokens × 1 batch = 460,800 B" \
        in p.stdout


@pytest.mark.slow
def test_unknown_model_offline_one_line_exit_2():
    p = _run("--model", "nobody/not-a-model", "--tokens", "5", "--json")
    assert p.returncode == 2
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "nobody/not-a-model" in lines[0]
    assert "Traceback" not in p.stderr
