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


def serve_lessons(engine):
    """A page holding only the Lessons tab on ``engine``, on a free loopback port.

    Returns:
        ``(url, demo)``: the page's address and the Blocks to ``close()`` afterwards.
    """
    import gradio as gr

    from app.tabs.lessons import build_lessons
    from tests.support.servers import free_port

    with gr.Blocks() as demo:
        with gr.Tab("Lessons"):
            build_lessons(engine)
    demo.queue()
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(),
                            prevent_thread_lock=True, quiet=True)
    return url, demo


def serve_page(engine, trace_dir):
    """The whole page as ``python -m app`` serves it (its CSS, theme and launch settings) on
    ``engine``, on a free loopback port, traces written under ``trace_dir``.

    Returns:
        ``(url, close)``: the page's address and a function that stops it.
    """
    from app.page import build_demo
    from app.server.assets import read_css
    from app.server.launch import launch
    from app.server.main import theme
    from app.state.playground import Playground
    from tests.support.servers import free_port

    pg = Playground(engine, trace_dir=trace_dir)
    demo = build_demo(pg, max_concurrency=8)
    demo.queue(default_concurrency_limit=8)
    url, _ = launch(demo, "127.0.0.1", free_port(), css=read_css(), theme=theme())

    def close() -> None:
        demo.close()
        pg.close()

    return url, close
