"""The compile process: a child that generates the decode step's kernels into inductor's cache
while the serving process keeps serving, then the serving process's own compile loads them
(engine/worker/compiled/compile_process.py)."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest

from engine import LLMEngine, SamplingParams
from engine.config import EngineConfig
from engine.worker.compiled import compile_process
from engine.worker.compiled.compile_process import CompileJob, CompileProcess

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


@pytest.fixture(scope="module")
def int4():
    """The default CPU model (int4 from the GGUF), loaded by ``load_model``: it has load arguments."""
    from engine.model.loader import load_model

    return load_model("smollm2-135m", progress=None)


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_a_marker_per_configuration_says_its_graphs_were_compiled(cache, monkeypatch):
    key = compile_process.graph_key(("buckets", (1, 2)))
    assert key == compile_process.graph_key(("buckets", (1, 2)))
    assert key != compile_process.graph_key(("buckets", (1, 2, 4)))
    monkeypatch.setenv(compile_process.ENV, "auto")
    assert not compile_process.compiled_before(key) and compile_process.wanted(key)
    compile_process.mark_compiled(key)
    assert compile_process.compiled_before(key) and not compile_process.wanted(key)
    assert (cache / "playground-graphs" / key).exists()
    monkeypatch.setenv(compile_process.ENV, "1")
    assert compile_process.wanted(key)                    # forced
    monkeypatch.setenv(compile_process.ENV, "0")
    assert not compile_process.wanted(compile_process.graph_key(("other",)))


def test_a_child_whose_model_does_not_load_reports_why_and_ends(cache):
    import threading

    job = CompileJob({"name": "no-such-model-folder", "device": "cpu"}, EngineConfig(), key="k")
    proc = CompileProcess(job, threading.Event())
    try:
        assert proc.wait_for(1) is False                   # ended without compiling anything
        assert proc.proc.returncode not in (0, None)
        assert "no-such-model-folder" in proc.why()
    finally:
        proc.close()


def test_the_child_exits_when_the_serving_process_goes(cache):
    """Its standard input closing (the parent gone) ends it, even in the middle of loading."""
    import threading

    job = CompileJob({"name": "smollm2-135m", "device": "cpu"}, EngineConfig(), key="k")
    proc = CompileProcess(job, threading.Event())
    time.sleep(1.0)
    proc.proc.stdin.close()
    start = time.monotonic()
    proc.proc.wait(timeout=30)
    assert time.monotonic() - start < 30 and proc.proc.returncode == 0


def test_a_child_that_goes_silent_is_killed(cache, monkeypatch):
    """No report for SILENT_S seconds (here 1; loading the model alone takes longer): the child
    is taken for hung, killed, and the wait says so."""
    import threading

    monkeypatch.setattr(compile_process, "SILENT_S", 1.0)
    job = CompileJob({"name": "smollm2-135m", "device": "cpu"}, EngineConfig(), key="k")
    proc = CompileProcess(job, threading.Event())
    try:
        start = time.monotonic()
        assert proc.wait_for(1) is False and time.monotonic() - start < 20
        proc.proc.wait(timeout=30)
        assert "silent for 1 s: killed" in proc.why()
    finally:
        proc.close()


FRESH = "PLAYGROUND_TEST_FRESH_INTERPRETER"


@pytest.mark.slow
def test_a_child_compiles_first_and_the_engine_loads_its_kernels():
    """The test below, in an interpreter of its own, as a serving process is: run inside the
    whole suite's process, after hundreds of other engines, its serving side once found none of
    the child's graphs in the cache (``cache_hits`` 0; the cause was not found), while alone it
    finds them every time. What it checks is the fresh process's behaviour."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"{__file__}::test_in_a_fresh_interpreter_a_child_compiles_first"],
                          env=dict(os.environ, **{FRESH: "1"}), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-3000:]


