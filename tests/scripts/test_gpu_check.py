"""``scripts/gpu_check.py`` runs end to end (here on CPU, with a small random model built from
the embedded model's config), so the prepared GPU run does not fail on its first try."""

import json
import shutil
import subprocess
import sys

import pytest

from tests.support.paths import REPO



@pytest.mark.slow
def test_gpu_check_script_runs_on_cpu_with_random_weights(loaded, tmp_path):
    from engine.model.embedded import EMBEDDED, _embedded_folder

    src, _ = _embedded_folder(EMBEDDED["smollm2-135m"], None)
    model = tmp_path / "model"
    model.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json",
                 "chat_template.jinja"):
        if (src / name).exists():
            shutil.copy(src / name, model / name)
    config = json.loads((src / "config.json").read_text())
    config["num_hidden_layers"] = 2  # a small model: the check's steps, not its timings
    (model / "config.json").write_text(json.dumps(config))
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", str(out), "--model",
                           str(model), "--random-weights", "--device", "cpu", "--quick"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    for part in ("environment", "telemetry_run", "parity_greedy", "paged_scenarios",
                 "prefill_memory", "batch", "nvml", "itl",
                 "telemetry_on_off", "ttft_first_vs_second", "batch_experiment_quick",
                 "compiled_step"):
        assert "error" not in report[part], (part, report[part])
    assert "random weights" in report["model"]["source"]
    assert report["parity_greedy"]["identical"] is True
    assert all(report["paged_scenarios"].values()), report["paged_scenarios"]
    assert report["batch"]["batch_2"]["tokens_per_s_total"] > 0
    assert report["pool"]["num_blocks"] > 0
    assert report["compiled_step"]["compile_on"]["status"]["status"] == "ready"
    assert report["telemetry_run"]["memory_last_step"]["parts"]
