"""The experiments run in quick mode on the embedded model and return well-formed results.

Benchmarks are never timed tests: these check fields, types and relations that hold on any
machine (sizes, sums, identical tokens), never that a number is fast.
"""

import importlib.machinery
import json
import math
import sys
import types

import pytest

from engine.experiments import EXPERIMENTS, names, run_experiment

COMMON = {"experiment", "title", "quick", "status", "params", "summary", "notes", "elapsed_s"}
FIELDS = {
    "vs-hf": {"prompt_tokens", "new_tokens", "pairs", "engine_decode_tokens_per_s",
              "hf_decode_tokens_per_s", "engine_ttft_s", "hf_ttft_s", "decode_ratio", "ttft_ratio",
              "identical_tokens", "first_mismatch", "engine"},
    "kv-cache": {"prompt_tokens", "new_tokens", "on_step_ms", "off_step_ms", "on_prefill_ms",
                 "off_prefill_ms", "on_total_s", "off_total_s", "total_time_ratio",
                 "on_slope_us_per_token", "off_slope_us_per_token", "identical_tokens",
                 "first_mismatch", "engine"},
    "prompt-length": {"lengths", "prompt_tokens", "prefill_s", "runs_s", "prefill_tokens_per_s",
                      "ms_per_token", "cheap_until_tokens", "engine"},
    "decode-share": {"prompt_tokens", "new_tokens", "queue_s", "prefill_s", "decode_s", "e2e_s",
                     "other_s", "decode_share", "prefill_share", "ttft_s", "tpot_s", "engine"},
    "batch": {"backends", "backend_notes", "batch_sizes", "new_tokens", "rows", "engine"},
    "telemetry-cost": {"tokens", "pairs", "off_tok_s", "on_tok_s", "ratio_median",
                       "overhead_pct", "identical_tokens"},
    "roofline": {"device", "bandwidth_gb_per_s", "bandwidth_median_gb_per_s", "bandwidth_bytes",
                 "bandwidth_repeats", "weights_bytes", "kv_bytes_mean", "bytes_per_step",
                 "ceiling_tokens_per_s", "achieved_tokens_per_s", "achieved_fraction",
                 "achieved_gb_per_s", "prompt_tokens", "new_tokens", "engine"},
    "quantization": {"rows", "model", "device"},
    "llama-cpp": {"gguf_path", "prompt_tokens", "new_tokens", "llama_cpp_decode_tokens_per_s",
                  "llama_cpp_ttft_s", "engine_decode_tokens_per_s", "engine_ttft_s", "ratio",
                  "matching_prefix", "engine"},
    "speculative": {"new_tokens", "pairs", "num_speculative_tokens", "rows", "verify_ms",
                    "verify_cost", "engine"},
    "structured": {"mask_rows", "decode_step_ms", "compile", "forced", "engine"},
    "structured-set": {"cases", "counts", "server", "max_tokens", "schemas", "engine"},
    "compile": {"batch_sizes", "eager_tokens_per_s", "compiled_tokens_per_s", "speedup", "rounds",
                "compile", "bandwidth_gb_per_s", "bytes_per_step", "ceiling_tokens_per_s",
                "roofline_fraction", "parity", "profile"},
}

_CACHE: dict = {}


@pytest.fixture
def quick(loaded, engine):
    """Run an experiment in quick mode once per test session (through the shared engine)."""
    def get(name):
        if name not in _CACHE:
            seen = []
            res = run_experiment(name, loaded, quick=True, engine=engine,
                                 progress=lambda f, m: seen.append((f, m)))
            _CACHE[name] = (res, seen)
        return _CACHE[name]
    return get


def test_registry_matches_the_cli_list():
    from engine.cli.bench import EXPERIMENT_NAMES

    assert names() == EXPERIMENT_NAMES
    assert set(FIELDS) == set(names())


