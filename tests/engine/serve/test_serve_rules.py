"""The API's access and load rules: API keys, loopback-only without a key, 429 when the queue is
full, 503 while closing (the app on the shared fp32 engine, or a small engine of its own, served
by uvicorn on 127.0.0.1)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from engine.serve.app import create_server
from engine.serve.auth import check_bind, is_loopback
from tests.support.servers import ROOT, app_in_thread

CHAT = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


@pytest.fixture
def keyed(engine):
    app = create_server(engine, api_key="s3cret")
    with app_in_thread(app) as url:
        yield url
    app.state.metrics.detach()


def test_api_key_required_on_v1_routes(keyed):
    r = httpx.post(keyed + "/v1/chat/completions", json=CHAT, timeout=60)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = httpx.post(keyed + "/v1/chat/completions", json=CHAT, timeout=60,
                   headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    r = httpx.post(keyed + "/v1/chat/completions", json=CHAT, timeout=60,
                   headers={"Authorization": "Bearer s3cret"})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 2
    assert httpx.get(keyed + "/health").status_code == 200  # health and metrics stay open
    assert httpx.get(keyed + "/metrics").status_code == 200


def test_open_api_only_on_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    check_bind("127.0.0.1", None, False)
    check_bind("0.0.0.0", "key", False)
    check_bind("0.0.0.0", None, True)
    with pytest.raises(ValueError, match="--allow-unauthenticated"):
        check_bind("0.0.0.0", None, False)
    env = {k: v for k, v in os.environ.items() if k != "LLM_PLAYGROUND_API_KEY"}
    r = subprocess.run([sys.executable, "-m", "engine", "serve", "--host", "0.0.0.0"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--api-key" in r.stderr and "Traceback" not in r.stderr


def test_queue_full_is_429_and_frees_the_choices_already_queued(loaded):
    from engine import LLMEngine

    eng = LLMEngine(loaded, max_queue=1, max_num_seqs=1, kv_cache_bytes=32 * 2**20)
    app = create_server(eng)
    try:
        with app_in_thread(app) as url:
            # greedy choices run as n separate engine requests: the second overflows the queue
            r = httpx.post(url + "/v1/completions", timeout=60, json={
                "model": "smollm2-135m", "prompt": "Hello", "max_tokens": 50, "n": 4,
                "temperature": 0})
            assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
            eng_idle = eng.stats()
            for _ in range(100):  # the choices submitted before the refusal are aborted
                if eng_idle.running == eng_idle.waiting == 0:
                    break
                time.sleep(0.05)
                eng_idle = eng.stats()
            assert eng_idle.running == eng_idle.waiting == 0
            assert eng_idle.blocks_used == 0
            app.state.serve.closing = True
            r = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=60)
            assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down"
            assert httpx.get(url + "/health").status_code == 503
    finally:
        eng.shutdown()
