"""Polls a server's Prometheus ``/metrics`` for the page: KV cache usage, running and waiting
requests, prefix-cache hits and queries, preemptions.

The names of three engines are read, each with the same meaning: ours (``playground_``),
vLLM's (``vllm:``; ``gpu_cache_usage_perc`` and ``gpu_prefix_cache_*`` in its older releases)
and SGLang's (``sglang:``, whose ``token_usage`` is the fraction of KV token slots in use).
"""

from __future__ import annotations

import threading
import time
from collections import deque

import httpx

NAMES = {
    "kv_usage": ("playground_kv_cache_usage_perc", "vllm:kv_cache_usage_perc",
                 "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "running": ("playground_num_requests_running", "vllm:num_requests_running",
                "sglang:num_running_reqs"),
    "waiting": ("playground_num_requests_waiting", "vllm:num_requests_waiting",
                "sglang:num_queue_reqs"),
    "prefix_hits": ("playground_prefix_cache_hits_total", "vllm:prefix_cache_hits_total",
                    "vllm:gpu_prefix_cache_hits_total"),
    "prefix_queries": ("playground_prefix_cache_queries_total", "vllm:prefix_cache_queries_total",
                       "vllm:gpu_prefix_cache_queries_total"),
    "preemptions": ("playground_num_preemptions_total", "vllm:num_preemptions_total"),
}


def read_metrics(text: str) -> dict:
    """The page's figures from a Prometheus text exposition: ``{"kv_usage", "running",
    "waiting", "prefix_hits", "prefix_queries", "preemptions"}`` (summed over label sets; a
    figure the server does not export is absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            sums[s.name] = sums.get(s.name, 0.0) + float(s.value)
    out = {}
    for key, names in NAMES.items():
        for name in names:
            if name in sums:
                out[key] = sums[name]
                break
    return out


class MetricsPoller:
    """Reads ``url`` every ``interval_s`` seconds in a thread; keeps the latest figures and a
    short history of KV usage for the KV panel.

    Args:
        url: the server's metrics URL (``http://host:port/metrics``).
        headers: sent with each scrape (the API key).
        interval_s: seconds between scrapes; history_s: seconds of history kept.
    """

    def __init__(self, url: str, headers: dict | None = None, interval_s: float = 1.0,
                 history_s: float = 120.0) -> None:
        self.url, self.headers, self.interval_s = url, dict(headers or {}), interval_s
        self.latest: dict = {}
        self.reason: str | None = "not read yet"
        self.history: deque = deque(maxlen=max(2, int(history_s / interval_s)))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> dict:
        """Scrape once; returns the figures (``{}`` with :attr:`reason` set when unavailable)."""
        try:
            r = httpx.get(self.url, headers=self.headers, timeout=5)
        except httpx.HTTPError as exc:
            self.reason = f"its /metrics could not be read ({type(exc).__name__})"
            return {}
        if r.status_code != 200:
            self.reason = f"it has no Prometheus /metrics (HTTP {r.status_code})"
            return {}
        try:
            figures = read_metrics(r.text)
        except ValueError:
            self.reason = "its /metrics is not in Prometheus text format"
            return {}
        if not figures:
            self.reason = "its /metrics has no KV cache or queue figures this page knows"
            return {}
        self.reason = None
        self.latest = figures
        self.history.append((time.time(), figures))
        return figures

    def start(self) -> "MetricsPoller":
        """Poll in a daemon thread until :meth:`stop`."""
        def run():
            while not self._stop.is_set():
                self.poll()
                self._stop.wait(self.interval_s)

        self._thread = threading.Thread(target=run, name="remote-metrics", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()
