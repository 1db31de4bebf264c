"""An idle page asks its browser for few frames.

Gradio's status tracker redraws at every animation frame while its event is pending; a tracker
unmounted while pending (the app's "Loading..." one, a component hidden by the event updating
it) never stops. The page's head script slows those loops (:mod:`app.server.page_head`) and the
mode switch hides its outputs without unmounting them; before, an idle page in raw completion
mode asked for about 190 animation frames a second (three loops at 60), and a loader's spring
left running by an unmounted tracker kept Svelte's motion loop at about 24 a second.
"""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.browser]
from tests.support.browser import raw_greedy, require_chromium

require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

# counts every requestAnimationFrame call, under whatever the page's own scripts install later
COUNT_FRAMES = """(() => {
  const frame = window.requestAnimationFrame.bind(window);
  window.__frames = 0;
  window.requestAnimationFrame = (callback) => { window.__frames++; return frame(callback); };
})();"""


def test_an_idle_page_in_raw_mode_asks_for_few_animation_frames(page_url, browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    ctx.add_init_script(COUNT_FRAMES)
    page = ctx.new_page()
    raw_greedy(page, page_url, "1, 2, 3,")  # the mode switch hides the chat and the system prompt
    head_first = page.evaluate("document.head.firstElementChild.tagName")
    time.sleep(2)
    before = page.evaluate("window.__frames")
    time.sleep(5)
    per_s = (page.evaluate("window.__frames") - before) / 5
    completion_shown = page.locator("#completion textarea").is_visible()
    chat_shown = page.locator("#chatbot").is_visible()
    ctx.close()
    # the loops nobody sees (two timers and a loader's spring) at one a second each, and the
    # page timer's redraws of the device plot: about 3 a second (about 30 before the spring was
    # slowed, 190 before any of them)
    assert per_s < 8, per_s
    assert head_first == "SCRIPT"
    assert completion_shown and not chat_shown
