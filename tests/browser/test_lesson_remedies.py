"""The Remedies lesson and the roofline lesson's model choice in a real browser (Playwright driving
Debian's Chromium) at 1280×720 and 1440×900, on a page holding only the Lessons tab over the
shared engine.

Remedies: the five thinking questions with their lessons and every bottleneck's table appear;
the roofline: with Llama-2-7B picked, the answer names the batch from which its decode turns
compute-bound on an H100 and both plots redraw for it. Skipped when /usr/bin/chromium is
missing, unless CI is set.
"""

from __future__ import annotations

import pytest

from tests.support.browser import ARGS, CHROMIUM, require_chromium
from tests.support.servers import wait_until

pytestmark = pytest.mark.browser
require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

SIZES = [(1280, 720), (1440, 900)]
TRACE_NAMES = """(sel) => {
  const el = document.querySelector(sel + ' .js-plotly-plot');
  return el && el.data ? el.data.map(t => t.name || '') : null;
}"""
TITLE_OF = """(sel) => {
  const el = document.querySelector(sel + ' .js-plotly-plot');
  return el && el.layout && el.layout.title ? el.layout.title.text : '';
}"""


@pytest.fixture(scope="module")
def chromium():
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


@pytest.fixture(params=SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def page(request, chromium, lessons_url):
    width, height = request.param
    pg = chromium.new_page(viewport={"width": width, "height": height})
    pg.goto(lessons_url)
    pg.wait_for_selector("#lesson-kv-run", timeout=60_000)
    yield pg
    pg.close()


def open_tab(page, name: str) -> None:
    """Click the lesson tab ``name``, through the tab bar's overflow menu when it is folded there."""
    tab = page.get_by_role("tab", name=name, exact=True)
    if tab.count() and tab.first.is_visible():
        tab.first.click()
        return
    menu = page.locator(".overflow-menu:not(.hide)").filter(has_text=name).last
    menu.locator("> button").first.click()
    menu.locator(".overflow-dropdown button", has_text=name).first.click()


def no_sideways_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_remedies_tab_shows_the_questions_and_every_bottleneck(page):
    open_tab(page, "Remedies")
    questions = page.locator("#lesson-rem-questions")
    assert wait_until(lambda: questions.is_visible() and "Q5" in questions.inner_text(), 30)
    text = questions.inner_text()
    for q in ("Q1", "Q2", "Q3", "Q4", "Q5"):
        assert q in text
    assert "Memory-bound or compute-bound" in text and "Batch size" in text and "Sampling explorer" in text
    table = page.locator("#lesson-rem-table").inner_text()
    for b in ("High TTFT", "High TPOT", "KV cache near full", "Weights don't fit", "Throughput flat with batch"):
        assert b in table
    for r in ("prefix cache", "chunked prefill", "speculative decoding", "fp8 KV cache", "sliding window",
              "paging and block sharing", "weight quantization", "a compiled decode step"):
        assert r in table
    assert "press Measure" in table and "computed, not measured" in table
    assert page.locator("#lesson-rem-run").is_visible()
    assert no_sideways_scroll(page)


def test_roofline_with_a_7b_model_reports_the_h100_crossing(page):
    open_tab(page, "Memory-bound or compute-bound")
    answer = page.locator("#lesson-roof-answer")
    assert wait_until(lambda: answer.is_visible() and "H100 SXM" in answer.inner_text(), 30)
    box = page.locator("#lesson-roof-model input")
    box.click()
    box.fill("Llama-2-7b")
    page.get_by_role("option", name="meta-llama/Llama-2-7b-hf").click()
    assert wait_until(lambda: "Llama-2-7b-hf" in answer.inner_text(), 30), answer.inner_text()
    text = answer.inner_text()
    assert "compute-bound on an H100 SXM" in text and "from batch 296" in text
    assert "= 512 FLOPs per byte" in text
    assert wait_until(lambda: page.evaluate(TITLE_OF, "#lesson-roof-plot").endswith("Llama-2-7b-hf"), 30)
    names = page.evaluate(TRACE_NAMES, "#lesson-roof-plot")
    assert any(n.startswith("this page's model") for n in names)  # the engine's own curve stays
    assert sum("datasheet" in n for n in names) == 5
    assert page.evaluate(TITLE_OF, "#lesson-roof-prefill-plot").endswith("Llama-2-7b-hf")
    assert "| H100 SXM" not in page.locator("#lesson-roof-table").inner_text()  # rendered as a table
    assert "296" in page.locator("#lesson-roof-table").inner_text()
    assert no_sideways_scroll(page)
