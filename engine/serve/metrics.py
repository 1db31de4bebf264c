"""``GET /metrics``: the engine's figures in Prometheus' text format (``prometheus-client``).

The figures vLLM exposes, with the same meaning, under names of our own (``playground_``
instead of ``vllm:``):

| ours | vLLM | what |
| --- | --- | --- |
| ``playground_time_to_first_token_seconds`` | ``vllm:time_to_first_token_seconds`` | histogram of TTFT (first token − arrival) |
| ``playground_inter_token_latency_seconds`` | ``vllm:inter_token_latency_seconds`` | histogram of ITL, one value per output token after the first |
| ``playground_e2e_request_latency_seconds`` | ``vllm:e2e_request_latency_seconds`` | histogram of e2e latency (finish − arrival) |
| ``playground_prompt_tokens_total`` | ``vllm:prompt_tokens_total`` | prompt tokens of finished requests |
| ``playground_generation_tokens_total`` | ``vllm:generation_tokens_total`` | generated tokens of finished requests |
| ``playground_request_success_total{finished_reason}`` | ``vllm:request_success_total`` | requests ended, by finish reason |
| ``playground_num_requests_running`` / ``_waiting`` | ``vllm:num_requests_running`` / ``_waiting`` | the scheduler's queues now |
| ``playground_kv_cache_usage_perc`` | ``vllm:kv_cache_usage_perc`` | fraction (0-1) of KV blocks held by requests |
| ``playground_prefix_cache_hits_total`` / ``_queries_total`` | ``vllm:prefix_cache_hits_total`` / ``_queries_total`` | prompt tokens found in the prefix cache / looked up |
| ``playground_num_preemptions_total`` | ``vllm:num_preemptions_total`` | preemptions |
| ``playground_decode_bucket_compiled{bucket}`` | (none) | 1 once a batch bucket's compiled decode graph is ready, 0 while it runs eagerly |
| ``playground_decode_compile_seconds`` | (none) | seconds spent compiling the ready buckets |

Histograms and token counters observe every request the engine finishes (the page's too, when
the API shares the page's engine); the gauges and the other counters are read from the engine
when scraped. Every series has the label ``model_name``.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

log = logging.getLogger("engine.serve")

PREFIX = "playground_"
# bucket edges in seconds, close to vLLM's
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EngineMetrics:
    """The exporter of one engine: its own registry, fed by the engine's finished outputs.

    Args:
        engine: a running ``LLMEngine`` (its ``output_processor.listeners`` gets
            :meth:`observe`; its ``stats()`` and block manager are read on each scrape).
        model_name: the ``model_name`` label.
        include_prefix: export the prefix-cache counters (off where each user has a private
            prefix cache, since engine-wide hits tell of other users' prompts).
    """

    def __init__(self, engine, model_name: str, include_prefix: bool = True) -> None:
        self.engine, self.model_name, self.include_prefix = engine, model_name, include_prefix
        self.registry = CollectorRegistry()
        labels, m = ["model_name"], model_name
        self.ttft = Histogram(PREFIX + "time_to_first_token_seconds", "Time to first token "
                              "(first token - arrival), seconds", labels, registry=self.registry,
                              buckets=TTFT_BUCKETS).labels(m)
        self.itl = Histogram(PREFIX + "inter_token_latency_seconds", "Gap between consecutive "
                             "output tokens of a request, seconds", labels,
                             registry=self.registry, buckets=ITL_BUCKETS).labels(m)
        self.e2e = Histogram(PREFIX + "e2e_request_latency_seconds", "End-to-end request "
                             "latency (finish - arrival), seconds", labels,
                             registry=self.registry, buckets=E2E_BUCKETS).labels(m)
        self.prompt_tokens = Counter(PREFIX + "prompt_tokens", "Prompt tokens of finished "
                                     "requests", labels, registry=self.registry).labels(m)
        self.generation_tokens = Counter(PREFIX + "generation_tokens", "Generated tokens of "
                                         "finished requests", labels,
                                         registry=self.registry).labels(m)
        self.success = Counter(PREFIX + "request_success", "Requests ended, by finish reason",
                               labels + ["finished_reason"], registry=self.registry)
        self.registry.register(_Live(self))
        processor = getattr(engine, "output_processor", None)  # absent in stand-in engines
        if processor is not None:
            processor.listeners.append(self.observe)

    def observe(self, output) -> None:
        """Record one finished request (called on the engine thread; never raises)."""
        try:
            m = output.metrics
            self.success.labels(self.model_name, str(output.finish_reason)).inc()
            self.prompt_tokens.inc(m.prompt_tokens)
            # every returned sample's tokens (a request's metrics count its steps)
            outs = getattr(output, "outputs", None) or []
            self.generation_tokens.inc(sum(len(o.token_ids) for o in outs)
                                       if len(outs) > 1 else m.output_tokens)
            self.e2e.observe(m.e2e_s)
            if m.output_tokens:
                self.ttft.observe(m.ttft_s)
            for gap in m.itl_s:
                self.itl.observe(gap)
        except Exception:  # noqa: BLE001 - metrics must never stop the engine
            log.exception("metrics: could not record a request")

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    def detach(self) -> None:
        """Stop observing the engine."""
        try:
            self.engine.output_processor.listeners.remove(self.observe)
        except (AttributeError, ValueError):
            pass


class _Live:
    """The figures read from the engine when scraped: queues, KV usage, prefix cache,
    preemptions, the decode step's compiled buckets."""

    def __init__(self, owner: EngineMetrics) -> None:
        self.owner = owner

    def describe(self):  # nothing registered eagerly: the values exist only at scrape time
        return []

    def collect(self):
        o = self.owner
        stats = o.engine.stats()
        label = [o.model_name]

        def gauge(name, doc, value):
            g = GaugeMetricFamily(PREFIX + name, doc, labels=["model_name"])
            g.add_metric(label, float(value))
            return g

        def counter(name, doc, value):
            c = CounterMetricFamily(PREFIX + name, doc, labels=["model_name"])
            c.add_metric(label, float(value))
            return c

        yield gauge("num_requests_running", "Requests in the running queue", stats.running)
        yield gauge("num_requests_waiting", "Requests in the waiting queue", stats.waiting)
        total = stats.blocks_total or 0
        yield gauge("kv_cache_usage_perc", "Fraction of KV cache blocks held by requests (0-1)",
                    (stats.blocks_used or 0) / total if total else 0.0)
        yield counter("num_preemptions", "Requests preempted (their KV blocks freed, to be "
                      "recomputed)", stats.preemptions)
        bm = getattr(o.engine, "block_manager", None) if getattr(o.engine, "paged", False) else None
        if o.include_prefix and bm is not None:
            b = bm.stats()
            yield counter("prefix_cache_hits", "Prompt tokens found in the prefix cache",
                          b.hit_tokens)
            yield counter("prefix_cache_queries", "Prompt tokens looked up in the prefix cache",
                          b.queried_tokens)
        status = o.engine.compile_status() if hasattr(o.engine, "compile_status") else None
        if status is not None and status.buckets:
            g = GaugeMetricFamily(PREFIX + "decode_bucket_compiled", "1 once the decode step's "
                                  "graph for this batch bucket is compiled, 0 while its steps run "
                                  "eagerly", labels=["model_name", "bucket"])
            for b in status.buckets:
                g.add_metric([o.model_name, str(b)], 1.0 if b in status.ready else 0.0)
            yield g
            yield gauge("decode_compile_seconds", "Seconds spent compiling the decode step's "
                        "ready buckets", status.compile_s)
