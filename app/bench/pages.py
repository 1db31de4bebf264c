"""What open pages cost next to the API: N browser pages against the same N API calls.

``python -m app.bench.pages`` starts the playground in a child process (the page of
``python -m app``, on a free loopback port) and waits until its decode step has compiled, so no
turn mixes eager and compiled steps. Then for each N in ``--pages`` it runs the same N greedy raw
completions of ``--tokens`` tokens at once, in turns: through the API (``gradio_client``
``/generate``, one client per request) and from N headless Chromium pages (one browser context
per page, so N sessions, each clicking Generate at one moment). Turns alternate A B A B after one
warm-up turn of each; each figure is the median over ``--repeats`` turns.

What a student sees is stamped inside each page: a ``MutationObserver`` records the moment its
status line reads "Finished" (and the moment its last token chip appeared), on the page's own
clock, from the click. An API turn's time is the moment its last call returned. Each turn also
measures:

- the browser's CPU seconds (every Chromium process this driver started, ``psutil``), per
  streamed token;
- the server's CPU seconds (the child process, every thread);
- the bytes and the number of chunks each page's streams delivered (Chromium's DevTools
  protocol, ``Network.dataReceived`` on ``queue/data`` and on the run's feed,
  ``/playground-live/``), and the page's script, style and layout
  time (``Performance.getMetrics``).

Last, one page is left open and idle after an answer, and the browser's and server's CPU per
second is read over 15 s: what an open tab costs a student's machine and the server.

``--long N`` also streams one answer of N tokens into one page and compares its first and last
100 tokens: bytes per frame and browser CPU per token (a frame must cost what changed, not the
answer so far).

``--compare`` measures the Compare tab instead: each page runs one comparison (both default
sides: greedy, ``--tokens`` tokens each, two requests sharing the engine's steps), "Finished"
stamped on the Compare status line, against as many ``/compare`` calls.

``--pin`` runs the server on CPU 0 (started under ``taskset``, so its thread pools size
themselves to that one core) and this driver, its API clients and the browsers it launches on
CPU 1: the browsers can't take the server's core, as in a classroom where they run on the
students' machines.

Needs Playwright and Debian's Chromium at ``/usr/bin/chromium`` (see docs/deploying.md).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# greedy continuations that run to the token limit (no early EOS), one per page
PROMPTS = ["1, 2, 3, 4, 5,", "10, 20, 30, 40,", "2, 4, 6, 8,", "100, 200, 300,",
           "5, 10, 15, 20,", "3, 6, 9, 12,", "7, 14, 21,", "11, 12, 13, 14,"]
RECORD = "BENCH-REQUEST "


# ---- the server (child process) ----------------------------------------------------------------
class _RecordingRolling:
    """The engine's rolling statistics, also printing each finished request's token times.

    ``RollingStats.add`` runs on the engine thread right after the request ends, so
    ``perf_counter()`` there is its finish time; the first and last token times follow from the
    metrics (e2e, TTFT, decode time).
    """

    def __init__(self, inner) -> None:
        self.inner = inner

    def add(self, output) -> None:
        self.inner.add(output)
        m = output.metrics
        finished = time.perf_counter()
        first = finished - m.e2e_s + m.ttft_s
        print(RECORD + json.dumps({"id": output.request_id, "tokens": m.output_tokens,
                                   "first_s": first, "last_s": first + m.decode_time_s,
                                   "arrival_s": finished - m.e2e_s, "finished_s": finished,
                                   "reason": output.finish_reason, "text": output.text}), flush=True)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def serve(port: int) -> None:
    """The page exactly as ``python -m app`` serves it, plus the per-request record lines."""
    from app.server.launch import set_gradio_env

    set_gradio_env()
    from engine import LLMEngine, load_model

    from app.server.assets import read_css
    from app.server.launch import launch
    from app.server.main import theme
    from app.state.playground import Playground
    from app.page import build_demo

    engine = LLMEngine(load_model("smollm2-135m"), max_queue=32, telemetry=True)
    engine.rolling = _RecordingRolling(engine.rolling)
    engine.output_processor.rolling = engine.rolling  # the one that sees every finished request
    pg = Playground(engine)
    concurrency = 2 * 32 + 4  # as app.server.main
    demo = build_demo(pg, max_concurrency=concurrency)
    demo.queue(default_concurrency_limit=concurrency)
    # as app.server.main: its middleware serves plotly.js (without it no plot is ever drawn)
    launch(demo, port=port, theme=theme(), css=read_css(), max_threads=concurrency + 8)
    status = engine.wait_compiled(1800)  # measure compiled steps only
    print(f"decode step: {status.path} ({status.status}, buckets {list(status.ready)})", file=sys.stderr, flush=True)
    print(f"BENCH-READY http://127.0.0.1:{port}/ {os.getpid()}", flush=True)
    try:
        demo.block_thread()
    finally:
        pg.close()
        engine.shutdown()


# ---- the driver -------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The child process; :meth:`take` returns the records of requests finished since the last call."""

    def __init__(self, timeout_s: float = 300.0, cpu: int | None = None) -> None:
        port = _free_port()
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        self.proc = subprocess.Popen([*pin, sys.executable, "-m", "app.bench.pages", "--serve", str(port)],
                                     stdout=subprocess.PIPE, text=True, bufsize=1,
                                     cwd=str(Path(__file__).resolve().parents[2]))
        self._records: queue.Queue = queue.Queue()
        ready: queue.Queue = queue.Queue()

        def read() -> None:
            for line in self.proc.stdout:
                if line.startswith(RECORD):
                    self._records.put(json.loads(line[len(RECORD):]))
                elif line.startswith("BENCH-READY "):
                    ready.put(line.split()[1:])
                else:
                    sys.stderr.write(line)

        threading.Thread(target=read, daemon=True).start()
        try:
            self.url, pid = ready.get(timeout=timeout_s)
        except queue.Empty:
            self.close()
            raise RuntimeError("the playground did not start") from None
        self.pid = int(pid)

    def cpu_s(self) -> float:
        """CPU seconds the server process has used so far (user + system, every thread)."""
        import psutil

        t = psutil.Process(self.pid).cpu_times()
        return t.user + t.system

    def wait(self, n: int, timeout_s: float = 600.0) -> list[dict]:
        """The next ``n`` finished requests' records."""
        out = []
        end = time.time() + timeout_s
        while len(out) < n:
            out.append(self._records.get(timeout=max(0.1, end - time.time())))
        return out

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def browser_cpu_s() -> float:
    """CPU seconds used so far by every Chromium process this driver started (user + system)."""
    import psutil

    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            if "chrom" in proc.name().lower():
                t = proc.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            pass
    return total


