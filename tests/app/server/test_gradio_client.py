"""The launched page through ``gradio_client``: streaming, two clients, abort, bad input.

The app runs in this process on 127.0.0.1 (a free port) around the session's real engine on the
embedded model, so the tests can read the engine's own counters.
"""

from __future__ import annotations

import threading
import time

import pytest

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402

from engine import SamplingParams  # noqa: E402
from tests.support.servers import launch
from tests.support.paths import REPO


@pytest.fixture(scope="module")
def served(engine, tmp_path_factory):
    from app.state.playground import Playground

    pg = Playground(engine, trace_dir=tmp_path_factory.mktemp("traces"))
    demo, url = launch(pg)
    yield pg, url
    demo.close()
    pg.close()


def greedy(engine, prompt: str, n: int) -> str:
    return engine.generate(prompt, SamplingParams(temperature=0, max_tokens=n)).text


def wait_for(cond, timeout=30.0):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_streamed_answer_arrives_in_pieces(served, engine):
    pg, url = served
    prompt = "Write a short poem about a programmer under deadline pressure."
    expected = greedy(engine, prompt, 24)
    job = Client(url, verbose=False).submit(prompt=prompt, temperature=0, top_p=1.0, top_k=0,
                                            repetition_penalty=1.0, max_tokens=24, seed=-1,
                                            api_name="/generate")
    pieces = list(job)
    assert len(pieces) >= 3, pieces
    assert all(b.startswith(a) for a, b in zip(pieces, pieces[1:]))  # each piece extends the last
    assert pieces[-1] == expected
    assert pg.active_count() == 0


def test_two_clients_get_their_own_answers(served, engine):
    _, url = served
    prompts = ["Name three colours.", "写一首关于程序员加班的短诗"]
    expected = [greedy(engine, p, 12) for p in prompts]
    jobs = [Client(url, verbose=False).submit(prompt=p, temperature=0, max_tokens=12, api_name="/generate")
            for p in prompts]
    got = [job.result(timeout=180) for job in jobs]
    assert got == expected
    assert "\ufffd" not in got[1]


def test_cancel_aborts_the_engine_request(served, engine):
    pg, url = served
    before = engine.stats().aborted
    job = Client(url, verbose=False).submit(prompt="1, 2, 3, 4, 5,", raw=True, temperature=0,
                                            max_tokens=300, api_name="/generate")
    assert wait_for(lambda: len(job.outputs()) >= 2, 120), "no streamed output"
    job.cancel()
    assert wait_for(lambda: engine.stats().aborted == before + 1, 30), engine.stats()
    assert wait_for(lambda: pg.active_count() == 0, 10)
    stats = engine.stats()
    assert stats.running == 0 and stats.kv_bytes_live == 0


def test_stop_endpoint_ends_the_request_early(served, engine):
    _, url = served
    client = Client(url, verbose=False)
    before = engine.stats().aborted
    job = client.submit(prompt="1, 2, 3, 4, 5,", raw=True, temperature=0, max_tokens=300, api_name="/generate")
    assert wait_for(lambda: len(job.outputs()) >= 2, 120)
    assert client.predict(api_name="/stop") is True
    text = job.result(timeout=60)
    assert engine.stats().aborted == before + 1
    assert 0 < len(text) < 600  # far fewer than 300 tokens of counting
    stats = client.predict(api_name="/stats")
    assert stats["rolling"]["aborted"] >= 1 and stats["model"]["name"] == engine.info.name


