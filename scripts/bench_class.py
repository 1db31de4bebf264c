"""A class of pages against the same requests through the API, without browsers.

``python scripts/bench_class.py --clients 30`` starts the playground in a child process (the
page of ``python -m app``, its launch settings included, on a free loopback port), then runs the
same N greedy raw completions of ``--tokens`` tokens at once, in alternating turns:

- **pages**: N clients drive the page's own Generate event (the one the Generate button fires)
  through the Gradio queue exactly as a browser does: ``POST /gradio_api/queue/join`` with the
  event's ``fn_index`` and the page's input values, then the session's event stream
  (``/gradio_api/queue/data``), reading every frame it streams (text, token chips, stat cards,
  plots, the batching section). One session per client.
- **api**: N ``gradio_client`` clients call ``/generate`` once each.

Turns alternate A B A B after one warm-up turn of each; figures are medians over ``--repeats``.
Per turn it reports the wall time (first request sent to last stream closed, client clock), the
server's CPU seconds (``psutil``, every thread of the server process), the engine's busy fraction
(time inside ``LLMEngine.step`` with work / the turn's wall time), the mean batch size of the
decode steps, the engine's TTFT p50/p99, and for the pages the time to first frame (the first message of
the stream carrying outputs) p50/p99 and the frames per second each page received.

``--pin`` (the default when the machine has two CPUs or more) runs the server on CPU 0 and the
clients on CPU 1, as in a classroom where the browsers run on the students' machines.
``--browsers K`` adds a third side: K headless Chromium pages (Playwright, ``/usr/bin/chromium``)
pinned to CPU 1, each clicking Generate.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import secrets
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RECORD, STEPS, READY = "CLASS-REQUEST ", "CLASS-STEPS ", "CLASS-READY "


def prompts(n: int) -> list[str]:
    """``n`` distinct counting prompts whose greedy continuations run to the token limit."""
    out = []
    for k in range(n):
        start, step = 1 + 7 * k, 1 + k % 5
        out.append(", ".join(str(start + step * i) for i in range(4)) + ",")
    return out


# ---- the server (child process) ----------------------------------------------------------------
class _Recorder:
    """Per-step and per-request records taken on the engine thread, handed out on request.

    ``step`` wraps ``LLMEngine.step``: its start and end (``perf_counter`` seconds), and from the
    step's :class:`BatchInfo` the number of sequences and decode tokens it ran.
    """

    def __init__(self, engine) -> None:
        self.engine = engine
        self.lock = threading.Lock()
        self.steps: list[tuple] = []
        self.requests: list[dict] = []
        inner_step = engine.step

        def step() -> bool:
            t0 = time.perf_counter()
            did = inner_step()
            t1 = time.perf_counter()
            if did and engine.recent_steps:
                b = engine.recent_steps[-1]
                with self.lock:
                    self.steps.append((t0, t1, len(b.request_ids), b.decode_tokens, b.prefill_tokens))
            return did

        engine.step = step
        rolling = engine.rolling
        recorder = self

        class Rolling:
            def add(self, output) -> None:
                rolling.add(output)
                m = output.metrics
                done = time.perf_counter()
                with recorder.lock:
                    recorder.requests.append({"id": output.request_id, "tokens": m.output_tokens,
                                              "ttft_s": m.ttft_s, "arrival_s": done - m.e2e_s,
                                              "finished_s": done, "reason": str(output.finish_reason)})

            def __getattr__(self, name):
                return getattr(rolling, name)

        engine.rolling = engine.output_processor.rolling = Rolling()

    def take(self) -> dict:
        with self.lock:
            steps, self.steps = self.steps, []
            reqs, self.requests = self.requests, []
        return {"steps": steps, "requests": reqs, "now_s": time.perf_counter()}


def serve(port: int) -> None:
    """The page as ``python -m app`` serves it (same concurrency and launch settings); reads
    ``take`` lines on stdin and answers each with the records since the last one."""
    from app.server.launch import set_gradio_env

    set_gradio_env()
    from engine import LLMEngine, load_model

    from app.page import build_demo
    from app.server.assets import read_css
    from app.server.launch import launch, private_temp_dir
    from app.server.main import theme
    from app.state.playground import Playground

    max_queue = 32
    engine = LLMEngine(load_model("smollm2-135m"), max_queue=max_queue, telemetry=True,
                       compile="off")  # the page path is measured, not the decode kernels
    rec = _Recorder(engine)
    with private_temp_dir() as tmp:
        pg = Playground(engine, trace_parent=tmp)
        concurrency = 2 * max_queue + 4  # as app.server.main.serve
        demo = build_demo(pg, max_concurrency=concurrency)
        demo.queue(default_concurrency_limit=concurrency)
        url, _ = launch(demo, "127.0.0.1", port, theme=theme(), css=read_css(), max_threads=concurrency + 8)
        print(f"{READY}{url} {os.getpid()}", flush=True)
        try:
            for line in sys.stdin:
                if line.strip() == "take":
                    print(STEPS + json.dumps(rec.take()), flush=True)
        finally:
            demo.close()
            pg.close()
            engine.shutdown()


# ---- the driver -------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The child process: its URL, pid, and :meth:`take` (the engine's records since the last call)."""

    def __init__(self, cpu: int | None, timeout_s: float = 300.0) -> None:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", str(_free_port())]
        if cpu is not None:
            cmd = ["taskset", "-c", str(cpu)] + cmd
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1, cwd=str(ROOT))
        self._lines: queue.Queue = queue.Queue()
        ready: queue.Queue = queue.Queue()

        def read() -> None:
            for line in self.proc.stdout:
                if line.startswith(STEPS):
                    self._lines.put(json.loads(line[len(STEPS):]))
                elif line.startswith(READY):
                    ready.put(line[len(READY):].split())
                else:
                    sys.stderr.write(line)

        threading.Thread(target=read, daemon=True).start()
        try:
            self.url, pid = ready.get(timeout=timeout_s)
        except queue.Empty:
            self.close()
            raise RuntimeError("the playground did not start") from None
        self.pid = int(pid)
        import psutil

        self.ps = psutil.Process(self.pid)

    def take(self) -> dict:
        self.proc.stdin.write("take\n")
        self.proc.stdin.flush()
        return self._lines.get(timeout=60)

    def cpu_s(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(30)
        except Exception:  # noqa: BLE001 - then it is stopped the hard way
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def page_event(url: str) -> tuple[int, list]:
    """The Generate button's stream event (``fn_index``) and its input values set for a raw greedy
    completion, read from the page's ``/config`` as the browser does (the prompt's slot is
    filled per request; see :func:`fill`)."""
    import httpx

    config = httpx.get(url.rstrip("/") + "/config", timeout=60).json()
    comps = {c["id"]: c for c in config["components"]}
    button = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "generate-btn")
    # the click's own event streams the answer (its js switches the buttons in the browser)
    dep = next(d for d in config["dependencies"] if [button, "click"] in [list(t) for t in d["targets"]]
               and d.get("backend_fn"))
    data = []
    for cid in dep["inputs"]:
        c = comps[cid]
        props = c.get("props", {})
        data.append(None if c["type"] == "state" else props.get("value"))
    return dep["id"], [(comps[cid].get("props", {}).get("elem_id"), v) for cid, v in zip(dep["inputs"], data)]