PAGE_FILTERS = {"top_p": 0.95, "top_k": 50, "min_p": 0.0}
"""The sidebar's start values the pages leave as they are (:func:`set_up_raw_greedy` sets the
others), sent by the API side too, so both sides run the same request: a greedy row still runs
top-k and top-p, for the probabilities its chips show (``tests/app/test_page.py`` checks these
against the page). Before 2026-12-05 the API side sent top-p 1 and top-k 0, and its engine
skipped the filters the pages' engine ran."""


class ApiSide:
    """N ``gradio_client`` clients, one request each per turn, started together."""

    requests_per_call = 1

    def __init__(self, url: str, n: int, tokens: int) -> None:
        from gradio_client import Client

        self.clients = [Client(url, verbose=False) for _ in range(n)]
        self.tokens = tokens

    def call(self, i: int, client) -> None:
        """Client ``i``'s one request of a turn: the pages' request (:data:`PAGE_FILTERS`)."""
        client.predict(prompt=PROMPTS[i], temperature=0.0, repetition_penalty=1.0,
                       max_tokens=self.tokens, seed=0, raw=True, api_name="/generate",
                       **PAGE_FILTERS)

    def turn(self, server: Server) -> dict:
        errors, done = [], []
        go = threading.Barrier(len(self.clients) + 1)

        def one(i: int, client) -> None:
            go.wait()
            try:
                self.call(i, client)
                done.append(time.time())
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i, c)) for i, c in enumerate(self.clients)]
        for t in threads:
            t.start()
        go.wait()
        t0 = time.time()
        for t in threads:
            t.join()
        records = server.wait(self.requests_per_call * len(self.clients))
        if errors:
            raise RuntimeError(f"API request failed: {errors[0]}")
        return {"times_s": sorted(d - t0 for d in done), "tokens": sum(r["tokens"] for r in records)}