@pytest.mark.parametrize("name", [n for n in FIELDS if n != "llama-cpp"])
def test_quick_run_has_documented_fields(quick, name, tmp_path):
    res, seen = quick(name)
    assert res["status"] == "ok", res.get("error")
    assert COMMON <= set(res) and FIELDS[name] <= set(res)
    assert res["experiment"] == name and res["quick"] is True
    json.dumps(res)  # plain data only
    assert res["summary"] and all({"metric", "value", "unit"} == set(r) for r in res["summary"])
    assert seen and all(0.0 <= f <= 1.0 for f, _ in seen) and seen[-1][0] == 1.0
    png = EXPERIMENTS[name].plot(res, str(tmp_path / f"{name}.png"))
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_quantization_rows(quick, loaded):
    """fp32 is the reference; measured KV bytes equal the formula; int4 weights fit in 30% of
    fp32's; every row is scored and timed."""
    res, _ = quick("quantization")
    rows = {(r["weights"], r["kv_cache_dtype"]): r for r in res["rows"]}
    ref = rows[("fp32", "auto")]
    assert ref["top1_agreement"] == 1.0 and ref["kl_mean"] == 0.0
    assert ref["weights_bytes"] == loaded.info.weights_bytes
    assert rows[("int4", "auto")]["weights_bytes"] <= 0.30 * ref["weights_bytes"]
    assert rows[("fp32", "fp8")]["kv_bytes_per_token"] == 11_520
    for r in res["rows"]:
        assert r["kv_bytes_per_token"] == r["kv_bytes_per_token_formula"]
        assert 0.8 <= r["top1_agreement"] <= 1.0 and r["perplexity"] > 1
        assert r["decode_tokens_per_s"] > 0 and r["prefill_tokens_per_s"] > 0 and r["batch_tokens_per_s"] > 0


def test_batch_mixed_lengths_compares_the_same_requests(quick):
    res, _ = quick("batch")
    mixed = res["mixed"]
    assert mixed["useful_tokens"] == sum(mixed["lengths"]) and len(set(mixed["lengths"])) > 1
    eng, hf = mixed["engine"], mixed["hf-generate-padded"]
    assert len(eng["request_e2e_s"]) == len(hf["request_e2e_s"]) == len(mixed["lengths"])
    # padded generate returns every request together; the engine lets short ones leave early
    assert len(set(hf["request_e2e_s"])) == 1
    shortest = min(range(len(mixed["lengths"])), key=lambda i: mixed["lengths"][i])
    longest = max(range(len(mixed["lengths"])), key=lambda i: mixed["lengths"][i])
    assert eng["request_e2e_s"][shortest] < eng["request_e2e_s"][longest]


def test_telemetry_does_not_change_tokens(quick):
    res, _ = quick("telemetry-cost")
    assert res["identical_tokens"] is True
    assert len(res["off_tok_s"]) == len(res["on_tok_s"]) == res["pairs"]
    assert all(v > 0 for v in res["off_tok_s"] + res["on_tok_s"])


def test_vs_hf_produces_identical_tokens(quick):
    res, _ = quick("vs-hf")
    assert res["identical_tokens"] is True and res["first_mismatch"] is None
    assert len(res["pairs"]) == res["params"]["pairs"] >= 2
    for pair in res["pairs"]:
        for side in ("engine", "hf"):
            assert pair[side]["decode_tokens_per_s"] > 0 and pair[side]["ttft_s"] > 0
    assert res["decode_ratio"] > 0 and res["ttft_ratio"] > 0


def test_kv_cache_curves(quick):
    res, _ = quick("kv-cache")
    n = res["new_tokens"]
    assert len(res["on_step_ms"]) == len(res["off_step_ms"]) == n - 1
    assert all(x > 0 for x in res["on_step_ms"] + res["off_step_ms"])
    # recomputing changes the cost; the answer only through rounding, and the result says where
    assert res["identical_tokens"] is (res["first_mismatch"] is None)
    assert res["total_time_ratio"] == pytest.approx(res["off_total_s"] / res["on_total_s"])


def test_prompt_length_sizes(quick):
    res, _ = quick("prompt-length")
    assert res["lengths"] == [16, 64, 256]
    assert all(abs(a - n) <= 3 for a, n in zip(res["prompt_tokens"], res["lengths"]))
    assert all(s > 0 for s in res["prefill_s"])
    for t, s, r in zip(res["prompt_tokens"], res["prefill_s"], res["prefill_tokens_per_s"]):
        assert r == pytest.approx(t / s)
    assert res["cheap_until_tokens"] in res["prompt_tokens"]


def test_decode_share_parts(quick):
    res, _ = quick("decode-share")
    assert res["new_tokens"] == 48
    assert 0 < res["decode_share"] < 1
    assert res["decode_share"] + res["prefill_share"] == pytest.approx(1.0)
    assert res["prefill_s"] + res["decode_s"] <= res["e2e_s"] + 1e-9


def test_batch_rows(quick):
    res, _ = quick("batch")
    assert res["backends"] == ["engine", "hf-generate-padded"] == list(res["backend_notes"])
    assert [(r["backend"], r["batch"]) for r in res["rows"]] == [
        (b, n) for b in res["backends"] for n in res["batch_sizes"]]
    assert res["batch_sizes"] == [1, 2, 4]
    for r in res["rows"]:
        assert r["prompt_tokens"] > 0 and r["e2e_s"] > 0 and r["per_token_latency_ms"] > 0
        assert r["throughput_tokens_per_s"] == pytest.approx(r["batch"] * res["new_tokens"] / r["e2e_s"])


