"""How much of the engine's batching gain survives open pages: N browser pages against N API calls.

``python -m app.bench.pages`` starts the playground in a child process (the page of
``python -m app``, on a free loopback port), then for each N in ``--pages`` runs the same N greedy
raw completions of ``--tokens`` tokens at once, in turns: through the API (``gradio_client``
``/generate``, one client per request) and from N headless Chromium pages (one browser context per
page, so N sessions, each clicking Generate). Turns alternate A B A B, after one warm-up turn of
each; each figure is the median over ``--repeats`` turns.

The rate of one turn is measured in the server from the engine's own timestamps: total decode
tokens/s = sum over the turn's requests of (output tokens - 1) / (last token of any request - first
token of any request). The child process prints one line per finished request; nothing is added to
the page or the API for the benchmark.

``--pin`` runs the server on CPU 0 (started under ``taskset``, so its thread pools size
themselves to that one core) and this driver, its API clients and the browsers it launches on
CPU 1: the browsers can't take the server's core, as in a classroom where they run on the
students' machines. Each turn also reports the server's CPU seconds (``psutil``, every thread).

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
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from engine import LLMEngine, load_model

    from app.server.assets import read_css
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
    demo.launch(server_name="127.0.0.1", server_port=port, theme=theme(), css=read_css(),
                prevent_thread_lock=True, quiet=True, max_threads=concurrency + 8)
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


def rate(records: list[dict]) -> dict:
    """One turn's numbers from its requests' records (engine timestamps, seconds)."""
    first = min(r["first_s"] for r in records)
    last = max(r["last_s"] for r in records)
    decode = sum(max(0, r["tokens"] - 1) for r in records)
    tpots = [(r["last_s"] - r["first_s"]) / (r["tokens"] - 1) for r in records if r["tokens"] > 1]
    return {"decode_tok_s": decode / (last - first) if last > first else 0.0,
            "wall_s": max(r["finished_s"] for r in records) - min(r["arrival_s"] for r in records),
            "tpot_ms": 1000 * statistics.mean(tpots) if tpots else None,
            "tokens": [r["tokens"] for r in records]}


class ApiSide:
    """N ``gradio_client`` clients, one request each per turn, started together."""

    def __init__(self, url: str, n: int, tokens: int) -> None:
        from gradio_client import Client

        self.clients = [Client(url, verbose=False) for _ in range(n)]
        self.tokens = tokens

    def turn(self, server: Server) -> list[dict]:
        errors = []
        go = threading.Barrier(len(self.clients))

        def one(i: int, client) -> None:
            go.wait()
            try:
                client.predict(prompt=PROMPTS[i], temperature=0.0, top_p=1.0, top_k=0,
                               repetition_penalty=1.0, max_tokens=self.tokens, seed=0, raw=True,
                               api_name="/generate")
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i, c)) for i, c in enumerate(self.clients)]
        for t in threads:
            t.start()
        records = server.wait(len(self.clients))
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError(f"API request failed: {errors[0]}")
        return records


class CliSide:
    """One ``python -m engine generate --json`` process per turn: the engine with no server and no
    page at all (its model loads before the timed decode, outside the measured window)."""

    def __init__(self, n: int, tokens: int) -> None:
        if n != 1:
            raise ValueError(f"the CLI runs one request at a time: --pages must be 1 with --against cli, got {n}")
        self.tokens = tokens

    def turn(self, server: Server) -> list[dict]:
        cmd = [sys.executable, "-m", "engine", "generate", "--raw", "--prompt", PROMPTS[0], "--temperature", "0",
               "--repetition-penalty", "1", "--max-tokens", str(self.tokens), "--json"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True)
        m = json.loads(done.stdout.strip().splitlines()[-1])["metrics"]
        # the same record the server prints: engine timestamps relative to the first token
        first = m["ttft_s"]
        return [{"tokens": m["output_tokens"], "first_s": first, "last_s": first + m["decode_time_s"],
                 "arrival_s": 0.0, "finished_s": m["e2e_s"]}]


class PageSide:
    """N pages (one browser context each) set to raw greedy completion of one prompt each."""

    def __init__(self, browser, url: str, n: int, tokens: int, viewport=(1280, 720)) -> None:
        self.pages = []
        for i in range(n):
            ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
            page = ctx.new_page()
            set_up_raw_greedy(page, url, PROMPTS[i], tokens)
            self.pages.append(page)

    def turn(self, server: Server) -> list[dict]:
        click_all(self.pages)
        records = server.wait(len(self.pages))
        for page in self.pages:  # the page has drawn its last frame and can run again
            page.wait_for_function("document.querySelector('#status').innerText.startsWith('Finished')"
                                   " && !document.querySelector('#generate-btn').disabled",
                                   polling=100, timeout=60_000)
        return records

    def close(self) -> None:
        for page in self.pages:
            page.context.close()


CLICK_AT = "t => setTimeout(() => document.querySelector('#generate-btn').click(), Math.max(0, t - Date.now()))"


def click_all(pages, lead_ms: int = 400) -> None:
    """Click Generate on every page at the same moment: each page clicks on its own at one wall
    time (the pages share this machine's clock), so the script's round trips don't stagger them."""
    at = pages[0].evaluate("Date.now()") + lead_ms * len(pages)
    for page in pages:
        page.evaluate(CLICK_AT, at)


def set_up_raw_greedy(page, url: str, prompt: str, max_tokens: int) -> None:
    """Open the page in raw completion mode with greedy settings, ``max_tokens`` and ``prompt``."""
    page.goto(url)
    page.wait_for_selector("#generate-btn", timeout=120_000)
    page.get_by_text("Raw completion").click()
    for slider, value in (("#temperature", "0"), ("#rep-penalty", "1"), ("#max-tokens", str(max_tokens))):
        box = page.locator(f"{slider} input[type=number]")
        box.fill(value)
        box.press("Tab")
    page.locator("#prompt textarea").fill(prompt)


def run(pages: list[int], repeats: int, tokens: int, log=print, against: str = "api",
        pin: bool = False) -> dict:
    """Warm up, then alternate API (or, with ``against="cli"``, CLI) and page turns for each N;
    returns every turn and the medians (the other side's figures under the ``api`` keys).
    ``pin``: the server on CPU 0, this process and its browsers on CPU 1 (needs 2 CPUs)."""
    from playwright.sync_api import sync_playwright

    if pin:
        if len(os.sched_getaffinity(0)) < 2:
            raise ValueError("--pin needs two CPUs")
        os.sched_setaffinity(0, {1})   # inherited by the browsers launched below
    server = Server(cpu=0 if pin else None)
    log(f"server at {server.url} (pid {server.pid})")
    results: dict = {"tokens": tokens, "repeats": repeats, "cpus": os.cpu_count(), "against": against,
                     "pinned": pin, "sizes": {}}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for n in pages:
                api = CliSide(n, tokens) if against == "cli" else ApiSide(server.url, n, tokens)
                web = PageSide(browser, server.url, n, tokens)
                api.turn(server), web.turn(server)  # warm-up, not counted
                turns = {"api": [], "pages": []}
                for k in range(repeats):
                    for name, side in (("api", api), ("pages", web)):
                        cpu0 = server.cpu_s()
                        got = rate(side.turn(server))
                        got["server_cpu_s"] = server.cpu_s() - cpu0
                        turns[name].append(got)
                        log(f"N={n} turn {k + 1} {name if name == 'pages' else against:5s}: {got['decode_tok_s']:6.1f} tok/s total, "
                            f"TPOT {got['tpot_ms']:.0f} ms, wall {got['wall_s']:.2f} s, server CPU "
                            f"{got['server_cpu_s']:.2f} s, tokens {got['tokens']}")
                web.close()
                a = statistics.median(t["decode_tok_s"] for t in turns["api"])
                p = statistics.median(t["decode_tok_s"] for t in turns["pages"])
                pairs = [q["decode_tok_s"] / r["decode_tok_s"] for q, r in zip(turns["pages"], turns["api"])]
                wall = {k2: statistics.median(t["wall_s"] for t in turns[k2]) for k2 in turns}
                cpu = {k2: statistics.median(t["server_cpu_s"] for t in turns[k2]) for k2 in turns}
                results["sizes"][str(n)] = {"api_tok_s": a, "pages_tok_s": p, "ratio": p / a,
                                            "pair_ratios": pairs, "wall_ratio": wall["api"] / wall["pages"],
                                            "cpu_ratio": cpu["pages"] / cpu["api"] if cpu["api"] else None,
                                            "turns": turns}
                log(f"N={n}: {against} {a:.1f} tok/s, pages {p:.1f} tok/s, pages/{against} {p / a:.2f} "
                    f"(pairs {', '.join(f'{x:.2f}' for x in pairs)}); wall {against}/pages "
                    f"{wall['api'] / wall['pages']:.2f}, server CPU pages/{against} "
                    f"{results['sizes'][str(n)]['cpu_ratio'] or float('nan'):.2f}")
            browser.close()
    finally:
        server.close()
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.bench.pages", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, nargs="+", default=[1, 2, 4], help="page counts (default 1 2 4)")
    ap.add_argument("--repeats", type=int, default=3, help="measured turns per side and N (default 3)")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per request (default 64)")
    ap.add_argument("--json", help="also write every turn to this JSON file")
    ap.add_argument("--against", choices=("api", "cli"), default="api",
                    help="what the pages are compared with: API calls to the same server (default) or "
                         "`python -m engine generate` processes (one page only)")
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
    if args.against == "cli" and args.pages != [1]:
        ap.error("--against cli runs one request at a time: use --pages 1")
    res = run(args.pages, args.repeats, args.tokens, against=args.against, pin=args.pin)
    side = args.against.upper()
    print(f"\n| N | {side} tok/s | pages tok/s | pages / {side} | wall {side} / pages | server CPU "
          f"pages / {side} |\n| --- | --- | --- | --- | --- | --- |")
    for n, r in res["sizes"].items():
        print(f"| {n} | {r['api_tok_s']:.1f} | {r['pages_tok_s']:.1f} | {r['ratio']:.2f} | "
              f"{r['wall_ratio']:.2f} | {r['cpu_ratio'] or float('nan'):.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