def fill(inputs: list, prompt: str, tokens: int) -> list:
    """The Generate event's data list: raw mode, greedy, no repetition penalty, ``tokens``."""
    from app.tabs.playground import settings

    start = next(v for eid, v in inputs if eid == "settings")  # the sidebar's settings as one value
    over = {"prompt": prompt, "settings": settings.replaced(start, mode="raw", temperature=0.0,
                                                            rep_penalty=1.0, max_tokens=tokens, seed=0)}
    return [over.get(eid, v) for eid, v in inputs]


class PageClient:
    """One page's session: joins the Generate event and reads its stream to the end.

    ``stall_s`` > 0: after the first frame, stop reading the stream for that long (a stalled tab).
    """

    def __init__(self, url: str, index: int, inputs: list) -> None:
        import httpx

        self.url, self.index, self.inputs = url.rstrip("/"), index, inputs
        self.http = httpx.Client(timeout=httpx.Timeout(600.0, connect=30.0))
        self.session = secrets.token_hex(8)

    def run(self, prompt: str, tokens: int, t0: float, stall_s: float = 0.0) -> dict:
        frames, first, last = 0, None, None
        r = self.http.post(self.url + "/gradio_api/queue/join",
                           json={"data": fill(self.inputs, prompt, tokens), "fn_index": self.index,
                                 "session_hash": self.session, "event_data": None, "trigger_id": None})
        r.raise_for_status()
        event_id = r.json()["event_id"]
        ok = False
        with self.http.stream("GET", self.url + "/gradio_api/queue/data",
                              params={"session_hash": self.session}) as resp:
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("event_id") not in (None, event_id):
                    continue
                kind = msg.get("msg")
                if kind in ("process_generating", "process_completed") and msg.get("output", {}).get("data") is not None:
                    now = time.perf_counter()
                    frames += 1
                    if first is None:
                        first = now
                        if stall_s:
                            time.sleep(stall_s)
                    last = now
                if kind == "process_completed":
                    ok = bool(msg.get("success"))
                    break
        end = time.perf_counter()
        return {"ok": ok, "frames": frames, "first_frame_s": (first - t0) if first else None,
                "fps": (frames - 1) / (last - first) if first and last > first else 0.0, "end_s": end}


