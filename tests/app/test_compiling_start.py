"""A fresh start compiles the decode step in the background: the page and the API answer
meanwhile, and the page's decode-step line and ``/metrics`` say how far compiling has got.

``torch.compile`` is replaced by a stand-in whose graphs run the compact forward eagerly and
whose compiling (the first call of each bucket, on the background thread) waits for the test's
go-ahead, so every stage of a cold start is held still long enough to look at. The engine,
the page and the API are the real ones, on the embedded model."""

from __future__ import annotations

import secrets
import threading

import httpx
import pytest
import torch

from app.render.cards import decode_step_html
from app.state.playground import Playground
from engine import LLMEngine
from engine.serve.app import create_server
from tests.support.page_chain import run_generate
from tests.support.servers import app_in_thread, launch, scrape, value, wait_until

BUCKETS = (1, 2, 4)


@pytest.fixture
def held_compiler(monkeypatch):
    """A ``torch.compile`` stand-in: each bucket's compile (a call on the ``decode-compile``
    thread) takes one permit of the returned semaphore; calls from elsewhere run at once."""
    from engine.worker.compiled import compiled_backend

    monkeypatch.setattr(compiled_backend, "DYNAMIC_ROWS", True)   # the default: one shared graph first
    permits = threading.Semaphore(0)

    def compile_(fn, **kwargs):
        def compiled(*args):
            if threading.current_thread().name == "decode-compile":
                assert permits.acquire(timeout=120), "the test never let this bucket compile"
            return fn(*args)
        return compiled

    monkeypatch.setattr(torch, "compile", compile_)
    return permits


def page_line(demo) -> str:
    """What the page's decode-step line shows at its next refresh (its timer's own function)."""
    target = next(b._id for b in demo.blocks.values() if getattr(b, "elem_id", None) == "decode-step")
    tick = next(f for f in demo.fns.values() if f.outputs and f.outputs[0]._id == target
                and any(t[1] == "tick" for t in f.targets))
    line, timer = tick.fn()
    assert timer.active == ("compiling" in line)  # the timer stops once compiling has ended
    return line


def loaded_line(demo) -> str:
    """What the decode-step line shows on a page opened now (its value, read at each load)."""
    target = next(b._id for b in demo.blocks.values() if getattr(b, "elem_id", None) == "decode-step")
    load = next(f for f in demo.fns.values() if f.outputs and f.outputs[0]._id == target
                and any(t[1] == "load" for t in f.targets))
    line, _ = load.fn()
    return line


def test_page_and_api_answer_while_compiling_and_the_line_reports_progress(loaded, held_compiler):
    eng = LLMEngine(loaded, compile="on", compile_batch_sizes=BUCKETS, telemetry=False)
    pg = Playground(eng, monitor=False)
    demo, url = launch(pg)
    try:
        with app_in_thread(create_server(eng, "smollm2-135m")) as api:
            status = eng.compile_status()
            assert (status.status, status.ready) == ("compiling", ())
            line = page_line(demo)
            assert "<b>eager</b> meanwhile" in line and "compiling 1 of 3 batch buckets" in line
            assert "compiling 1 of 3 batch buckets" in loaded_line(demo)
            assert value(scrape(api), "playground_decode_bucket_compiled", bucket="1") == 0

            # nothing compiled yet: both answer, eagerly
            r = httpx.post(api + "/v1/completions", timeout=120, json={
                "model": "smollm2-135m", "prompt": "The sky is", "max_tokens": 8, "temperature": 0})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
            msgs = run_generate(demo, url, secrets.token_hex(8), Prompt="Hi")
            assert any(m.get("msg") == "process_completed" and m.get("success") for m in msgs)
            assert eng.compile_status().steps_eager > 0 and eng.compile_status().ready == ()

            # bucket 1 compiled: its steps run the graph, the line says so, larger batches stay eager
            held_compiler.release()
            assert wait_until(lambda: eng.compile_status().ready == (1,), 60)
            line = page_line(demo)
            assert ("<b>compiled</b> for batch 1, <b>eager</b> above meanwhile (compiling 2 of 3 "
                    "batch buckets") in line
            m = scrape(api)
            assert value(m, "playground_decode_bucket_compiled", bucket="1") == 1
            assert value(m, "playground_decode_bucket_compiled", bucket="2") == 0
            before = eng.compile_status().steps_compiled
            r = httpx.post(api + "/v1/completions", timeout=120, json={
                "model": "smollm2-135m", "prompt": "The sky is", "max_tokens": 8, "temperature": 0})
            assert r.status_code == 200 and eng.compile_status().steps_compiled > before

            # every bucket: the line says compiled
            held_compiler.release(len(BUCKETS))
            assert wait_until(lambda: eng.compile_status().status == "ready", 60)
            assert "decode step: <b>compiled</b> (torch.compile, batch buckets 1, 2, 4" in page_line(demo)
            assert value(scrape(api), "playground_decode_bucket_compiled", bucket="4") == 1
            assert page_line(demo) == decode_step_html(eng.compile_status())
            # a page opened now reads the line at its load, not the start's "compiling"
            assert loaded_line(demo) == decode_step_html(eng.compile_status())
    finally:
        demo.close()
        eng.shutdown()