@pytest.mark.parametrize("kwargs,message", [
    ({"prompt": ""}, "prompt is empty"),
    ({"prompt": "Hi", "top_p": 1.5}, "top_p"),
    ({"prompt": "Hi", "temperature": -1}, "temperature"),
    ({"prompt": "Hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "Hi", "max_tokens": 9000}, "context window"),
    ({"prompt": "word " * 9000, "max_tokens": 8}, "context window"),
])
def test_bad_input_errors_then_a_normal_request_works(served, engine, kwargs, message, capfd):
    _, url = served
    client = Client(url, verbose=False)
    capfd.readouterr()
    with pytest.raises(AppError, match=message):
        client.predict(api_name="/generate", **kwargs)
    assert "Traceback" not in capfd.readouterr().err  # a refusal is not a server failure
    assert client.predict(prompt="Say hello.", temperature=0, max_tokens=4, api_name="/generate")


@pytest.mark.slow
def test_full_queue_and_engine_error_reach_the_client(tmp_path):
    from app.state.playground import Playground
    from tests.support.fakes import FakeEngine

    eng = FakeEngine("queue_full")
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    demo, url = launch(pg)
    try:
        client = Client(url, verbose=False)
        with pytest.raises(AppError, match="queue is full"):
            client.predict(prompt="Hi", api_name="/generate")
        eng.script = "error"
        with pytest.raises(AppError, match="engine error.*NaN"):
            client.predict(prompt="Hi", api_name="/generate")
        eng.script = "ok"
        assert client.predict(prompt="Hi", api_name="/generate") == "Hello, world!"
    finally:
        demo.close()


def test_several_page_sessions_share_the_engine_fairly(served, engine):
    """Four API clients at once: all finish with their own greedy answer (FIFO engine queue)."""
    _, url = served
    prompts = [f"Count from {i} to {i + 3}." for i in range(4)]
    expected = {p: greedy(engine, p, 6) for p in prompts}
    results, errors = {}, []

    def run(p):
        try:
            results[p] = Client(url, verbose=False).predict(prompt=p, temperature=0, max_tokens=6,
                                                            api_name="/generate")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not errors and results == expected


@pytest.mark.slow
def test_python_m_app_prints_progress_and_url_then_serves(tmp_path):
    """The README's main command: loading lines, the URL, then a working /generate."""
    import os
    import subprocess
    import sys

    from tests.support.servers import free_port

    port = free_port()
    root = REPO
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "app", "--port", str(port)], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "Playground running at" in line:
                break
        out = "".join(lines)
        assert "Loading smollm2-135m" in out and "Model ready" in out, out
        assert f"http://127.0.0.1:{port}/" in out, out
        text = Client(f"http://127.0.0.1:{port}/", verbose=False).predict(
            prompt="Say hi.", temperature=0, max_tokens=4, api_name="/generate")
        assert text
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _engine_takes_cache_salt() -> bool:
    import inspect

    from engine import LLMEngine

    return "cache_salt" in inspect.signature(LLMEngine.submit).parameters


@pytest.mark.skipif(not _engine_takes_cache_salt(), reason="needs LLMEngine.submit(cache_salt=...)")
@pytest.mark.parametrize("shared", [False, True])
def test_prefix_cache_hits_stay_within_a_session_unless_shared(engine, tmp_path, shared):
    """On the real engine: a session's repeated prompt reuses its cached prefix; another
    session's identical prompt does so only with --shared-prefix-cache."""
    from app.tabs.playground.handlers import make_params
    from app.state.playground import Playground

    pg = Playground(engine, trace_dir=tmp_path, monitor=False, shared_prefix_cache=shared)
    prompt = f"{'shared' if shared else 'salted'} {time.time()}: " + "the quick brown fox jumps over the lazy dog. " * 12

    def computed(session: str) -> tuple[int, int]:
        handle = pg.submit(session, prompt, make_params(0, 1, 0, 0, 1, 2, -1), raw=True)
        handle.result(timeout=120)
        first = next(ev for ev in handle.events if ev.phase == "prefill")
        pg.release(session, handle)
        return first.num_tokens, first.kv_tokens

    n, total = computed("alice")
    assert n == total and total > 64  # the first time, nothing is cached
    again, _ = computed("alice")
    assert again < total  # the same session reuses its own prefix
    other, _ = computed("bob")
    assert (other < total) is shared