class ApiClient:
    """One ``gradio_client`` client calling ``/generate``."""

    def __init__(self, url: str) -> None:
        from gradio_client import Client

        self.client = Client(url, verbose=False, httpx_kwargs={"timeout": 600.0})

    def run(self, prompt: str, tokens: int, t0: float, stall_s: float = 0.0) -> dict:
        # job.result() rather than iterating the job: gradio_client's Job.__next__ polls every
        # millisecond holding a lock (30 spinning client threads), and never ends on a job that
        # finished with an error; the API's frames are counted by the server instead
        job = self.client.submit(prompt=prompt, temperature=0.0, top_p=1.0, top_k=0,
                                 repetition_penalty=1.0, max_tokens=tokens, seed=0, raw=True,
                                 api_name="/generate")
        job.result(timeout=600)
        return {"ok": True, "frames": len(job.outputs()), "first_frame_s": None, "fps": None,
                "end_s": time.perf_counter()}


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.mean(xs) if xs else None


def _pct(xs: list[float], q: float) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def turn(server: Server, clients: list, texts: list[str], tokens: int, profile: str | None = None) -> dict:
    """All clients at once, one request each; the turn's figures. ``profile``: record the
    server with py-spy (every thread, idle ones too: the wall-clock view) into this file, in
    py-spy's raw (collapsed stacks) format."""
    server.take()  # forget what came before
    spy = None
    if profile:
        spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--idle", "--threads", "--nonblocking",
                                "--format", "raw", "-r", "50", "-o", profile, "-p", str(server.pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # py-spy attaches
    cpu0 = server.cpu_s()
    go = threading.Barrier(len(clients) + 1)
    results: list = [None] * len(clients)
    t0_box: list = []

    def one(i: int) -> None:
        go.wait()
        try:
            results[i] = clients[i].run(texts[i], tokens, t0_box[0])
        except Exception as exc:  # noqa: BLE001 - reported below
            results[i] = {"ok": False, "error": repr(exc)}

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(clients))]
    for t in threads:
        t.start()
    t0_box.append(time.perf_counter())
    go.wait()
    for t in threads:
        t.join(600)
    wall = max(r.get("end_s", 0.0) for r in results) - t0_box[0]
    cpu = server.cpu_s() - cpu0
    if spy is not None:
        spy.send_signal(2)  # SIGINT: py-spy writes the file and exits
        spy.wait(60)
    rec = server.take()
    bad = [r for r in results if not r.get("ok")]
    if bad:
        raise RuntimeError(f"{len(bad)} request(s) failed: {bad[0]}")
    reqs = rec["requests"]
    steps = rec["steps"]
    start = min(r["arrival_s"] for r in reqs) if reqs else 0.0
    end = max(r["finished_s"] for r in reqs) if reqs else 0.0
    inside = [s for s in steps if s[1] > start and s[0] < end]
    busy = sum(min(s[1], end) - max(s[0], start) for s in inside)
    decode = [s for s in inside if s[3] > 0]
    out_tokens = sum(r["tokens"] for r in reqs)
    return {"wall_s": wall, "cpu_s": cpu, "engine_s": end - start, "busy": busy / (end - start) if end > start else 0.0,
            "steps": len(inside), "batch": statistics.mean(s[2] for s in decode) if decode else 0.0,
            "tok_s": out_tokens / wall, "tokens": out_tokens, "requests": len(reqs),
            "ttff_p50": _pct([r["first_frame_s"] for r in results], 0.5),
            "ttff_p99": _pct([r["first_frame_s"] for r in results], 0.99),
            "ttft_p50": _pct([r["ttft_s"] for r in reqs], 0.5), "ttft_p99": _pct([r["ttft_s"] for r in reqs], 0.99),
            "fps": _mean([r["fps"] for r in results]), "frames": _mean([r["frames"] for r in results])}