class CompareApiSide(ApiSide):
    """N ``gradio_client`` clients, one ``/compare`` call each per turn (two greedy requests of
    ``tokens`` tokens, the Compare tab's default sides), started together."""

    requests_per_call = 2

    def call(self, i: int, client) -> None:
        client.predict(prompt=PROMPTS[i], left={}, right={}, max_tokens=self.tokens,
                       api_name="/compare")


# Stamps, on the page's own clock, the moment its status reads "Finished" after a click and the
# moment its last chip appeared; counts the chips. Installed once per page.
STAMPS_JS = """(ids) => {
  const b = window.__bench = {armed: false, clicked: 0, finished: 0, lastChip: 0, chips: 0};
  const now = () => performance.timeOrigin + performance.now();
  const st = document.querySelector(ids.status);
  new MutationObserver(() => {
    if (b.armed && st.textContent.trim().startsWith('Finished')) { b.finished = now(); b.armed = false; }
  }).observe(st, {subtree: true, childList: true, characterData: true});
  const body = document.querySelector(ids.tokens), chips = body.getElementsByClassName('tok');
  new MutationObserver(() => {
    b.lastChip = now(); b.chips = chips.length;
    if (b.chipTimes) while (b.chipTimes.length < b.chips) b.chipTimes.push(b.lastChip);  // when asked
  }).observe(body, {childList: true, subtree: true});
}"""
CLICK_AT = """([t, run]) => setTimeout(() => {
  const b = window.__bench;
  if (b) { b.armed = true; b.finished = 0; b.clicked = performance.timeOrigin + performance.now(); }
  document.querySelector(run).click();
}, Math.max(0, t - Date.now()))"""


class PageSide:
    """N pages (one browser context each) set to raw greedy completion of one prompt each, with
    their stream's chunks and DevTools metrics recorded."""

    requests_per_page = 1
    ids = {"status": "#status", "tokens": "#tokens .tok-body", "run": "#generate-btn"}

    def __init__(self, browser, url: str, n: int, tokens: int, viewport=(1280, 720)) -> None:
        self.pages, self.cdp, self.chunks = [], [], []
        for i in range(n):
            ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
            page = ctx.new_page()
            cdp = ctx.new_cdp_session(page)
            chunks: list = []
            watch_stream(cdp, chunks)
            cdp.send("Performance.enable")
            self.set_up(page, url, PROMPTS[i], tokens)
            page.evaluate(STAMPS_JS, self.ids)
            self.pages.append(page)
            self.cdp.append(cdp)
            self.chunks.append(chunks)

    def set_up(self, page, url: str, prompt: str, tokens: int) -> None:
        set_up_raw_greedy(page, url, prompt, tokens)

    def turn(self, server: Server, timeout_s: float = 600.0) -> dict:
        for c in self.chunks:
            c.clear()
        metrics0 = [perf_metrics(c) for c in self.cdp]
        click_all(self.pages, button=self.ids["run"])
        records = server.wait(self.requests_per_page * len(self.pages), timeout_s)
        stamps = []
        for page in self.pages:  # the page has drawn its last frame and can run again
            page.wait_for_function("(run) => window.__bench.finished > 0 && !document.querySelector(run).disabled",
                                   arg=self.ids["run"], polling=250, timeout=timeout_s * 1000)
            stamps.append(page.evaluate("({...window.__bench})"))
        metrics = [{k: perf_metrics(c)[k] - m0[k] for k in m0} for c, m0 in zip(self.cdp, metrics0)]
        sizes = [x[1] for c in self.chunks for x in c]
        return {"times_s": [(b["finished"] - b["clicked"]) / 1000 for b in stamps],
                "last_chip_s": [(b["lastChip"] - b["clicked"]) / 1000 for b in stamps],
                "chips": [b["chips"] for b in stamps], "tokens": sum(r["tokens"] for r in records),
                "chunks": len(sizes), "stream_bytes": sum(sizes),
                "script_s": sum(m["ScriptDuration"] for m in metrics),
                "layout_style_s": sum(m["LayoutDuration"] + m["RecalcStyleDuration"] for m in metrics)}

    def close(self) -> None:
        for page in self.pages:
            page.context.close()


