"""The page in front of a remote OpenAI-compatible server (``--backend openai``): the metrics
reader and the stream folding on fixed inputs, then the real thing against a second process
of our own (``python -m engine serve``) over HTTP: no torch in the page's process, the same
greedy text as the server gives the ``openai`` package, and the KV line from its /metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.remote.metrics import read_metrics
from app.remote.stream import StreamFolder, sse_data
from tests.support.servers import ROOT, engine_server

VLLM_METRICS = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.25
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 1.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-8B"} 400.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-8B"} 100.0
"""


def test_reads_vllms_metric_names():
    m = read_metrics(VLLM_METRICS)
    assert m == {"kv_usage": 0.25, "running": 3.0, "waiting": 1.0, "prefix_hits": 100.0,
                 "prefix_queries": 400.0}


def test_stream_folds_chat_chunks_with_logprobs_into_client_timed_events():
    def chunk(text, token, lp, alts, finish=None):
        return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish,
                             "logprobs": {"content": [{"token": token, "logprob": lp,
                                                       "top_logprobs": [{"token": t, "logprob": v}
                                                                        for t, v in alts]}]}}]}
    lines = ["data: " + json.dumps(c) for c in (
        chunk("Hi", "Hi", -0.1, [("Hi", -0.1), ("Hello", -2.5)]),
        chunk("!", "!", -0.7, [("!", -0.7), (".", -0.9)], "stop"),
        {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}})] + ["data: [DONE]"]
    folder = StreamFolder("r", sent_s=10.0)
    events = [ev for i, c in enumerate(sse_data(iter(lines)))
              for ev in folder.fold(c, now_s=10.5 + i * 0.25)]
    assert [e.text_delta for e in events] == ["Hi", "!"]
    assert [e.phase for e in events] == ["prefill", "decode"]
    assert (events[0].start_s, events[0].end_s) == (10.0, 10.5)  # TTFT 0.5 s on this client
    assert (events[1].start_s, events[1].end_s) == (10.5, 10.75)  # ITL 0.25 s
    assert abs(events[0].token_prob - 0.904837) < 1e-5
    assert [c.text for c in events[1].top_candidates] == ["!", "."]
    assert folder.finish_reason == "stop" and folder.usage["prompt_tokens"] == 7


@pytest.fixture(scope="module")
def remote():
    with engine_server("--dtype", "float32") as url:
        yield url


CHECK = r"""
import json, sys
from app.remote import RemoteEngine
from app.state.playground import Playground
from app.tabs.playground import handlers
from app.page import build_demo
eng = RemoteEngine(sys.argv[1] + "/v1")
pg = Playground(eng, monitor=False)
build_demo(pg)
frames = list(handlers.generate(pg, "s", "raw", "The capital of France is", [], "", 0, 1, 0, 0, 1,
                                8, -1, True))
last = frames[-1]
print(json.dumps({"torch": "torch" in sys.modules, "text": last["completion"],
                  "status": last["status"], "kv": last["kv_formula"],
                  "tokens": last["tokens"], "badge": eng.remote_view.badge_html(),
                  "finished": pg.stats()["finished"]}))
eng.shutdown()
"""


@pytest.mark.slow
def test_page_drives_the_remote_without_torch(remote):
    import openai

    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", CHECK, remote], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["torch"] is False  # the page's process never imported torch
    ref = openai.OpenAI(base_url=remote + "/v1", api_key="x").completions.create(
        model="smollm2-135m", prompt="The capital of France is", max_tokens=8, temperature=0)
    assert out["text"] == "The capital of France is" + ref.choices[0].text
    assert "Finished" in out["status"] and out["finished"] == 1
    assert "of its KV cache in use" in out["kv"] and "running" in out["kv"]
    assert "llm-playground engine" in out["badge"] and "smollm2-135m" in out["badge"]
    assert out["tokens"].count('class="tok') == 8  # one chip per token, from the logprobs
    assert "data-top" in out["tokens"]
