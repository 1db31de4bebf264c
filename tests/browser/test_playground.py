"""A real browser on the page: Playwright driving Debian's Chromium (see docs/deploying.md).

Loads the page, types a prompt, clicks Generate, checks that text streams and that the latency
and KV panels hold data points before the answer ends, inspects a token, then clicks Stop; two
browser contexts generating at once see their requests share engine steps, each marked as its own.
Skipped when /usr/bin/chromium is missing, unless the environment variable CI is set (then the
missing browser is a failure: CI installs Chromium itself).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser
from tests.support.browser import PLOT_POINTS, raw_greedy, require_chromium

require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

from tests.support.servers import launch, wait_until

@pytest.fixture(scope="module")
def page_url(engine, tmp_path_factory):
    from app.state.playground import Playground

    pg = Playground(engine, trace_dir=tmp_path_factory.mktemp("traces"))
    demo, url = launch(pg)
    yield url
    demo.close()
    pg.close()


def test_generate_streams_with_live_panels_then_stop(page_url, browser, engine, tmp_path):
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    # greedy counting runs long: 2048 tokens outlast the checks below even on a loaded machine
    raw_greedy(page, page_url, "1, 2, 3, 4, 5,", max_tokens=2048)
    assert "smollm2" in page.content().lower()
    aborted_before = engine.stats().aborted
    page.locator("#generate-btn").click()

    # text streams: token chips and the completion box fill in while the status says "Decoding"
    assert wait_until(lambda: page.locator("#tokens .tok").count() >= 6, 120, every=0.02), "no tokens streamed"
    status = page.locator("#status").inner_text()
    assert status.startswith("Decoding"), status
    assert len(page.locator("#completion textarea").input_value()) > len("1, 2, 3, 4, 5,")

    # the panels hold data points before the answer ends
    lat = wait_until(lambda: (pts := page.evaluate(PLOT_POINTS, "#latency-plot")) and pts[1] >= 3 and pts, 30)
    assert lat and lat[0] == 1, lat  # one prefill point, several decode points
    kv = wait_until(lambda: (pts := page.evaluate(PLOT_POINTS, "#kv-plot")) and pts[1] >= 3 and pts, 30)
    assert kv, "KV panel has no measured points"
    assert page.locator("#status").inner_text().startswith("Decoding")
    assert "46,080 B per token" in page.locator("#kv-formula").inner_text()
    page.screenshot(path=str(tmp_path / "mid-generation.png"), full_page=True)

    # a token shows its probability and top-5 on hover
    page.locator("#tokens .tok").nth(2).hover()
    tip = page.locator(".tok-tip")
    assert wait_until(tip.is_visible, 5), "no tooltip on hover"
    assert "token #3" in tip.inner_text() and "p =" in tip.inner_text()
    assert tip.locator("tr").count() >= 2  # the top candidates

    # Stop ends the engine's request, not only the display
    page.locator("#stop-btn").click()
    assert wait_until(lambda: "stopped by you" in page.locator("#status").inner_text(), 30)
    assert engine.stats().aborted == aborted_before + 1
    n = page.locator("#tokens .tok").count()
    assert n < 2048
    time.sleep(1.0)
    assert page.locator("#tokens .tok").count() == n
    assert page.locator("#generate-btn").is_enabled()
    assert page.locator("#trace-json").is_enabled()
    with page.expect_download(timeout=30_000) as dl:
        page.locator("#trace-csv").click()
    rows = Path(dl.value.path()).read_text(encoding="utf-8").splitlines()
    assert rows[0].startswith("request_id,phase") and len(rows) == n + 1  # one row per step
    page.close()


def test_empty_prompt_shows_a_message_and_the_page_recovers(page_url, browser):
    page = browser.new_page()
    page.goto(page_url)
    page.wait_for_selector("#generate-btn", timeout=60_000)
    page.locator("#generate-btn").click()
    assert wait_until(lambda: "prompt is empty" in page.locator("#status").inner_text(), 30)
    page.locator("#max-tokens input[type=number]").fill("3")
    page.locator("#max-tokens input[type=number]").press("Tab")
    typed = "Say hi to <b>Ann</b> & <img src=x>."   # HTML in a message is shown as typed
    page.locator("#prompt textarea").fill(typed)
    page.locator("#generate-btn").click()
    assert wait_until(lambda: "Finished" in page.locator("#status").inner_text(), 120)
    assert typed in page.locator("#chatbot").inner_text()
    assert page.locator("#chatbot b, #chatbot img").count() == 0
    page.close()


def test_closing_the_tab_aborts_its_request(page_url, browser, engine):
    page = browser.new_page()
    raw_greedy(page, page_url, "1, 2, 3, 4, 5,")
    before = engine.stats().aborted
    page.locator("#generate-btn").click()
    assert wait_until(lambda: page.locator("#tokens .tok").count() >= 3, 120, every=0.02)
    page.close()
    assert wait_until(lambda: engine.stats().aborted == before + 1, 40), "closing the tab did not abort"
    assert engine.stats().running == 0


def test_two_tabs_each_see_their_own_answer(page_url, browser):
    prompts = ["The capital of France is", "def add(a, b):"]
    pages = []
    for prompt in prompts:
        page = browser.new_page()
        raw_greedy(page, page_url, prompt, max_tokens=12)
        pages.append(page)
    for page in pages:
        page.locator("#generate-btn").click()
    for page, prompt, other in zip(pages, prompts, reversed(prompts)):
        assert wait_until(lambda: "Finished" in page.locator("#status").inner_text(), 120)
        text = page.locator("#completion textarea").input_value()
        assert text.startswith(prompt) and len(text) > len(prompt) and other not in text
        page.close()


SHARED_STEPS = """(sel) => {
  const el = document.querySelector(sel + ' .js-plotly-plot');
  if (!el || !el.data) return null;
  const mine = new Set(), other = new Set();
  for (const t of el.data) for (const x of (t.x || [])) (t.name.startsWith('your') ? mine : other).add(x);
  return [...mine].filter(x => other.has(x)).length;
}"""


def test_two_browsers_share_decode_steps_and_each_sees_its_own_marked(page_url, browser, engine):
    """Two browser contexts (two sessions) generate at once: both requests share engine steps, and
    each page marks its own request "you" in the block tables, the block pool and the step strip.

    Greedy counting never stops early, so the two requests overlap however slow the machine is;
    both are stopped once the pages have shown what we check.
    """
    contexts = [browser.new_context(viewport={"width": 1400, "height": 1000}) for _ in range(2)]
    pages = []
    for ctx, prompt in zip(contexts, ["1, 2, 3, 4, 5,", "10, 20, 30, 40,"]):
        page = ctx.new_page()
        raw_greedy(page, page_url, prompt, max_tokens=200)
        assert page.get_by_role("tab", name="Lessons").count() == 1
        pages.append(page)
    for page in pages:
        page.locator("#generate-btn").click()

    def both_rows(page):  # its own request ("you") and the other browser's, while both stream
        return (page.locator("#block-tables .bt-you").count() == 1
                and page.locator("#block-tables .bt-other").count() >= 1
                and page.locator("#block-pool .bp-grid .bp-mine").count() >= 1)

    try:
        for name, page in zip("AB", pages):
            assert wait_until(lambda: both_rows(page), 90), f"page {name} never showed its own and another request"
        # the step strip holds steps where your request and the other one shared a forward pass
        for name, page in zip("AB", pages):
            page.evaluate("document.querySelector('#step-strip').scrollIntoView()")  # plots draw on screen
            shared = wait_until(lambda: (n := page.evaluate(SHARED_STEPS, "#step-strip")) and n >= 3 and n, 60)
            assert shared, f"page {name}: no step with both requests in the strip"
            # the engine-wide prefix hit rate shows only where the page says the cache is shared
            shared_cache = "shared by every user" in page.locator("#prefix-cache-note").inner_text()
            assert ("prefix-cache hits" in page.locator("#batch-stats").inner_text()) is shared_cache
    finally:
        for page in pages:
            try:
                page.locator("#stop-btn").click(timeout=5_000)
            except sync_api.TimeoutError:  # the request ended by itself meanwhile
                pass
    for page in pages:
        assert wait_until(lambda: page.locator("#generate-btn").is_enabled(), 60)
    assert wait_until(lambda: engine.stats().running == 0, 30)
    for ctx in contexts:
        ctx.close()


def test_the_block_pools_squares_say_which_blocks_they_hold(page_url, browser):
    """Hovering a square of the block pool titles it with its blocks and their state (written
    on hover when a square stands for several blocks, so the timer's frames carry no titles)."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.goto(page_url)
        page.wait_for_selector("#block-pool .bp-grid .bp-cell", timeout=60_000)
        grid = page.locator("#block-pool .bp-grid")
        span = int(grid.get_attribute("data-span") or 1)
        cell = grid.locator(".bp-cell").nth(2)
        cell.scroll_into_view_if_needed()
        cell.hover()
        title = cell.get_attribute("title") or ""
        first, last = 2 * span, min(int(grid.get_attribute("data-n")), 3 * span) - 1
        want = f"blocks {first}–{last}: " if span > 1 else "block 2: "
        assert title.startswith(want), title
        assert title.split(": ", 1)[1].split(" (")[0].split(" —")[0] in {
            "empty", "cached prefix", "other requests", "your request"}, title
    finally:
        page.close()
