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
