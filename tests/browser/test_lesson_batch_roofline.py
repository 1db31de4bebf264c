"""The batch-size and memory-bound-or-compute-bound lessons in a real browser (Playwright driving
Debian's Chromium), on a page holding only the Lessons tab over the shared engine.

The batch sweep runs 1, 2, 4, 8 and 16 sequences through the engine and draws both curves with
its conclusion; measuring the machine adds its ridge point to the roofline plot and the table, and
the context slider redraws the model's curve. Skipped when /usr/bin/chromium is missing, unless CI is set.
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
  return el && el.data ? el.data.map(t => ({name: t.name || '', x: Array.from(t.x || []), y: Array.from(t.y || [])})) : null;
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


def test_batch_lesson_sweeps_five_sizes_through_the_engine(page, engine, monkeypatch):
    from app.tabs.lessons import batch

    monkeypatch.setattr(batch, "REPEATS", 1)  # the page's server runs in this process: one round
    page.get_by_role("tab", name="Batch size").click()
    set_number(page, "lesson-batch-tokens", 8)
    finished = engine.stats().finished
    page.locator("#lesson-batch-run").click()
    done = wait_until(lambda: "knee" in page.locator("#lesson-batch-status").inner_text(), 600, every=0.5)
    assert done, page.locator("#lesson-batch-status").inner_text()
    latency, throughput, ideal, decode = page.evaluate(TRACES, "#lesson-batch-plot")[:4]
    assert latency["x"] == throughput["x"] == decode["x"] == [1, 2, 4, 8, 16]
    assert all(v > 0 for v in latency["y"] + throughput["y"] + decode["y"])
    # the ideal: batch × the best decode-only rate per sequence (batch ÷ TPOT ÷ batch)
    one = max(y / b for b, y in zip(decode["x"], decode["y"]))
    assert ideal["y"] == pytest.approx([one * b for b in (1, 2, 4, 8, 16)], rel=1e-6)
    assert decode["y"] == pytest.approx([b * 1000 / ms for b, ms in zip(latency["x"], latency["y"])],
                                        rel=0.02)
    # 1 + 2 + 4 + 8 + 16 measured sequences (one round) and two warm-ups went through the engine
    assert engine.stats().finished - finished >= 33
    assert "8 new tokens per sequence" in page.locator("#lesson-batch-status").inner_text()


def test_roofline_lesson_measures_the_machine_and_follows_the_context(page):
    page.get_by_role("tab", name="Memory-bound or compute-bound").click()
    assert wait_until(lambda: "H200 SXM" in page.locator("#lesson-roof-table").inner_text(), 30)
    assert "this machine" not in page.locator("#lesson-roof-table").inner_text()
    page.locator("#lesson-roof-run").click()
    assert wait_until(lambda: "this machine" in page.locator("#lesson-roof-table").inner_text(), 120, every=0.5)
    traces = page.evaluate(TRACES, "#lesson-roof-plot")
    assert any(t["name"].startswith("ridge of this machine") for t in traces)
    assert sum("datasheet" in t["name"] for t in traces) == 5
    at_512 = traces[0]["y"]
    set_number(page, "lesson-roof-context", 4096)  # more KV cache per sequence: less intensity at large batch
    assert wait_until(lambda: "4,096 tokens" in page.locator("#lesson-roof-table").inner_text(), 30)
    at_4096 = page.evaluate(TRACES, "#lesson-roof-plot")[0]["y"]
    assert len(at_4096) == len(at_512) == 11 and at_4096[-1] < at_512[-1] / 2
    assert any(t["name"].startswith("ridge of this machine") for t in page.evaluate(TRACES, "#lesson-roof-plot"))
