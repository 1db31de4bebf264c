"""What the browser tests share: Debian's Chromium, the flags it runs with, and page probes."""

import os
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

PLOT_POINTS = """(sel) => {
  const el = document.querySelector(sel + ' .js-plotly-plot');
  return el && el.data ? el.data.map(t => (t.x || []).length) : null;
}"""
"""JavaScript: the number of x values of each trace of the Plotly plot inside ``sel``."""


def require_chromium() -> None:
    """At a test module's top: skip the module when Debian's Chromium is missing, or fail it
    when the ``CI`` environment variable is set (CI must run the browser tests)."""
    if CHROMIUM.exists():
        return
    if os.environ.get("CI"):
        pytest.fail(f"{CHROMIUM} is missing: install it with `apt-get install -y chromium`",
                    pytrace=False)
    pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium); set CI=1 to make this a "
                "failure", allow_module_level=True)


def raw_greedy(page, url, prompt, max_tokens=None):
    """Open the page, switch to raw completion with greedy settings, and type ``prompt``."""
    page.goto(url)
    page.wait_for_selector("#generate-btn", timeout=60_000)
    page.get_by_text("Raw completion").click()
    values = [("#temperature", "0"), ("#rep-penalty", "1")]
    if max_tokens is not None:
        values.append(("#max-tokens", str(max_tokens)))
    for slider, value in values:
        page.locator(f"{slider} input[type=number]").fill(value)
        page.locator(f"{slider} input[type=number]").press("Tab")
    page.locator("#prompt textarea").fill(prompt)
