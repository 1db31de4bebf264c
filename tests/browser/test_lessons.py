"""The Lessons tab in a real browser (Playwright driving Debian's Chromium).

Serves a page holding only the Lessons tab on the shared engine, runs the live KV cache lesson,
reads the calculator, and moves a sampling slider. Skipped when /usr/bin/chromium is missing, unless CI is set.
"""

from __future__ import annotations

import pytest

from tests.support.browser import ARGS, CHROMIUM, require_chromium
from tests.support.servers import wait_until

pytestmark = pytest.mark.browser
require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

TRACES = """(sel) => {
  const el = document.querySelector(sel + ' .js-plotly-plot');
  return el && el.data ? el.data.map(t => Array.from(t.y || [])) : null;
}"""


@pytest.fixture(scope="module")
def page(lessons_url):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.goto(lessons_url)
        pg.wait_for_selector("#lesson-kv-run", timeout=60_000)
        yield pg
        browser.close()


def set_number(page, elem_id: str, value) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Tab")


def test_kv_lesson_fills_both_curves(page):
    set_number(page, "lesson-kv-tokens", 16)
    page.locator("#lesson-kv-run").click()
    done = wait_until(lambda: "Total time" in page.locator("#lesson-kv-status").inner_text(), 180)
    assert done, page.locator("#lesson-kv-status").inner_text()
    on, off = page.evaluate(TRACES, "#lesson-kv-plot")
    assert len(on) == len(off) == 15


def test_calculator_and_sampling_explorer(page):
    page.get_by_role("tab", name="KV cache calculator").click()
    assert wait_until(lambda: "H200 141 GB" in page.locator("#lesson-calc-table").inner_text(), 30)

    page.get_by_role("tab", name="Sampling explorer").click()
    page.locator("#lesson-ex-run").click()
    bars = wait_until(lambda: (page.evaluate(TRACES, "#lesson-ex-plot") or [[]])[-1], 120)
    assert bars and len(bars) == 20
    set_number(page, "lesson-ex-topk", 2)
    kept = wait_until(lambda: sum(1 for y in page.evaluate(TRACES, "#lesson-ex-plot")[-1] if y > 0) == 2, 30)
    assert kept, page.evaluate(TRACES, "#lesson-ex-plot")
    assert "tokens;" in page.locator("#lesson-ex-answer").inner_text()  # the whole answer is shown
    set_number(page, "lesson-ex-temp", 0)  # greedy: one bar at 1.0
    greedy = wait_until(lambda: page.evaluate(TRACES, "#lesson-ex-plot")[-1][0] == 1.0, 30)
    assert greedy, page.evaluate(TRACES, "#lesson-ex-plot")
    assert sum(1 for y in page.evaluate(TRACES, "#lesson-ex-plot")[-1] if y > 0) == 1


def test_calculator_puts_a_refused_value_back(page):
    page.get_by_role("tab", name="KV cache calculator").click()
    box = page.locator("#lesson-calc-seq input")
    box.fill("5")
    box.press("Tab")
    table = page.locator("#lesson-calc-table")
    assert wait_until(lambda: "at 5 tokens" in table.inner_text(), 30)
    box.fill("0")
    box.press("Tab")
    status = page.locator("#lesson-calc-status")
    assert wait_until(lambda: "sequence length must be" in status.inner_text(), 30), status.inner_text()
    assert wait_until(lambda: box.input_value() == "5", 10), box.input_value()
    assert "at 5 tokens" in table.inner_text()  # the chart and table still show what the box says


def test_latency_against_prompt_length_fills_the_plot_and_the_table(page):
    """One round of whole requests at 64 to 1,024 prompt tokens: three curves of five points,
    a table row per length with the formula, and no prefix-cache hits."""
    page.get_by_role("tab", name="Prefill and decode").click()
    page.locator("#lesson-lat-sweep-tokens input").click()
    page.get_by_role("option", name="8", exact=True).click()
    page.locator("#lesson-lat-sweep-rounds input").click()
    page.get_by_role("option", name="1", exact=True).click()
    page.locator("#lesson-lat-sweep-run").click()
    status = page.locator("#lesson-lat-sweep-status")
    assert wait_until(lambda: "prefix cache served" in status.inner_text(), 300, every=0.5), status.inner_text()
    traces = page.evaluate(TRACES, "#lesson-lat-sweep-plot")
    assert len(traces) == 3 and all(len(t) == 5 and all(v > 0 for v in t) for t in traces)
    text = status.inner_text()
    assert text.count("× 7 =") == 5 and "served 0 tokens" in text and "8 new tokens per request" in text
    assert "one run per length" in text
