"""A long answer in a real browser: the page shows the API's text, and its frames stay small.

The live panels stream through one channel whose frames carry what changed
(:mod:`app.tabs.playground.live_channel`): its frames late in a 512-token answer are the size of
its early ones, where the page used to resend every figure and the whole answer's panels.
"""

from __future__ import annotations

import statistics
import threading
import time

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]
from tests.support.browser import PLOT_POINTS, raw_greedy, require_chromium

require_chromium()
sync_api = pytest.importorskip("playwright.sync_api")

from tests.support.servers import wait_until

PROMPT = "1, 2, 3, 4, 5,"
TOKENS = 512
# the chips' runs (app.render.tokens): each chip's last box, then again with all chips in one run
RUNS_MOVE_NOTHING = """() => {
  const body = document.querySelector('#tokens .tok-body'), runs = body.querySelectorAll('.tok-run').length;
  body.style.maxHeight = 'none';
  const chips = [...body.querySelectorAll('.tok')];
  const box = (c) => { const r = c.getClientRects(), x = r[r.length - 1]; return [x.left, x.right, x.top]; };
  const before = chips.map(box), one = document.createElement('div');
  one.className = 'tok-run';
  one.append(...chips);
  body.replaceChildren(one);
  const moved = chips.filter((c, i) => box(c).some((v, k) => Math.abs(v - before[i][k]) > 0.5)).length;
  return {runs, moved};
}"""


def api_answer_meanwhile(url: str, prompt: str, tokens: int):
    """The page's request through the API on a thread: the two share the engine's steps (greedy
    tokens do not depend on the batch), so a test waits for one answer's time, not two. Returns
    ``answer`` (a dict that gets ``"text"``) and the started thread."""
    from gradio_client import Client

    answer: dict = {}
    thread = threading.Thread(target=lambda: answer.setdefault("text", Client(url, verbose=False).predict(
        prompt=prompt, temperature=0.0, top_p=1.0, top_k=0, repetition_penalty=1.0,
        max_tokens=tokens, seed=0, raw=True, api_name="/generate")))
    thread.start()
    return answer, thread