FIELDS = ("wall_s", "cpu_s", "busy", "batch", "tok_s", "ttff_p50", "ttff_p99", "ttft_p50", "ttft_p99", "fps", "frames")


def _f(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _line(name: str, t: dict) -> str:
    return (f"{name:6s} wall {t['wall_s']:6.2f} s  cpu {t['cpu_s']:6.2f} s  busy {t['busy']:.2f}  "
            f"batch {t['batch']:5.1f}  {t['tok_s']:6.1f} tok/s  first frame p50 {_f(t['ttff_p50'], '.2f')} "
            f"p99 {_f(t['ttff_p99'], '.2f')} s  TTFT p50 {t['ttft_p50']:.2f} p99 {t['ttft_p99']:.2f} s  "
            f"{_f(t['fps'], '5.1f')} frames/s ({_f(t['frames'], '.0f')})  steps {t['steps']}")


def run(n: int, repeats: int, tokens: int, pin: bool, log=print, profile: str | None = None) -> dict:
    """Warm up, then alternate API and page turns; returns every turn and the medians."""
    server = Server(0 if pin else None)
    if pin:
        os.sched_setaffinity(0, {1})
    log(f"server at {server.url} (pid {server.pid}){' on CPU 0, clients on CPU 1' if pin else ''}")
    try:
        index, inputs = page_event(server.url)
        texts = prompts(n)
        sides = {"api": [ApiClient(server.url) for _ in range(n)],
                 "pages": [PageClient(server.url, index, inputs) for _ in range(n)]}
        for name, clients in sides.items():  # warm-up
            log("warm-up " + _line(name, turn(server, clients, texts, tokens)))
        turns: dict = {name: [] for name in sides}
        for k in range(repeats):
            for name, clients in sides.items():
                t = turn(server, clients, texts, tokens,
                         f"{profile}.{name}.txt" if profile and k == 0 else None)
                turns[name].append(t)
                log(f"turn {k + 1} " + _line(name, t))
    finally:
        server.close()
    med = {name: {f: _median([t[f] for t in ts]) for f in FIELDS} for name, ts in turns.items()}
    ratio = statistics.median(a["wall_s"] / p["wall_s"] for a, p in zip(turns["api"], turns["pages"]))
    cpu = statistics.median(p["cpu_s"] / a["cpu_s"] for a, p in zip(turns["api"], turns["pages"]))
    return {"clients": n, "tokens": tokens, "repeats": repeats, "pinned": pin, "turns": turns,
            "median": med, "rate_ratio": ratio, "cpu_ratio": cpu, "load": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python scripts/bench_class.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=30, help="page clients and API clients per turn (default 30)")
    ap.add_argument("--repeats", type=int, default=3, help="measured turns per side (default 3)")
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per request (default 64)")
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=(os.cpu_count() or 1) >= 2,
                    help="server on CPU 0, clients on CPU 1 (default: on with two CPUs or more)")
    ap.add_argument("--json", help="also write every turn to this JSON file")
    ap.add_argument("--profile", help="record the server with py-spy during the first measured turn of "
                                      "each side, into PROFILE.api.txt and PROFILE.pages.txt (collapsed stacks)")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    res = run(args.clients, args.repeats, args.tokens, args.pin, profile=args.profile)
    print(f"\n{args.clients} clients, {args.tokens} tokens, medians of {args.repeats} turns, "
          f"load average {', '.join(f'{x:.1f}' for x in res['load'])}")
    for name, m in res["median"].items():
        print(_line(name, {**m, "steps": "-"}))
    print(f"pages / api rate {res['rate_ratio']:.2f}x, server CPU pages / api {res['cpu_ratio']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
