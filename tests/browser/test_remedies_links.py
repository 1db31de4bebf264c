"""Every link of the Remedies view, clicked in a real browser (Playwright driving Debian's
Chromium) at 1280×720, on a page holding only the Lessons tab and on the whole page: the link opens the lesson tab that
holds its figure, the figure is visible and scrolled into the window, and it is the figure the
link names (its title, a panel's title, a trace's or a row's name); a reader who scrolls away
while the script still follows a figure keeps their place. Skipped when
/usr/bin/chromium is missing, unless CI is set."""

from __future__ import annotations

import re

import pytest

from tests.support.browser import require_chromium
from tests.support.servers import wait_until

pytestmark = pytest.mark.browser
require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

LINKS = "#lesson-rem-table a[href^='#lesson-'], #lesson-rem-table ~ * a[href^='#lesson-']"
SHOWN = """(id) => {
  const el = document.getElementById(id);
  if (!el || el.offsetParent === null) return null;
  const r = el.getBoundingClientRect();
  const plot = el.querySelector('.js-plotly-plot');
  let names = [];
  if (plot && plot.layout) {
    const L = plot.layout, text = (t) => (t && (t.text || t)) || '';
    names.push(text(L.title));
    (L.annotations || []).forEach(a => names.push(a.text || ''));
    Object.keys(L).filter(k => /^[xy]axis/.test(k)).forEach(k => names.push(text(L[k].title)));
    (plot.data || []).forEach(t => names.push(t.name || ''));
  } else {
    names.push(el.innerText);
  }
  return {top: r.top, height: r.height, plot: !!plot, text: names.join('\\n')};
}"""


SWEEP = [{"batch": b, "throughput_tokens_per_s": 30.0 * b ** 0.5, "per_token_latency_ms": 18.0 + b,
          "ttft_s": 0.05 * b, "decode_throughput_tokens_per_s": 40.0 * b ** 0.5, "prompt_tokens": 30,
          "cached_prompt_tokens": 0} for b in (1, 2, 4, 8, 16)]


def lessons_page(browser, url: str):
    """A 1280x720 page on the lessons-only server ``url``, its lessons drawn."""
    pg = browser.new_page(viewport={"width": 1280, "height": 720})
    pg.goto(url)
    pg.wait_for_selector("#lesson-kv-run", timeout=60_000)
    return pg


@pytest.fixture(params=["lessons", "whole"], ids=["lessons-page", "whole-page"])
def page(request, browser):
    """The lessons-only page, or the whole page as ``python -m app`` serves it (Remedies under
    its Lessons tab), after a batch sweep was kept (the Batch size tab draws the server's last
    one at load; its summary holds the TTFT the scheduling remedy points at)."""
    from app.tabs.lessons import batch, last_runs

    batch.record_last_run(SWEEP, 24)
    request.addfinalizer(last_runs.clear)
    if request.param == "lessons":
        pg = lessons_page(browser, request.getfixturevalue("lessons_url"))
    else:
        pg = browser.new_page(viewport={"width": 1280, "height": 720})
        pg.goto(request.getfixturevalue("page_url"))
        pg.wait_for_selector("#generate-btn", timeout=60_000)
        pg.get_by_role("tab", name="Lessons", exact=True).click()
        pg.wait_for_selector("#lesson-kv-run", timeout=60_000)
    yield pg
    pg.close()


def open_remedies(page) -> None:
    page.get_by_role("tab", name="Remedies", exact=True).first.click()
    page.wait_for_selector("#lesson-rem-table a[href^='#lesson-']", timeout=30_000)


def test_each_remedies_link_opens_the_figure_it_names(page):
    open_remedies(page)
    links = page.locator(LINKS)
    count = links.count()
    # every lesson tab the table names by a link, and this view's own chunked-prefill figure
    hrefs = {links.nth(i).get_attribute("href") for i in range(count)}
    assert {"#lesson-rem-chunk-plot", "#lesson-batch-plot", "#lesson-spec-plot", "#lesson-quant-plot",
            "#lesson-roof-overhead-plot", "#lesson-calc-table", "#lesson-lat-sweep-plot",
            "#lesson-batch-status"} <= hrefs, hrefs
    assert count >= 14
    for i in range(count):
        open_remedies(page)
        link = page.locator(LINKS).nth(i)
        text, target = link.inner_text(), link.get_attribute("href")[1:]
        tab, figure = re.fullmatch(r"(?:Lessons › )?(.+?): “(.+)”", text).groups()
        link.click()
        shown = {}

        def arrived():
            shown.clear()
            shown.update(page.evaluate(SHOWN, target) or {})
            return (bool(shown) and -1 <= shown["top"] < 720 - 40 and shown["height"] > 40
                    and shown["text"].strip() != "")

        assert wait_until(arrived, 20), (text, shown)
        selected = page.locator("button[role=tab][aria-selected=true]").all_inner_texts()
        assert tab in [s.strip() for s in selected], (text, selected)
        assert figure.lower() in shown["text"].lower(), (text, shown["text"][:300])
        assert shown["plot"] == target.endswith("-plot"), text


def test_a_lesson_finishing_shows_in_the_remedies_without_a_reload(browser, lessons_url):
    from app.tabs.lessons import last_runs, remedies

    last_runs.clear()
    pg = lessons_page(browser, lessons_url)
    try:
        open_remedies(pg)
        table = pg.locator("#lesson-rem-table")
        assert "20.0 → 50.0 tok/s" not in table.inner_text()
        last_runs.record("compile", {"batch": 1, "eager_tokens_per_s": 20.0, "compiled_tokens_per_s": 50.0})
        assert wait_until(lambda: "20.0 → 50.0 tok/s" in table.inner_text(), remedies.REFRESH_S + 15)
    finally:
        last_runs.clear()
        pg.close()


def test_scrolling_away_from_a_followed_figure_keeps_the_readers_place(browser, lessons_url):
    """The link script follows its figure while the figures above it still draw; a reader who
    scrolls meanwhile is not pulled back to it (nor is the next link's click moved from under
    the pointer)."""
    pg = lessons_page(browser, lessons_url)
    try:
        open_remedies(pg)
        top = "() => document.getElementById('lesson-rem-chunk-plot').getBoundingClientRect().top"
        scroll_y = "() => window.scrollY"
        pg.locator("a[href='#lesson-rem-chunk-plot']").first.click()
        # scrolled to it (near the page's end it cannot reach the window's top)
        assert wait_until(lambda: pg.evaluate(scroll_y) > 0 and 0 <= pg.evaluate(top) < 680, 10), pg.evaluate(top)
        followed = pg.evaluate(scroll_y)
        pg.mouse.move(640, 360)
        pg.mouse.wheel(0, -500)   # the reader scrolls up, while the script still follows
        up = followed - min(followed, 500) / 2
        assert wait_until(lambda: pg.evaluate(scroll_y) <= up, 5), (followed, pg.evaluate(scroll_y))
        y = pg.evaluate(scroll_y)
        pg.wait_for_timeout(1500)
        assert abs(pg.evaluate(scroll_y) - y) < 2, (followed, y, pg.evaluate(scroll_y))
    finally:
        pg.close()
