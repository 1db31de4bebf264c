"""The project installs as a package (pyproject.toml): both packages, their kernel sources and the
console scripts; scripts/setup.sh installs this checkout editable, and then ``engine`` and ``app``
import from any directory and still find assets/ and the kernels' sources."""

from __future__ import annotations

import fnmatch
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.paths import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_console_scripts_are_the_module_entry_points():
    scripts = PROJECT["project"]["scripts"]
    assert set(scripts) == {"llm-playground", "llm-engine"}
    for target in scripts.values():
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func))


def test_every_kernel_source_is_package_data():
    """A C or C++ file under engine/ is compiled at run time, so it must ship with the package."""
    globs = PROJECT["tool"]["setuptools"]["package-data"]["*"]
    sources = [p for p in (REPO / "engine").rglob("*") if p.suffix in (".c", ".cpp", ".h", ".cu", ".hpp")]
    assert sources
    for path in sources:
        assert any(fnmatch.fnmatch(path.name, g) for g in globs), path
    found = PROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {"engine", "engine.*", "app", "app.*"} <= set(found)


def test_setup_installed_this_checkout_editable_with_its_commands():
    """What scripts/setup.sh leaves in the environment: this checkout as an editable install
    (pip's direct_url.json) and both commands beside the interpreter."""
    import json
    from importlib.metadata import distributions

    installs = [d for d in distributions(name=PROJECT["project"]["name"]) if d.read_text("direct_url.json")]
    if not installs:
        pytest.skip("the project is not installed in this Python (pip install --no-deps -e .)")
    url = json.loads(installs[0].read_text("direct_url.json"))
    assert url["dir_info"] == {"editable": True} and url["url"] == REPO.as_uri()
    assert {e.name for e in installs[0].entry_points if e.group == "console_scripts"} == \
        set(PROJECT["project"]["scripts"])
    for name in PROJECT["project"]["scripts"]:
        assert (Path(sys.executable).parent / name).is_file(), name


@pytest.mark.slow
def test_installed_packages_import_from_another_directory(tmp_path):
    """With the editable install (scripts/setup.sh), a script run outside the checkout imports
    the engine and finds assets/ and the kernels' sources."""
    code = ("import engine, app.server.assets as a, engine.telemetry.estimator as e, "
            "engine.worker.kernels.decode_attention as k; "
            "print(engine.__file__, a.ASSETS.is_dir(), e.TABLE_PATH.is_file(), k.SOURCE.is_file())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    if "No module named 'engine'" in out.stderr:
        pytest.skip("the project is not installed in this Python (pip install --no-deps -e .)")
    assert out.returncode == 0, out.stderr[-2000:]
    path, *found = out.stdout.split()
    assert path.startswith(str(REPO)) and found == ["True", "True", "True"]
