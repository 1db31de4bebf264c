"""A bounded load test on loopback: 32 API clients, 3 requests each, through the batching engine.

The page is served from this process (around the session's engine); the clients run in a child
process so the server's memory is measured alone. Checks that no request is lost, that each
client gets its own text (equal to that request's solo answer), that every KV block returns to
the pool, and that the server's memory settles back within 5%.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

pytest.importorskip("gradio_client")

from engine import SamplingParams  # noqa: E402
from tests.support.servers import launch
from tests.support.paths import REPO
from tests.support.load_plan import PROMPTS, SETTINGS, request_plan

CLIENTS, PER_CLIENT = 32, 3
CLIENT_SCRIPT = str(REPO / "tests" / "support" / "load_clients.py")


@pytest.mark.slow
def test_32_clients_3_requests_each(engine, tmp_path):
    from app.state.playground import Playground

    expected = {}
    for p in PROMPTS:
        for s in SETTINGS:
            t, seed, n = s
            expected[(p, s)] = engine.generate(
                p, SamplingParams(temperature=t, seed=seed, max_tokens=n)).text
    pg = Playground(engine, trace_dir=tmp_path, monitor=False)
    demo, url = launch(pg, concurrency=CLIENTS + 4)
    proc = psutil.Process()
    try:
        # one warm-up round at full load, so lazily created pools exist before the baseline
        env = dict(os.environ, PYTHONPATH=str(REPO))
        warm = subprocess.run([sys.executable, CLIENT_SCRIPT, url,
                               str(CLIENTS), "1"], capture_output=True, text=True, env=env,
                              timeout=600)
        assert warm.returncode == 0, warm.stderr[-2000:]
        time.sleep(1.0)
        gc.collect()
        rss_before = proc.memory_info().rss
        peak = {"running": 0}
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak["running"] = max(peak["running"], engine.stats().running)
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        run = subprocess.run([sys.executable, CLIENT_SCRIPT, url,
                              str(CLIENTS), str(PER_CLIENT)], capture_output=True, text=True,
                             env=env, timeout=600)
        stop.set()
        watcher.join()
        assert run.returncode == 0, run.stderr[-2000:]
        got = json.loads(run.stdout.strip().splitlines()[-1])
        assert not got["errors"], got["errors"][:3]
        assert len(got["results"]) == CLIENTS * PER_CLIENT  # no request lost
        wrong = [key for key, text in got["results"].items()
                 if text != expected[request_plan(*map(int, key.split(",")))]]
        assert not wrong, f"{len(wrong)} answers differ from their own request's solo answer"
        assert peak["running"] >= 8  # the requests really ran together
        deadline = time.time() + 30
        while engine.stats().running and time.time() < deadline:
            time.sleep(0.05)
        st = engine.stats()
        assert st.blocks_used == 0 and st.blocks_free == st.blocks_total
        assert st.running == 0 and st.waiting == 0 and pg.active_count() == 0
        time.sleep(1.0)  # the engine trims freed memory when it goes idle
        gc.collect()
        rss_after = proc.memory_info().rss
        assert rss_after <= rss_before * 1.05, (rss_before, rss_after)
    finally:
        demo.close()
        pg.close()