def test_engine_settings_are_recorded(quick):
    res, _ = quick("decode-share")
    cfg = res["engine"]
    assert set(cfg) == {"batching", "prefix_caching", "max_num_seqs", "max_num_batched_tokens",
                        "telemetry", "kv_cache_dtype", "decode_step"}
    assert cfg["kv_cache_dtype"] == "auto" and cfg["decode_step"] in ("compiled", "eager")


def test_peer_experiments_measure_the_served_decode_step():
    """llama.cpp and speculative decoding are measured on the engine `serve` runs; `bench` gives
    them such an engine (compiled where it applies), the others share its eager one."""
    from engine.cli.bench import SERVED
    from engine.experiments import EXPERIMENTS

    assert {n for n, e in EXPERIMENTS.items() if e.served} == set(SERVED) == {"llama-cpp",
                                                                              "speculative"}


def test_private_engine_has_no_prefix_cache(loaded):
    from engine.experiments.common import engine_config, engine_for

    with engine_for(loaded) as eng:
        assert engine_config(eng)["prefix_caching"] is False and eng.config.telemetry is False


def test_salted_prompts_differ_at_the_start():
    from engine.experiments.common import salted

    a, b = salted("hello"), salted("hello")
    assert a.endswith(" hello") and a.split("]")[0] != b.split("]")[0]


def test_roofline_arithmetic(quick, loaded):
    res, _ = quick("roofline")
    assert res["weights_bytes"] == loaded.info.weights_bytes
    assert res["bytes_per_step"] == res["weights_bytes"] + res["kv_bytes_mean"]
    assert res["kv_bytes_mean"] % loaded.spec.kv_bytes_per_token(loaded.info.dtype_bytes) == 0
    ceiling = res["bandwidth_gb_per_s"] * 1e9 / res["bytes_per_step"]
    assert res["ceiling_tokens_per_s"] == pytest.approx(ceiling)
    assert res["achieved_fraction"] == pytest.approx(res["achieved_tokens_per_s"] / ceiling)
    assert res["bandwidth_gb_per_s"] >= res["bandwidth_median_gb_per_s"] > 0


