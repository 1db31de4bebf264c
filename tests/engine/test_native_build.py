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


def test_a_prebuild_runs_once_in_the_background_and_the_loader_waits_for_it(monkeypatch, tmp_path):
    """A first start compiles the kernels on a background thread while the model loads: the
    build runs once per name, off the calling thread, and wait_prebuilt returns once the
    library is in the cache (so the loading call finds it instead of compiling it again)."""
    import threading

    from engine import native_build

    monkeypatch.setenv("LLM_PLAYGROUND_CACHE", str(tmp_path))
    monkeypatch.setattr(native_build, "_PREBUILDS", {})
    src = tmp_path / "two.c"
    src.write_text("int two(void) { return 2; }\n")
    threads, go = [], threading.Event()

    def build():
        threads.append(threading.current_thread())
        go.wait(30)
        return build_cached("two", "k", lambda t: [CC, "-shared", "-fPIC", "-o", t, str(src)], 60)

    native_build.prebuild("two", build)
    native_build.prebuild("two", build)          # started once
    assert not (tmp_path / "kernels" / "two-k.so").exists()
    go.set()
    native_build.wait_prebuilt("two")
    assert (tmp_path / "kernels" / "two-k.so").exists()
    assert len(threads) == 1 and threads[0] is not threading.current_thread()
    native_build.wait_prebuilt("never started")  # nothing to wait for


def test_a_failed_prebuild_is_left_for_the_loader_to_report(monkeypatch):
    from engine import native_build

    monkeypatch.setattr(native_build, "_PREBUILDS", {})

    def broken():
        raise RuntimeError("no compiler")

    native_build.prebuild("broken", broken)
    native_build.wait_prebuilt("broken")         # no exception escapes the thread or the wait


def test_setuptools_is_imported_before_a_background_build_starts():
    """A fresh interpreter: prebuild imports setuptools on the calling thread, so the build
    thread never imports it while the caller imports transformers (setuptools takes a finder out
    of ``sys.meta_path`` as it loads, and a concurrent import can step over the path finder:
    'No module named regex' at start-up)."""
    import subprocess
    import sys

    code = ("import sys, threading\n"
            "from engine.native_build import prebuild\n"
            "assert 'setuptools' not in sys.modules\n"
            "seen = []\n"
            "prebuild('probe', lambda: seen.append('setuptools' in sys.modules))\n"
            "assert 'setuptools' in sys.modules\n"
            "[t.join() for t in threading.enumerate() if t.name == 'build-probe']\n"
            "assert seen == [True]\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_the_x86_64_level_is_the_highest_whose_flags_and_those_below_are_all_there(monkeypatch):
    """The psABI levels build on each other: AVX-512 flags without AVX2's are not level 4."""
    import platform

    from engine import native_build
    from engine.native_build import X86_64_LEVELS, x86_64_level

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    v2, v3, v4 = (added for _, added in reversed(X86_64_LEVELS))
    assert x86_64_level(v2 | v3 | v4 | {"avx512_bf16"}) == "x86-64-v4"
    assert x86_64_level(v2 | v3) == "x86-64-v3"
    assert x86_64_level(v2 | v4) == "x86-64-v2"
    assert x86_64_level(v2 - {"popcnt"} | v3 | v4) is None
    monkeypatch.setattr(native_build, "cpu_flags", lambda: v2 | v3)
    assert x86_64_level() == "x86-64-v3"
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert x86_64_level(v2 | v3 | v4) is None


def test_the_attention_kernel_is_built_for_the_cpus_level_or_as_clones(monkeypatch):
    """One target where the level is known (seconds instead of the clones' 14 s on a first
    start), the clones where it is not, and the clones again when the compiler refuses the
    level's name."""
    from engine.worker.kernels import decode_attention as da

    monkeypatch.setattr(da, "x86_64_level", lambda: "x86-64-v3")
    assert da.build_flags() == (*da.FLAGS, "-march=x86-64-v3", "-DONE_TARGET")
    monkeypatch.setattr(da, "x86_64_level", lambda: None)
    assert da.build_flags() == da.FLAGS
    tried = []

    def build_with(compiler, flags):
        tried.append(flags)
        if "-DONE_TARGET" in flags:
            raise RuntimeError("cc failed: unknown architecture")
        return "clones.so"

    monkeypatch.setattr(da, "x86_64_level", lambda: "x86-64-v9")
    monkeypatch.setattr(da, "_build_with", build_with)
    assert da._build("cc") == "clones.so"
    assert tried == [(*da.FLAGS, "-march=x86-64-v9", "-DONE_TARGET"), da.FLAGS]