class ComparePageSide(PageSide):
    """N pages on the Compare tab, each running both default sides (greedy, ``tokens`` tokens)
    on one prompt: "Finished" stamped on the Compare status line."""

    requests_per_page = 2
    ids = {"status": "#cmp-status", "tokens": "#cmp-left", "run": "#cmp-run"}

    def set_up(self, page, url: str, prompt: str, tokens: int) -> None:
        open_page(page, url)
        page.get_by_role("tab", name="Compare").click()
        page.wait_for_selector("#cmp-run", timeout=60_000)
        for side in ("left", "right"):
            box = page.locator(f"#cmp-{side}-max-tokens input[type=number]")
            if box.count():
                box.fill(str(tokens))
                box.press("Tab")
        page.locator("#cmp-prompt textarea").fill(prompt)


STREAMS = ("queue/data", "/playground-live/")
"""What a page's frames come by: Gradio's stream, and a run's feed (:mod:`app.state.live_feeds`)."""


def watch_stream(cdp, chunks: list) -> None:
    """Record ``(wall time, bytes)`` for each chunk of the page's streams (:data:`STREAMS`): the
    browser's own arrival time (its monotonic ``timestamp``, put on the wall clock with the
    ``wallTime`` a request's start gives beside it), not the moment this script hears of it."""
    urls: dict = {}
    offset = [0.0]

    def sent(e) -> None:
        urls[e["requestId"]] = e["request"]["url"]
        offset[0] = e["wallTime"] - e["timestamp"]

    cdp.send("Network.enable")
    cdp.on("Network.requestWillBeSent", sent)
    cdp.on("Network.dataReceived", lambda e: chunks.append((e["timestamp"] + offset[0], e["dataLength"]))
           if any(s in urls.get(e["requestId"], "") for s in STREAMS) else None)


def perf_metrics(cdp) -> dict:
    """Chromium's cumulative ``Performance.getMetrics`` (seconds of script, layout, style...)."""
    wanted = ("TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration")
    got = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {k: got.get(k, 0.0) for k in wanted}


def click_all(pages, lead_ms: int = 400, button: str = "#generate-btn") -> None:
    """Click Generate (``button``) on every page at the same moment: each page clicks on its own
    at one wall time (the pages share this machine's clock), so the script's round trips don't
    stagger them."""
    at = pages[0].evaluate("Date.now()") + lead_ms * len(pages)
    for page in pages:
        page.evaluate(CLICK_AT, [at, button])


def open_page(page, url: str) -> None:
    """Open the page and wait until it and plotly.js have loaded (the plots draw, as for a user)."""
    page.goto(url)
    page.wait_for_selector("#generate-btn", timeout=120_000)
    page.wait_for_function("() => !!window.Plotly", timeout=60_000)


def set_up_raw_greedy(page, url: str, prompt: str, max_tokens: int) -> None:
    """Open the page in raw completion mode with greedy settings, ``max_tokens`` and ``prompt``."""
    open_page(page, url)
    page.get_by_text("Raw completion").click()
    for slider, value in (("#temperature", "0"), ("#rep-penalty", "1"), ("#max-tokens", str(max_tokens))):
        box = page.locator(f"{slider} input[type=number]")
        box.fill(value)
        box.press("Tab")
    page.locator("#prompt textarea").fill(prompt)


def run(pages: list[int], repeats: int, tokens: int, log=print, pin: bool = False,
        long_tokens: int = 0, compare: bool = False) -> dict:
    """Warm up, then alternate API and page turns for each N (and the long answer); returns every
    turn and the medians. ``pin``: the server on CPU 0, this process and its browsers on CPU 1.
    ``compare``: each page runs a comparison on the Compare tab (two requests) against as many
    ``/compare`` calls, instead of Generate against ``/generate``."""
    from playwright.sync_api import sync_playwright

    if pin:
        if len(os.sched_getaffinity(0)) < 2:
            raise ValueError("--pin needs two CPUs")
        os.sched_setaffinity(0, {1})   # inherited by the browsers launched below
    server = Server(cpu=0 if pin else None, timeout_s=1800)
    log(f"server at {server.url} (pid {server.pid})")
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "tokens": tokens,
                     "repeats": repeats, "cpus": os.cpu_count(), "pinned": pin, "compare": compare,
                     "sizes": {}}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for n in pages:
                results["sizes"][str(n)] = _size(server, browser, n, tokens, repeats, log, compare)
            if long_tokens:
                results["long"] = long_answer(server, browser, long_tokens, log)
            results["idle"] = idle_page(server, browser, log)
            browser.close()
    finally:
        server.close()
    return results


