"""``python -m engine generate`` as a user runs it (subprocess, embedded model)."""

import json

import pytest

from tests.support.cli import run


@pytest.mark.slow
def test_generate_json_fields():
    r = run("generate", "--prompt", "Explain the KV cache in one sentence.", "--temperature", "0",
            "--max-tokens", "16", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for key in ("text", "token_ids", "prompt_token_ids", "finish_reason", "deltas", "metrics",
                "kv_cache_bytes", "memory", "steps"):
        assert key in out
    for key in ("ttft_s", "tpot_s", "prefill_s", "decode_s", "e2e_s", "prompt_tokens",
                "output_tokens", "decode_tokens_per_s"):
        assert key in out["metrics"]
    assert "".join(out["deltas"]) == out["text"]
    n_prompt, n_out = len(out["prompt_token_ids"]), len(out["token_ids"])
    # the default on CPU is int4 weights with bf16 compute, so the KV cache holds bf16:
    # 2 × 30 × 3 × 64 × 2 = 23,040 bytes per token (46,080 in fp32)
    assert out["weights"] == "int4" and out["kv_cache_dtype"] == "bfloat16"   # the CPU default
    assert out["kv_cache_bytes"] == 23_040 * (n_prompt + n_out - 1) == out["kv_cache_bytes_formula"]
    assert len(out["steps"]) == n_out and out["steps"][0]["phase"] == "prefill"
    assert all(s["kv_bytes"] == s["kv_bytes_formula"] for s in out["steps"])
    parts = {p["name"]: p for p in out["memory"]["parts"]}
    assert parts["kv_cache"]["bytes"] > 0 and parts["activations"]["measured"] is False


@pytest.mark.slow
def test_generate_weights_and_kv_cache_dtype_flags():
    r = run("generate", "--prompt", "Say hello.", "--temperature", "0", "--max-tokens", "6",
            "--weights", "fp32", "--kv-cache-dtype", "fp8", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["weights"] == "fp32" and out["kv_cache_dtype"] == "fp8 (e4m3)"
    n = len(out["prompt_token_ids"]) + len(out["token_ids"]) - 1
    assert out["kv_cache_bytes"] == 11_520 * n == out["kv_cache_bytes_formula"]
    bad = run("generate", "--prompt", "x", "--weights", "bf16", "--dtype", "float32")
    assert bad.returncode == 1 and "weights=bf16 and dtype=float32" in bad.stderr


@pytest.mark.slow
def test_generate_streams_text_and_metrics_line():
    r = run("generate", "--prompt", "Say hello.", "--temperature", "0", "--max-tokens", "8")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "TTFT" in r.stderr and "TPOT" in r.stderr and "KV cache" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["--temperature", "-1"], "temperature"),
    (["--top-p", "2"], "top_p"),
    (["--max-tokens", "0"], "max_tokens"),
    (["--max-tokens", "ten"], "invalid int"),
])
def test_bad_arguments_one_line_error(args, needle):
    r = run("generate", "--prompt", "hi", *args, timeout=60)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr


def test_unknown_model_fails_fast_with_name():
    r = run("generate", "--prompt", "hi", "--model", "no-such-org/no-such-model", timeout=120)
    assert r.returncode != 0 and "no-such-org/no-such-model" in r.stderr
    assert "Traceback" not in r.stderr


def test_unreachable_hub_fails_fast(monkeypatch):
    """With the Hub allowed but unreachable, loading a Hub id fails at once, naming the model."""
    import time

    from engine.model.loader import ModelLoadError, load_model

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on loopback:9
    t0 = time.perf_counter()
    with pytest.raises(ModelLoadError) as err:
        load_model("no-such-org/no-such-model", device="cpu", progress=None)
    assert time.perf_counter() - t0 < 10
    assert "no-such-org/no-such-model" in str(err.value) and "unreachable" in str(err.value)


def test_closing_line_says_why_the_answer_ended():
    """The closing line never reads "[stop]" as if the user had pressed Stop."""
    from types import SimpleNamespace as NS

    from engine.cli.generate import finish_words

    assert finish_words(NS(finish_reason="stop", stop_reason=None)) == "finished: the model's end-of-text token"
    assert finish_words(NS(finish_reason="stop", stop_reason="\n\n")) == "finished: stop string or token"
    assert finish_words(NS(finish_reason="length", stop_reason=None)) == "finished: reached max tokens"
    assert finish_words(NS(finish_reason="abort", stop_reason=None)) == "aborted"


def test_bench_prints_its_results_table():
    """``bench`` prints every summary row to the terminal, not only to summary.md."""
    from engine.cli.bench import results_table

    doc = {"experiments": {
        "batch": {"summary": [{"metric": "speed-up at 8", "value": 3.52, "unit": "x"},
                              {"metric": "sequences", "value": 8, "unit": ""}]},
        "roofline": {"summary": [{"metric": "bandwidth", "value": 12.5, "unit": "GB/s"}]}}}
    lines = results_table(doc).splitlines()
    assert len(lines) == 3
    assert lines[0].split()[:2] == ["batch", "speed-up"] and lines[0].endswith("3.52 x")
    assert not lines[1].startswith("batch") and "sequences" in lines[1]
    assert lines[2].startswith("roofline") and lines[2].endswith("12.5 GB/s")
    assert results_table({"experiments": {}}) == "no results"


def test_python_without_the_packages_gets_one_line():
    """Outside the virtual environment, a missing torch is one line naming the fix."""
    from engine.cli.common import missing_package_message

    line = missing_package_message(ModuleNotFoundError("No module named 'torch'", name="torch"), "engine")
    assert "'torch' is not installed" in line and ".venv/bin/python -m engine" in line
    assert missing_package_message(ModuleNotFoundError("x", name="not_ours"), "engine") is None


@pytest.mark.slow
def test_beams_json_returns_every_beam_unless_n_says_fewer():
    """``--beams 4 --json`` lists all four beams in ``outputs``, best first (the README's
    example); ``--n 1`` asks for the best one alone."""
    args = ("generate", "--prompt", "Translate into French: good morning.", "--beams", "4",
            "--max-tokens", "8", "--weights", "fp32", "--json")
    r = run(*args)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [o["index"] for o in out["outputs"]] == [0, 1, 2, 3]
    scores = [o["score"] for o in out["outputs"]]
    assert scores == sorted(scores, reverse=True)
    assert out["text"] == out["outputs"][0]["text"]
    assert len({tuple(o["token_ids"]) for o in out["outputs"]}) == 4  # four different beams
    one = run(*args, "--n", "1")
    assert one.returncode == 0, one.stderr
    best = json.loads(one.stdout)["outputs"]
    assert len(best) == 1 and best[0]["text"] == out["text"]
