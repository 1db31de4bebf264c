"""A real browser on the page in ``--backend openai`` mode, in front of a second process of our
own (``python -m engine serve``), over real HTTP: the text streams, the latency plot fills, the
KV panel shows the remote's usage, the badge names the remote engine and model, and Stop closes
the stream so the server aborts the request. Skipped without /usr/bin/chromium unless CI is set."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

pytestmark = pytest.mark.browser
from tests.support.browser import require_chromium

require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

from tests.support.servers import ROOT, engine_server, free_port, scrape, value
from tests.support.browser import PLOT_POINTS, raw_greedy
from tests.support.servers import wait_until


@pytest.fixture(scope="module")
def remote():
    with engine_server("--dtype", "float32") as url:
        yield url


@pytest.fixture(scope="module")
def page_url(remote):
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", GRADIO_ANALYTICS_ENABLED="False")
    proc = subprocess.Popen([sys.executable, "-m", "app", "--backend", "openai", "--base-url",
                             remote + "/v1", "--host", "127.0.0.1", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    url = f"http://127.0.0.1:{port}/"

    def up():
        assert proc.poll() is None, proc.stderr.read()
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    assert wait_until(up, 120, every=0.5), "the page did not start"
    yield url
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


PLOT_Y_MAX = """(sel) => {
  const el = document.querySelector(sel + ' .js-plotly-plot');
  return el && el.data && el.data[0] ? Math.max(0, ...(el.data[0].y || [])) : null;
}"""


def test_page_streams_from_the_remote_engine(remote, page_url, browser):
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.set_default_timeout(120_000)  # a busy shared machine can hold the page's thread for seconds
    raw_greedy(page, page_url, "1, 2, 3, 4, 5,", max_tokens=120)
    badge = page.locator(".model-badge").first.inner_text()
    assert "llm-playground engine" in badge and "smollm2-135m" in badge and "remote" in badge
    assert "measured on this client" in page.locator("#remote-note").inner_text()
    page.locator("#generate-btn").click()

    # text streams: chips (from the server's logprobs) and the completion box fill in
    assert wait_until(lambda: page.locator("#tokens .tok").count() >= 6, 120, every=0.05), "no tokens"
    assert len(page.locator("#completion textarea").input_value()) > len("1, 2, 3, 4, 5,")
    lat = wait_until(lambda: (pts := page.evaluate(PLOT_POINTS, "#latency-plot")) and pts[1] >= 3 and pts, 60)
    assert lat and lat[0] == 1, lat  # the first token (TTFT), then the gaps between tokens
    assert wait_until(lambda: "Finished" in page.locator("#status").inner_text(), 300)
    assert page.locator("#tokens .tok").count() == 120

    # the KV panel: the server's KV usage from its /metrics, read while the request held blocks
    assert "of its KV cache in use" in page.locator("#kv-formula").inner_text()
    peak = wait_until(lambda: page.evaluate(PLOT_Y_MAX, "#kv-plot"), 30)
    assert peak and peak > 0, "the KV plot never showed the remote's usage"
    assert "remote server" in page.locator("#memory-plot").inner_text()  # says why it is empty
    page.close()


def test_stop_closes_the_stream_and_the_server_frees_the_blocks(remote, page_url, browser):
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.set_default_timeout(120_000)
    raw_greedy(page, page_url, "1, 2, 3, 4, 5,", max_tokens=2048)
    aborted = value(scrape(remote), "playground_request_success_total", finished_reason="abort")
    page.locator("#generate-btn").click()
    assert wait_until(lambda: page.locator("#tokens .tok").count() >= 3, 120, every=0.05), "no tokens"
    assert value(scrape(remote), "playground_kv_cache_usage_perc") > 0
    page.locator("#stop-btn").click()
    assert wait_until(lambda: "stopped by you" in page.locator("#status").inner_text(), 120)

    def idle():
        m = scrape(remote)
        return value(m, "playground_num_requests_running") == 0 and \
            value(m, "playground_kv_cache_usage_perc") == 0 and \
            value(m, "playground_request_success_total", finished_reason="abort") == aborted + 1
    assert wait_until(idle, 30), scrape(remote)
    assert page.locator("#generate-btn").is_enabled()
    page.close()