def _measured(side, server: Server) -> dict:
    cpu0, web0 = server.cpu_s(), browser_cpu_s()
    got = side.turn(server)
    got["server_cpu_s"] = server.cpu_s() - cpu0
    got["browser_cpu_s"] = browser_cpu_s() - web0
    return got


def _size(server: Server, browser, n: int, tokens: int, repeats: int, log, compare: bool = False) -> dict:
    """Alternating turns for N pages (``compare``: N pages each running a comparison, against N
    ``/compare`` calls); the medians and each turn."""
    api_side, page_side = (CompareApiSide, ComparePageSide) if compare else (ApiSide, PageSide)
    api, web = api_side(server.url, n, tokens), page_side(browser, server.url, n, tokens)
    api.turn(server), web.turn(server)  # warm-up, not counted
    turns: dict = {"api": [], "pages": []}
    for k in range(repeats):
        for name, side in (("api", api), ("pages", web)):
            got = _measured(side, server)
            turns[name].append(got)
            log(f"N={n} turn {k + 1} {name:5s}: " + ", ".join(f"{t:.2f}" for t in got["times_s"])
                + f" s; server CPU {got['server_cpu_s']:.2f} s, browser CPU {got['browser_cpu_s']:.2f} s, "
                  f"{got['tokens']} tokens" + (f", {got['chunks']} chunks, {got['stream_bytes']} B" if name == "pages" else ""))
    web.close()
    med = statistics.median
    api_s = med(max(t["times_s"]) for t in turns["api"])
    page_s = med(max(t["times_s"]) for t in turns["pages"])
    tokens_pages = med(t["tokens"] for t in turns["pages"])
    out = {"api_s": api_s, "pages_s": page_s, "ratio": api_s / page_s,
           "pair_ratios": [max(a["times_s"]) / max(p["times_s"]) for a, p in zip(turns["api"], turns["pages"])],
           "server_cpu_ratio": med(t["server_cpu_s"] for t in turns["pages"]) / med(t["server_cpu_s"] for t in turns["api"]),
           "browser_ms_per_token": 1000 * med(t["browser_cpu_s"] / t["tokens"] for t in turns["pages"]),
           "bytes_per_chunk": med(t["stream_bytes"] / max(1, t["chunks"]) for t in turns["pages"]),
           "script_ms_per_token": 1000 * med(t["script_s"] / t["tokens"] for t in turns["pages"]),
           "tokens": tokens_pages, "turns": turns}
    log(f"N={n}: API {api_s:.2f} s, pages 'Finished' {page_s:.2f} s (API / pages {out['ratio']:.2f}, pairs "
        f"{', '.join(f'{x:.2f}' for x in out['pair_ratios'])}); server CPU pages / API {out['server_cpu_ratio']:.2f}; "
        f"browser {out['browser_ms_per_token']:.1f} ms CPU per token; {out['bytes_per_chunk']:.0f} B per chunk")
    return out


def idle_page(server: Server, browser, log, settle_s: float = 3.0, window_s: float = 15.0) -> dict:
    """What one open page costs while nobody uses it: after one answer (raw completion mode, as
    the turns), the browser's and the server's CPU seconds per second over ``window_s``.
    The page timer's refreshes (device panel, rolling table) are what it should cost."""
    web = PageSide(browser, server.url, 1, 16)
    web.turn(server)
    time.sleep(settle_s)
    cpu0, web0 = server.cpu_s(), browser_cpu_s()
    time.sleep(window_s)
    out = {"browser_cpu_per_s": (browser_cpu_s() - web0) / window_s,
           "server_cpu_per_s": (server.cpu_s() - cpu0) / window_s, "window_s": window_s}
    web.close()
    log(f"idle page: browser {100 * out['browser_cpu_per_s']:.1f}% of a core, "
        f"server {100 * out['server_cpu_per_s']:.1f}% (over {window_s:.0f} s)")
    return out