@pytest.mark.skipif(os.environ.get(FRESH) != "1", reason="run by the test above, in a fresh interpreter")
def test_in_a_fresh_interpreter_a_child_compiles_first(int4, monkeypatch):
    """Forced on (a test machine's cache may hold these graphs already): the serving engine
    waits for the child's report of each bucket, compiles it from the cache, and answers with
    the eager engine's tokens; the configuration is marked compiled for the next start. The
    child runs at the serving process's priority, not at the compile thread's lower one, and
    after bucket 1 it waits, idle, until the serving process has loaded that graph."""
    monkeypatch.setenv(compile_process.ENV, "1")
    seen, nice, held = [], [], []
    real = CompileProcess.wait_for
    real_go = CompileProcess.go

    def cpu_s(pid):
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def go(self):
        if not held:       # bucket 1 is loaded: the child has not gone on to the next graph
            before = cpu_s(self.proc.pid)
            time.sleep(2.0)
            held.append((sorted(self.ready), cpu_s(self.proc.pid) - before))
        real_go(self)

    def wait_for(self, rows):
        if not nice:  # the child is compiling bucket 1 now
            nice.append(os.getpriority(os.PRIO_PROCESS, self.proc.pid))
        ok = real(self, rows)
        seen.append((rows, ok, sorted(self.ready)))
        return ok

    monkeypatch.setattr(CompileProcess, "wait_for", wait_for)
    monkeypatch.setattr(CompileProcess, "go", go)
    eng = LLMEngine(int4, compile="on", compile_batch_sizes=(1, 2), telemetry=False)
    ref = LLMEngine(int4, compile="off", telemetry=False)
    try:
        assert eng.compile_status().compiler == "process"
        status = eng.wait_compiled(900)
        assert (status.status, status.ready, status.compiler) == ("ready", (1, 2), "process")
        assert status.cache_hits > 0                       # the child's kernels, loaded here
        assert [(rows, ok) for rows, ok, _ in seen] == [(1, True), (2, True), (None, True)]
        assert 1 in seen[0][2]                             # the child had reported bucket 1
        (ready, busy_s), = held
        assert ready == [1] and busy_s < 0.3, held         # and then waited
        assert nice == [os.getpriority(os.PRIO_PROCESS, 0)]
        assert compile_process.compiled_before(eng.runner.backend.key)
        prompt = "The capital of France is"
        assert eng.generate(prompt, GREEDY).token_ids == ref.generate(prompt, GREEDY).token_ids
        assert eng.compile_status().steps_compiled > 0
    finally:
        eng.shutdown()
        ref.shutdown()


@pytest.mark.slow
def test_a_failed_child_leaves_the_compile_to_the_engine(int4, monkeypatch):
    """A child that can't build the same runner (here: its model does not load) costs only
    time: the engine compiles every bucket itself and says why the child stopped."""
    broken = dataclasses.replace(int4, load_args=dict(int4.load_args, name="no-such-model-folder"))
    monkeypatch.setenv(compile_process.ENV, "1")
    eng = LLMEngine(broken, compile="on", compile_batch_sizes=(1,), telemetry=False)
    try:
        status = eng.wait_compiled(900)
        assert (status.status, status.ready, status.compiler) == ("ready", (1,), "thread")
        assert "no-such-model-folder" in eng.runner.backend.state.compiler_note
    finally:
        eng.shutdown()


def test_the_page_line_says_where_the_kernels_are_generated():
    from app.render.cards import decode_step_html
    from engine.protocol import CompileStatus

    busy = decode_step_html(CompileStatus(status="compiling", buckets=(1, 2), compiler="process",
                                          compiling_s=12))
    assert "compiling 1 of 2 batch buckets in a separate process, 12 s so far" in busy
    done = decode_step_html(CompileStatus(path="compiled", status="ready", buckets=(1, 2),
                                          ready=(1, 2), compile_s=9, compiler="process"))
    assert "after a separate process generated the kernels" in done
    assert os.environ.get("LLM_PLAYGROUND_COMPILE_PROCESS") == "0"   # tests' engines compile in-process
