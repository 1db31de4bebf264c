"""The playground's first screen in a real browser (Playwright driving Debian's Chromium).

At 1280x720 (a projector) and at 1440x900, while an answer streams (from its first tokens until
the chips fill their box) and without scrolling, the prompt box, Generate and Stop, the token
chips, the six stat cards and the latency and KV cache plots are all inside the window, and so
are the sidebar's max new tokens, seed and KV cache switch. A hovered token keeps its tooltip while new chips stream in, and the step strip's title
fits its panel. Skipped when /usr/bin/chromium is missing, unless CI is set.
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.browser
from tests.support.browser import PLOT_POINTS, require_chromium

require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

from tests.support.servers import wait_until

FIRST_SCREEN = ("prompt", "generate-btn", "stop-btn", "tokens", "stat-cards", "latency-plot", "kv-plot")
SIDEBAR = ("max-tokens", "seed", "use-kv")

# For each id: its box, whether it is rendered (not display:none, not hidden, has a size) and
# the window's scroll position and size.
BOXES = """(ids) => {
  const out = {scrollY: window.scrollY, w: window.innerWidth, h: window.innerHeight, boxes: {}};
  for (const id of ids) {
    const el = document.getElementById(id);
    if (!el) { out.boxes[id] = null; continue; }
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    out.boxes[id] = {left: r.left, top: r.top, right: r.right, bottom: r.bottom,
                     shown: s.display !== 'none' && s.visibility !== 'hidden' && r.width > 0 && r.height > 0};
  }
  return out;
}"""
def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#generate-btn", timeout=60_000)


def start_counting(page) -> None:
    """Start a long greedy raw completion on the open page (it outlasts the checks)."""
    page.get_by_text("Raw completion").click()
    for slider, value in (("#temperature", "0"), ("#rep-penalty", "1"), ("#max-tokens", "2048")):
        page.locator(f"{slider} input[type=number]").fill(value)
        page.locator(f"{slider} input[type=number]").press("Tab")
    page.locator("#prompt textarea").fill("1, 2, 3, 4, 5,")
    page.locator("#generate-btn").click()
    assert wait_until(lambda: page.locator("#tokens .tok").count() >= 6, 120, every=0.05), "no tokens streamed"
    assert wait_until(lambda: (pts := page.evaluate(PLOT_POINTS, "#latency-plot")) and pts[1] >= 2, 60)


def outside(page, ids) -> dict:
    """The ids that are missing, not rendered or not wholly inside the window; the window must
    not have scrolled."""
    got = page.evaluate(BOXES, list(ids))
    assert got["scrollY"] == 0, got
    bad = {}
    for i, b in got["boxes"].items():
        if b is None or not b["shown"] or b["left"] < 0 or b["top"] < 0 or b["right"] > got["w"] + 0.5 \
                or b["bottom"] > got["h"] + 0.5:
            bad[i] = b
    return bad


def stop(page) -> None:
    page.evaluate("() => document.getElementById('stop-btn').click()")
    assert wait_until(lambda: "stopped by you" in page.locator("#status").inner_text(), 60)


@pytest.mark.parametrize("width,height", [(1280, 720), (1440, 900)])
def test_first_screen_holds_the_answer_and_its_cost_while_tokens_stream(page_url, browser, width, height):
    page = browser.new_page(viewport={"width": width, "height": height})
    open_page(page, page_url)
    assert outside(page, SIDEBAR) == {}  # as the page opens, with the sidebar unscrolled
    start_counting(page)  # (setting the sliders below them scrolls the sidebar)
    assert page.locator("#status").inner_text().startswith("Decoding")
    assert outside(page, FIRST_SCREEN) == {}
    # and still once the chips fill their box (it scrolls from then on: the column grows no more)
    full = "() => { const b = document.querySelector('#tokens .tok-body'); return b.scrollHeight > b.clientHeight + 1; }"
    assert wait_until(lambda: page.evaluate(full), 120, every=0.1), "the chips never filled their box"
    assert page.locator("#status").inner_text().startswith("Decoding")
    assert outside(page, FIRST_SCREEN) == {}
    assert page.locator("#stat-cards .stat-card").count() == 6
    assert page.evaluate("() => document.getElementById('stop-btn').disabled") is False  # Stop is live
    stop(page)
    page.close()


def test_a_hovered_token_keeps_its_tooltip_while_the_answer_streams(page_url, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    open_page(page, page_url)
    start_counting(page)
    # the pointer onto the third chip (the reader scrolls the chips back to the top first)
    x, y = page.evaluate("""() => {
      const body = document.querySelector('#tokens .tok-body');
      body.scrollTop = 0;
      const r = body.querySelectorAll('.tok')[2].getBoundingClientRect();
      return [r.left + r.width / 2, r.top + r.height / 2];
    }""")
    page.mouse.move(x, y)
    tip = page.locator(".tok-tip")
    assert wait_until(tip.is_visible, 5), "no tooltip on hover"
    before = page.locator("#tokens .tok").count()
    # several text frames arrive while the pointer rests on the chip
    assert wait_until(lambda: page.locator("#tokens .tok").count() >= before + 4, 60, every=0.1)
    time.sleep(1.0)
    assert tip.is_visible() and "token #3" in tip.inner_text()
    # the chips drawn before are the same elements, not redrawn ones
    assert page.evaluate("() => document.querySelectorAll('#tokens .tok')[2].matches(':hover')")
    stop(page)
    page.close()


def test_step_strip_title_fits_its_panel_at_1440(page_url, browser):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    open_page(page, page_url)
    page.locator("#step-strip").scroll_into_view_if_needed()
    fits = """() => {
      const panel = document.querySelector('#step-strip .js-plotly-plot');
      const title = document.querySelector('#step-strip .gtitle');
      if (!panel || !title) return null;
      return title.getBoundingClientRect().right <= panel.getBoundingClientRect().right + 0.5;
    }"""
    assert wait_until(lambda: page.evaluate(fits) is not None, 30)
    assert page.evaluate(fits)
    page.close()