def long_answer(server: Server, browser, tokens: int, log, window: int = 100) -> dict:
    """One page streams a ``tokens``-token answer; its first and last ``window`` tokens compared:
    bytes per stream chunk and browser CPU per token (CPU sampled every 0.2 s, chips counted in the
    page as they appear)."""
    web = PageSide(browser, server.url, 1, tokens)
    page = web.pages[0]
    page.evaluate("window.__bench.chipTimes = []")  # the page's stamps (STAMPS_JS) note each chip's time
    samples, stop = [], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.time(), browser_cpu_s()))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        web.turn(server, timeout_s=1800)
    finally:
        stop.set()
        sampler.join()
    chip_t = [t / 1000 for t in page.evaluate("window.__bench.chipTimes")]
    chunks = web.chunks[0]
    web.close()
    if len(chip_t) < 2 * window:
        raise RuntimeError(f"the answer had {len(chip_t)} chips, fewer than {2 * window}")

    def cpu_at(t: float) -> float:
        before = [c for s, c in samples if s <= t]
        return before[-1] if before else samples[0][1]

    def part(lo: int, hi: int) -> dict:
        t0, t1 = chip_t[lo], chip_t[hi - 1]
        sizes = [b for t, b in chunks if t0 <= t <= t1 + 0.05]
        return {"from_token": lo + 1, "to_token": hi, "seconds": t1 - t0,
                "bytes_per_chunk": statistics.mean(sizes) if sizes else 0.0, "chunks": len(sizes),
                "browser_ms_per_token": 1000 * (cpu_at(t1) - cpu_at(t0)) / (hi - lo)}

    first, last = part(0, window), part(len(chip_t) - window, len(chip_t))
    out = {"tokens": len(chip_t), "first": first, "last": last,
           "bytes_ratio": last["bytes_per_chunk"] / first["bytes_per_chunk"] if first["bytes_per_chunk"] else None,
           "cpu_ratio": (last["browser_ms_per_token"] / first["browser_ms_per_token"]
                         if first["browser_ms_per_token"] else None)}
    log(f"long answer ({out['tokens']} tokens): first {window}: {first['bytes_per_chunk']:.0f} B per chunk, "
        f"{first['browser_ms_per_token']:.1f} ms browser CPU per token; last {window}: "
        f"{last['bytes_per_chunk']:.0f} B, {last['browser_ms_per_token']:.1f} ms")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.bench.pages", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, nargs="+", default=[1, 4, 8], help="page counts (default 1 4 8)")
    ap.add_argument("--repeats", type=int, default=3, help="measured turns per side and N (default 3)")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per request (default 64)")
    ap.add_argument("--compare", action="store_true",
                    help="each page runs a comparison on the Compare tab (two greedy requests), "
                         "against as many /compare calls")
    ap.add_argument("--long", type=int, default=0, metavar="N",
                    help="also stream one answer of N tokens (e.g. 1024) and compare its first and last 100")
    ap.add_argument("--json", help="also write every turn to this JSON file")
    ap.add_argument("--pin", action="store_true",
                    help="server on CPU 0, browsers and clients on CPU 1 (as a classroom: the "
                         "browsers on the students' machines)")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    if max(args.pages) > len(PROMPTS):
        ap.error(f"at most {len(PROMPTS)} pages")
    res = run(args.pages, args.repeats, args.tokens, pin=args.pin, long_tokens=args.long,
              compare=args.compare)
    print("\n| pages | API s | pages 'Finished' s (slowest) | API / pages | server CPU pages / API | "
          "browser CPU ms per token | bytes per chunk |\n| --- | --- | --- | --- | --- | --- | --- |")
    for n, r in res["sizes"].items():
        print(f"| {n} | {r['api_s']:.2f} | {r['pages_s']:.2f} | {r['ratio']:.2f} | {r['server_cpu_ratio']:.2f} | "
              f"{r['browser_ms_per_token']:.1f} | {r['bytes_per_chunk']:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    if "idle" in res:
        print(f"\nidle page: browser {100 * res['idle']['browser_cpu_per_s']:.1f}% of a core, "
              f"server {100 * res['idle']['server_cpu_per_s']:.1f}%")
    if "long" in res:
        lg = res["long"]
        ratio = lambda x: "n/a" if x is None else f"{x:.2f}"  # noqa: E731 (a window with no chunk)
        print(f"\nlong answer, {lg['tokens']} tokens: bytes per chunk last/first {ratio(lg['bytes_ratio'])}, "
              f"browser CPU per token last/first {ratio(lg['cpu_ratio'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
