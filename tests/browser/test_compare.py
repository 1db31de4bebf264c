"""The Compare tab in a real browser (Playwright and Debian's Chromium) at 1280x720 and 1440x900:
one click from the first screen, both columns stream at once, nothing is clipped, and the chip
where the answers part is marked and on screen in both columns; ``/compare`` through
``gradio_client`` on the same page."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.browser
from tests.support.browser import PLOT_POINTS, require_chromium

require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

COUNT_CHIPS = "(sel) => document.querySelectorAll(sel + ' .tok-body .tok').length"
INSIDE = """(sel) => {
  const chip = document.querySelector(sel + ' .tok-diff');
  if (!chip) return null;
  const body = chip.closest('.tok-body'), c = chip.getBoundingClientRect(), b = body.getBoundingClientRect();
  return {inBody: c.top >= b.top - 1 && c.bottom <= b.bottom + 1, left: c.left, right: c.right,
          bodyRight: b.right, noSideScroll: body.scrollWidth <= body.clientWidth + 1};
}"""


@pytest.mark.parametrize("width,height", [(1280, 720), (1440, 900)])
def test_both_columns_stream_and_the_parting_chip_shows(page_url, browser, width, height):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(page_url)
    tab = page.get_by_role("tab", name="Compare")
    tab.wait_for(timeout=60_000)
    assert tab.bounding_box()["y"] < height  # on the first screen: one click away
    tab.click()
    page.locator("#cmp-preset-greedy-sampling").click()
    page.wait_for_function("() => document.querySelector('#cmp-watch').innerText.includes('Greedy')")
    page.locator("#cmp-settings").get_by_text("Settings: Left and Right").click()
    for side in ("left", "right"):
        box = page.locator(f"#cmp-{side}-max-tokens input[type=number]")
        box.fill("24")
        box.press("Tab")
    page.locator("#cmp-settings").get_by_text("Settings: Left and Right").click()  # closed again
    page.locator("#cmp-run").click()
    both_streaming = False
    end = time.time() + 120
    while time.time() < end:
        status = page.locator("#cmp-status").inner_text()
        counts = [page.evaluate(COUNT_CHIPS, f"#cmp-{s}") for s in ("left", "right")]
        if status.startswith("Streaming") and min(counts) > 0:
            both_streaming = True
        if status.startswith("Finished"):
            break
        time.sleep(0.1)
    assert both_streaming, "the two columns never held chips at once while streaming"
    assert status.startswith("Finished") and "part at token" in status, status
    page.wait_for_timeout(500)
    for side in ("left", "right"):
        col = page.locator(f"#cmp-{side}")
        box = col.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (side, box)
        where = page.evaluate(INSIDE, f"#cmp-{side}")
        assert where is not None, f"no marked chip in the {side} column"
        assert where["inBody"] and where["noSideScroll"] and where["right"] <= where["bodyRight"] + 1, where
    page.locator("#cmp-latency-plot").scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    assert page.evaluate(PLOT_POINTS, "#cmp-latency-plot") == [24, 24] or \
        min(page.evaluate(PLOT_POINTS, "#cmp-latency-plot")) > 0
    assert "answers part at token" in page.locator("#cmp-table").inner_text()
    page.close()


def test_compare_through_gradio_client(page_url):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    client = Client(page_url, verbose=False)
    out = client.predict(prompt="Name a colour.", left={"temperature": 0}, right={"temperature": 0},
                         max_tokens=6, api_name="/compare")
    assert out["left"]["token_ids"] == out["right"]["token_ids"] and out["left"]["first_diff"] is None
    assert {"text", "token_times_s", "ttft_s", "tpot_s", "tokens_per_s", "kv_cache_bytes",
            "weight_bytes"} <= set(out["right"])
    with pytest.raises(AppError, match="right.weights must be one of"):
        client.predict(prompt="Hi", left={}, right={"weights": "int2"}, max_tokens=4, api_name="/compare")