def test_llama_cpp_skips_without_the_package(loaded, engine, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    res = run_experiment("llama-cpp", loaded, quick=True, engine=engine)
    assert res["status"] == "skipped" and "llama-cpp-python" in res["reason"]
    assert res["summary"][0]["metric"] == "skipped"


def test_llama_cpp_with_a_stand_in_module(loaded, engine, monkeypatch):
    """The peer path, run against a fake ``llama_cpp`` (the real one is not a dependency)."""
    calls = {}

    class FakeLlama:
        def __init__(self, model_path, n_ctx, n_threads, verbose):
            calls["path"] = model_path

        def reset(self):
            pass

        def generate(self, tokens, **kw):
            calls["prompt"] = list(tokens)
            i = 0
            while True:
                i += 1
                yield 1000 + i

    fake = types.ModuleType("llama_cpp")
    fake.Llama = FakeLlama
    fake.__spec__ = importlib.machinery.ModuleSpec("llama_cpp", None)
    monkeypatch.setitem(sys.modules, "llama_cpp", fake)
    from engine.experiments import llama_cpp as peer

    monkeypatch.setattr(peer, "RUNNER", peer._llama_in_process)  # the stand-in lives in this process
    res = run_experiment("llama-cpp", loaded, quick=True, engine=engine)
    assert res["status"] == "ok", res.get("error")
    assert FIELDS["llama-cpp"] <= set(res)
    assert calls["path"].endswith(".gguf") and len(calls["prompt"]) == res["prompt_tokens"]
    assert 0 <= res["matching_prefix"] <= res["new_tokens"] and res["llama_cpp_decode_tokens_per_s"] > 0


def test_llama_cpp_child_failure_is_one_error_line(tmp_path):
    """llama.cpp runs in a child process: whatever kills the child (a missing package, a native
    crash) comes back as one RuntimeError line, and the bench process lives on."""
    from engine.experiments.llama_cpp import _llama_in_child

    with pytest.raises(RuntimeError, match="llama.cpp run failed"):
        _llama_in_child(tmp_path / "missing.gguf", [1, 2, 3], 4)


def test_a_failing_experiment_is_reported_not_raised(loaded, monkeypatch):
    from engine.experiments import Experiment

    def boom(*a, **k):
        raise RuntimeError("kaput")

    monkeypatch.setitem(EXPERIMENTS, "vs-hf", Experiment("vs-hf", "t", boom, lambda r, p: p))
    res = run_experiment("vs-hf", loaded, quick=True)
    assert res["status"] == "error" and "kaput" in res["error"] and res["summary"]


def test_robust_slope():
    from engine.experiments.kv_cache import slope

    assert slope([]) == 0.0 and slope([3.0]) == 0.0
    assert slope([2 * i + 1 for i in range(50)]) == pytest.approx(2.0)
    noisy = [10.0] * 40
    noisy[1] = 500.0  # one stall early on must not make a flat curve fall
    assert slope(noisy) == 0.0


def test_machine_description(loaded):
    from engine.experiments.machine import describe

    m = describe(loaded)
    for key in ("cpu", "logical_cores", "ram_bytes", "torch", "transformers", "timestamp", "python"):
        assert m[key]
    assert m["model"]["name"] == "smollm2-135m" and m["model"]["dtype"] == "float32"
    json.dumps(m)


def test_prompt_of_length_is_close(loaded):
    from engine.experiments.common import prompt_of_length

    for n in (16, 100, 500):
        text, actual = prompt_of_length(loaded.tokenizer, n)
        assert text and abs(actual - n) <= 3


@pytest.mark.slow
def test_cli_bench_in_process_writes_files(tmp_path, monkeypatch):
    from engine.__main__ import main

    rc = main(["bench", "decode-share", "--quick", "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert list(doc["experiments"]) == ["decode-share"] and doc["quick"] is True
    assert doc["engine"]["prefix_caching"] is False
    assert doc["command"] == f"python -m engine bench decode-share --quick --out {tmp_path}"
    assert (tmp_path / "decode-share.png").stat().st_size > 1000
    assert "| decode-share | decode share of prefill + decode |" in (tmp_path / "summary.md").read_text()


def test_cli_bench_rejects_unknown_names(tmp_path, capsys):
    from engine.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", "warp-drive", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "warp-drive" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_bench_quick_writes_results_pngs_and_summary(tmp_path):
    """``python -m engine bench --quick`` in a fresh process: results.json, PNGs, summary.md.
    Two experiments, the quickest and one skipped without llama.cpp (each experiment's quick run
    is checked in this process by the tests above; all of them again here cost 90 s)."""
    import os
    import subprocess

    out = tmp_path / "bench"
    chosen = ["prompt-length", "llama-cpp"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "engine", "bench", "--quick", *chosen, "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    assert list(doc["experiments"]) == chosen
    for key in ("cpu", "logical_cores", "ram_bytes", "torch", "transformers", "timestamp", "model"):
        assert key in doc["machine"]
    for name, res in doc["experiments"].items():
        assert res["status"] in ("ok", "skipped"), (name, res.get("error"))
        if res["status"] == "ok":
            assert res["png"] == f"{name}.png" and (out / res["png"]).stat().st_size > 1000
        for v in res.values():  # non-finite floats were written as null, never NaN
            assert not (isinstance(v, float) and not math.isfinite(v))
    summary = (out / "summary.md").read_text()
    assert "| experiment | metric | value | unit |" in summary and "prompt-length" in summary
    assert doc["experiments"]["prompt-length"]["status"] == "ok"


@pytest.mark.slow
def test_compile_experiment_compiles_then_checks_parity_and_profiles(quick):
    """Quick mode compiles batch bucket 1, times both paths in turns, and states for each
    parity prompt whether the compiled greedy tokens equal eager's or where they part."""
    res, _ = quick("compile")
    assert res["compile"]["status"] == "ready" and res["compile"]["ready"] == [1]
    assert res["compile"]["steps_compiled"] > 0
    assert len(res["rounds"]["eager"][1]) == len(res["rounds"]["compiled"][1]) == 2
    assert len(res["parity"]) == 5
    assert all(p["equal"] or "first_difference" in p for p in res["parity"])
    for path in ("eager", "compiled"):
        assert set(res["profile"][path]) == {"matrix products", "attention", "other operators",
                                            "python and dispatch"}
        assert res["profile"][path]["matrix products"] > 0
    assert 0 < res["roofline_fraction"]["compiled"] < 1


def test_structured_set_classifies_every_answer(quick):
    """Every answer of the schema set has one outcome; the counts add up; compile times are
    measured for the schemas that compile."""
    from engine.experiments.structured_set import OUTCOMES, load_set

    assert len(load_set()) >= 30
    res, _ = quick("structured-set")
    assert sum(res["counts"].values()) == len(res["cases"]) == res["schemas"]
    assert all(c["outcome"] in OUTCOMES for c in res["cases"])
    assert res["counts"]["error"] == 0
    assert all(c["compile_ms"] is None or c["compile_ms"] > 0 for c in res["cases"])
