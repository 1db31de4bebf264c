"""What the browser tests share: Debian's Chromium, the flags it runs with, and page probes."""

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

PLOT_POINTS = """(sel) => {
  const el = document.querySelector(sel + ' .js-plotly-plot');
  return el && el.data ? el.data.map(t => (t.x || []).length) : null;
}"""
"""JavaScript: the number of x values of each trace of the Plotly plot inside ``sel``."""