def test_a_512_token_answer_equals_the_apis_and_its_frames_do_not_grow(page_url, browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    page = ctx.new_page()
    cdp = ctx.new_cdp_session(page)
    chunks, urls = [], {}
    cdp.send("Network.enable")
    cdp.on("Network.requestWillBeSent", lambda e: urls.__setitem__(e["requestId"], e["request"]["url"]))
    feed = []  # the run's own route (app.state.live_feeds): the frames after the first
    cdp.on("Network.dataReceived", lambda e: chunks.append(e["dataLength"])
           if "queue/data" in urls.get(e["requestId"], "") else feed.append(e["dataLength"])
           if "/playground-live/" in urls.get(e["requestId"], "") else None)
    raw_greedy(page, page_url, PROMPT, max_tokens=TOKENS)
    page.locator("#generate-btn").click()
    api_answer, api_thread = api_answer_meanwhile(page_url, PROMPT, TOKENS)
    # the page timer pauses with the run's first update: from its first chip on, no refresh
    assert wait_until(lambda: page.locator("#tokens .tok").count() > 0, 300, every=0.05)
    streaming = page.evaluate("performance.now()")
    finished = "(document.querySelector('#status') || {textContent: ''}).textContent.includes('Finished')"
    mine = []  # the block pool's squares of this page's request, seen while it streams

    def done():
        mine.append(page.evaluate("document.querySelectorAll('#block-pool .bp-mine').length"))
        return page.evaluate(finished)

    assert wait_until(done, 600, every=0.5)
    ended = page.evaluate("performance.now()")
    # a refresh is a plain call (run/predict); any other event would join the queue
    ticks = page.evaluate("([a, b]) => performance.getEntriesByType('resource').filter((e) => "
                          "/run\\/predict|queue\\/join/.test(e.name) && e.startTime > a && e.startTime < b)"
                          ".map((e) => e.name)", [streaming + 500, ended])
    shown = page.locator("#completion textarea").input_value()
    chips = page.locator("#tokens .tok").count()
    points = page.evaluate(PLOT_POINTS, "#latency-plot")
    runs = page.evaluate(RUNS_MOVE_NOTHING)
    # each frame the live channel delivered, as the JSON line Gradio's diff appended to its log
    sizes = page.evaluate("window.playgroundLive.frames.playground.map(f => JSON.stringify(f).length)")
    api_thread.join(600)
    # the page timer paused while the answer streamed (its frames drew the batching section: the
    # request's blocks grew in the pool) and drew the section again once the answer had ended
    tables = "document.querySelector('#block-tables').textContent"
    assert wait_until(lambda: "No request is running" in page.evaluate(tables), 30, every=0.5)
    ctx.close()
    assert ticks == [] and max(mine) > min(x for x in mine if x) > 0, (ticks, mine)
    assert shown == PROMPT + api_answer["text"]  # the same greedy answer, every character
    assert chips == TOKENS and sum(points) == TOKENS  # one chip and one latency point per token
    # the chips were appended in short runs (each laid out alone), stacked where one run of all
    # the chips puts every chip
    assert runs["runs"] >= TOKENS // 100 and runs["moved"] == 0, runs

    frames = sizes[2:-1]  # the template and the first frame, and the last (the run's end) left out
    quarter = len(frames) // 4
    assert quarter >= 5, sizes
    early, late = statistics.mean(frames[:quarter]), statistics.mean(frames[-quarter:])
    assert late <= 1.5 * early, (early, late, sizes)
    # the stream as a whole: about a frame's bytes per frame, not the answer's (Chromium's count)
    streamed = sum(chunks) + sum(feed)
    assert streamed < 20 * sum(sizes), (streamed, sum(sizes))
    # the page read its run's feed: the frames came that way (Gradio's stream carried the first
    # frame, the final text once and the downloads, besides the page timer's refreshes)
    assert sum(feed) > 0.8 * sum(sizes), (sum(feed), sum(sizes))


def test_clear_and_shift_enter_during_an_answer_leave_its_text_right_and_the_next_one_followed(
        page_url, browser):
    """Mid-answer, the reader scrolls the completion box up, presses Shift+Enter in the prompt box
    (it starts nothing while the run streams: as a second event it started a second run into the
    same panels) and clicks Clear (the run goes on; its frames come by Gradio again, from the
    log's latest part): the box ends on the API's text, not on appends put in the wrong place. The
    next answer is followed to its end again."""
    tokens, prompt = 200, "Once upon a time, in a small village by the sea,"  # words: it overflows the box
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    page = ctx.new_page()
    raw_greedy(page, page_url, prompt, max_tokens=tokens)
    finished = "(document.querySelector('#status') || {textContent: ''}).textContent.includes('Finished')"
    box = "#completion textarea"
    page.locator("#generate-btn").click()
    api_answer, api_thread = api_answer_meanwhile(page_url, prompt, tokens)
    assert wait_until(lambda: page.locator("#tokens .tok").count() >= 40, 300, every=0.2)
    page.evaluate(f"document.querySelector('{box}').scrollTop = 0")
    page.locator("#prompt textarea").press("Shift+Enter")
    page.locator("#clear-btn").click()
    assert wait_until(lambda: page.evaluate(finished), 600, every=0.5)
    shown = page.locator(box).input_value()
    api_thread.join(600)
    assert shown == prompt + api_answer["text"]
    assert f"{tokens} tokens" in page.locator("#status").inner_text()  # one run, not two

    page.locator("#generate-btn").click()  # the box was scrolled up in the last answer
    assert wait_until(lambda: not page.evaluate(finished), 60, every=0.1)
    assert wait_until(lambda: page.evaluate(finished), 600, every=0.5)
    time.sleep(0.5)  # the last frame's scroll, one animation frame later
    top, height, full = page.evaluate(f"(() => {{ const t = document.querySelector('{box}'); "
                                      "return [t.scrollTop, t.clientHeight, t.scrollHeight]; })()")
    ctx.close()
    assert full > height + 100 and top + height >= full - 30, (top, height, full)  # at its end
