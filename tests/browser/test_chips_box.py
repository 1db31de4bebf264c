"""The token chips' box at 1280x720: three lines that follow the newest chip while the answer
streams, so a long answer ends with its first tokens scrolled out of sight; pointing at the box
shows the answer from its first token. Skipped when /usr/bin/chromium is missing, unless CI is
set."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser
from tests.support.browser import require_chromium

require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

from tests.browser.test_layout import open_page
from tests.browser.test_page_fit import short_answer
from tests.support.servers import wait_until

FIRST_CHIP_SHOWN = """() => {
  const body = document.querySelector('#tokens .tok-body');
  const chip = body.querySelector('.tok');
  const b = body.getBoundingClientRect(), c = chip.getBoundingClientRect();
  return {shown: c.top >= b.top - 1 && c.bottom <= b.bottom + 1, scrolled: body.scrollTop,
          over: body.scrollHeight > body.clientHeight + 1, height: b.height};
}"""


def test_pointing_at_a_finished_answers_chips_shows_its_first_token(page_url, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    short_answer(page, page_url, tokens=240)
    before = page.evaluate(FIRST_CHIP_SHOWN)
    assert before["over"] and before["scrolled"] > 0 and not before["shown"], before  # opens at its end
    box = page.locator("#tokens .tok-body").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    assert wait_until(lambda: page.evaluate(FIRST_CHIP_SHOWN)["shown"], 5), page.evaluate(FIRST_CHIP_SHOWN)
    assert page.evaluate(FIRST_CHIP_SHOWN)["height"] <= 720 * 0.45 + 1
    page.close()


# chips whose line breaks grow the box by several lines at once, one per animation frame, each
# appended right after the box's own scroll to the bottom (its scroll event comes a frame later)
TALL_CHIPS_EACH_FRAME = """async () => {
  const live = window.playgroundLive, body = document.querySelector('#tokens .tok-body');
  live.panels.tokens({set: "<span class='tok'>first</span>"});
  for (let i = 0; i < 30; i++) {
    await new Promise((done) => requestAnimationFrame(() => {
      live.panels.tokens({app: `<span class='tok'>${i}↵<br>↵<br>↵<br></span>`});
      done();
    }));
  }
  await new Promise((done) => setTimeout(done, 300));
  const chips = body.querySelectorAll('.tok'), box = body.getBoundingClientRect();
  const last = chips[chips.length - 1].getBoundingClientRect();
  return {shown: last.top >= box.top - 1 && last.bottom <= box.bottom + 1, top: body.scrollTop,
          height: body.scrollHeight - body.clientHeight};
}"""


def test_the_chips_box_keeps_following_when_its_own_scroll_event_comes_late(page_url, browser):
    """Its own scroll's event arrives after chips with line breaks have moved the bottom down
    by more than the box's 24 px allowance: that event is not the reader's, and the box follows
    on to the last chip."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    open_page(page, page_url)
    page.mouse.move(5, 5)  # not over the box (pointing at it stops the following)
    got = page.evaluate(TALL_CHIPS_EACH_FRAME)
    page.close()
    assert got["shown"] and got["top"] >= got["height"] - 1, got
