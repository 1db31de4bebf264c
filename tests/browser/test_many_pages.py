"""Several browser pages generating at once are served in one batch.

Three pages (three browser sessions) each run a different greedy raw completion at the same
time: each page must show exactly its own answer (the one the engine gives that prompt alone),
and the engine must have decoded the three together: each page's own trace download (the
engine's per-step records) shows decode steps whose batch held all three requests. That is the
behaviour that makes a class of pages fast; how much faster is a speed figure, so it is measured
by `python -m app.bench.pages` (side by side, warm, median), never asserted here on a shared
machine's clock. The test prints the ratio it saw, for information only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]
from tests.support.browser import require_chromium

require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

from app.bench.pages import click_all, set_up_raw_greedy  # noqa: E402
from engine import SamplingParams  # noqa: E402
from tests.support.servers import launch

PROMPTS = ["1, 2, 3, 4, 5,", "10, 20, 30, 40,", "2, 4, 6, 8,"]
TOKENS = 48


@pytest.fixture(scope="module")
def served(engine, tmp_path_factory):
    from app.state.playground import Playground

    pg = Playground(engine, trace_dir=tmp_path_factory.mktemp("traces"))
    demo, url = launch(pg)
    yield url
    demo.close()
    pg.close()


STARTED = "document.querySelector('#generate-btn').disabled"  # Generate is off while a request runs
FINISHED = ("document.querySelector('#status').innerText.startsWith('Finished')"
            " && !document.querySelector('#generate-btn').disabled"
            " && !document.querySelector('#trace-json').disabled")


def _run(pages) -> list[dict]:
    """Click Generate on every page at one moment, wait for all to finish, return their traces.

    The waits poll inside the pages (no round trips from this process, which also serves them).
    """
    click_all(pages)
    for page in pages:
        page.wait_for_function(STARTED, polling=100, timeout=30_000)
    for page in pages:
        page.wait_for_function(FINISHED, polling=250, timeout=180_000)
    traces = []
    for page in pages:
        with page.expect_download(timeout=30_000) as dl:
            page.locator("#trace-json").click()
        traces.append(json.loads(Path(dl.value.path()).read_text(encoding="utf-8")))
    return traces


def _total_decode_rate(traces: list[dict]) -> float:
    """Decode tokens of all traces / (last token of any - first token of any), tokens/s."""
    first = min(t["steps"][0]["end_s"] for t in traces)
    last = max(t["steps"][-1]["end_s"] for t in traces)
    return sum(len(t["steps"]) - 1 for t in traces) / (last - first)


def _batched_together(traces: list[dict]) -> list[int]:
    """Per trace, how many of its decode steps ran in a batch of all ``len(traces)`` requests."""
    return [sum(1 for s in t["steps"][1:] if s["batch_size"] >= len(traces)) for t in traces]


def test_three_pages_at_once_each_see_their_own_answer_and_are_decoded_in_one_batch(served, browser, engine):
    expected = [engine.generate(p, SamplingParams(temperature=0.0, max_tokens=TOKENS), raw=True).text
                for p in PROMPTS]
    assert len(set(expected)) == 3
    contexts = [browser.new_context(viewport={"width": 1280, "height": 720}) for _ in PROMPTS]
    pages = []
    try:
        for ctx, prompt in zip(contexts, PROMPTS):
            page = ctx.new_page()
            set_up_raw_greedy(page, served, prompt, TOKENS)
            pages.append(page)
        _run(pages[:1])  # warm: the first run of a page pays for loading Plotly
        for attempt in range(2):  # a second try only if one page's click reached the server late
            traces = _run(pages)
            for page, trace, prompt, answer in zip(pages, traces, PROMPTS, expected):
                assert trace["text"] == answer and trace["finish_reason"] == "length"
                assert page.locator("#completion textarea").input_value() == prompt + answer
            together = _batched_together(traces)
            if min(together) >= TOKENS // 2:
                break
        print(f"decode steps in a batch of 3, per page: {together}; "
              f"3 pages' total decode tokens/s (information only): {_total_decode_rate(traces):.1f}")
        assert min(together) >= TOKENS // 2, \
            f"of {TOKENS - 1} decode steps, only {together} per page ran with all 3 pages in the batch"
        assert engine.stats().running == 0
    finally:
        for ctx in contexts:
            ctx.close()
