"""Kernels built into the cache once: the library's path, no rebuild, compiler errors kept."""

import shutil

import pytest

from engine.native_build import build_cached

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler on this machine")


def test_built_once_then_found(monkeypatch, tmp_path):
    monkeypatch.setenv("LLM_PLAYGROUND_CACHE", str(tmp_path))
    src = tmp_path / "one.c"
    src.write_text("int one(void) { return 1; }\n")
    calls = []

    def command(target):
        calls.append(target)
        return [CC, "-shared", "-fPIC", "-o", target, str(src)]

    first = build_cached("one", "abc", command, 60)
    assert first == tmp_path / "kernels" / "one-abc.so" and first.stat().st_size > 0
    assert build_cached("one", "abc", command, 60) == first and len(calls) == 1
    assert [p.name for p in (tmp_path / "kernels").iterdir()] == ["one-abc.so"]   # no temp file


def test_a_compiler_error_is_kept_and_nothing_is_left(monkeypatch, tmp_path):
    monkeypatch.setenv("LLM_PLAYGROUND_CACHE", str(tmp_path))
    src = tmp_path / "bad.c"
    src.write_text("int bad(void) { return }\n")
    with pytest.raises(RuntimeError, match="failed: .*error"):
        build_cached("bad", "k", lambda t: [CC, "-shared", "-fPIC", "-o", t, str(src)], 60)
    assert list((tmp_path / "kernels").iterdir()) == []
