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
