"""The machine profile panel in a real browser (Playwright driving Debian's Chromium) at
1280×720: one panel beside every lesson tab and on no other tab of the page, "Measure again"
fills it with the figures and when they were taken, and a lesson run recorded after the profile
appears on the panel by itself, as the caution that the figures may differ. Skipped when
/usr/bin/chromium is missing, unless CI is set."""

from __future__ import annotations

import re

import pytest

from app.tabs.lessons import last_runs, machine_profile, profile_panel
from tests.support.browser import require_chromium
from tests.support.servers import wait_until

pytestmark = pytest.mark.browser
require_chromium()
pytest.importorskip("playwright.sync_api")

PANEL = "#" + profile_panel.ELEM_ID


@pytest.fixture
def page(browser):
    pg = browser.new_page(viewport={"width": 1280, "height": 720})
    yield pg
    pg.close()


def test_one_panel_beside_every_lesson_measured_again_and_cautioned_on_its_own(page, lessons_url):
    last_runs.clear()
    page.goto(lessons_url)
    page.wait_for_selector("#lesson-kv-run", timeout=60_000)
    panel = page.locator(PANEL)
    for tab in ("Batch size", "Memory-bound or compute-bound", "Remedies"):
        page.get_by_role("tab", name=tab, exact=True).first.click()
        assert wait_until(lambda: panel.count() == 1 and panel.is_visible(), 20), tab
        box = panel.bounding_box()
        assert box["x"] + box["width"] <= 1280 + 1 and box["x"] > 1280 / 2  # at the right, on screen
    before = machine_profile.kept()
    page.locator("#lesson-profile-run").click()
    assert wait_until(lambda: (machine_profile.kept() or {}).get("measured_at") !=
                      (before or {}).get("measured_at"), 60)
    kept = machine_profile.kept()
    stamp = machine_profile.stamp(kept)
    assert wait_until(lambda: stamp in panel.inner_text(), 30), panel.inner_text()
    text = panel.inner_text()
    assert f"{kept['bandwidth_gb_per_s']:,.1f} GB/s" in text and re.search(r"ridge [\d.,]+ ÷ [\d.,]+ = ", text)
    assert "after this profile" not in text
    # a lesson finishing after the profile shows on the panel without a reload
    last_runs.record("batch", {"rows": [], "new_tokens": 24})
    try:
        assert wait_until(lambda: "Batch size ran at" in panel.inner_text(), profile_panel.REFRESH_S + 15)
        assert "may differ" in panel.inner_text()
    finally:
        last_runs.clear()


def test_the_panel_is_not_on_the_other_tabs_of_the_page(page, page_url):
    page.goto(page_url)
    page.wait_for_selector("#generate-btn", timeout=60_000)
    assert page.locator(PANEL).count() == 0 or not page.locator(PANEL).is_visible()
    page.get_by_role("tab", name="Lessons", exact=True).click()
    assert wait_until(lambda: page.locator(PANEL).count() == 1 and page.locator(PANEL).is_visible(), 20)
    page.get_by_role("tab", name="Playground", exact=True).click()
    assert wait_until(lambda: page.locator(PANEL).count() == 0 or not page.locator(PANEL).is_visible(), 20)
