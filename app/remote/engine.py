"""``RemoteEngine``: what the page asks of ``LLMEngine``, answered by a remote OpenAI-compatible
server (chat through ``/v1/chat/completions``, raw completion through ``/v1/completions``)."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque

import httpx
import numpy as np

from engine.core.finish_reason import FinishReason
from engine.errors import QueueFullError
from engine.output.events import RequestOutput
from engine.output.handle import RequestHandle
from engine.output.metrics import RequestMetrics, RequestTimes
from engine.params import SamplingParams
from engine.protocol import (BlockPoolSnapshot, CompileStatus, EngineCapabilities, EngineStats,
                             ModelInfo)

from app.render.structured import remote_fields
from .metrics import MetricsPoller
from .stream import RemoteError, StreamFolder, open_stream, sse_data
from .view import RemoteView

KNOWN_ENGINES = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp",
                 "llama.cpp": "llama.cpp", "llm-playground": "llm-playground engine",
                 "openai": "OpenAI", "ollama": "Ollama", "lmstudio": "LM Studio"}
DEFAULT_CONTEXT = 4096
"""Context assumed when the server's ``/v1/models`` does not say (``max_model_len``)."""


def remote_info(name: str, served_by: str, base_url: str, context_len: int) -> ModelInfo:
    """The model as the page's badge and cards read it, for a remote server: no shape (``spec``
    is ``None``), no local weights (0 bytes), ``"remote"`` for what only the server knows; the
    engine's ``remote_view`` draws what the page shows instead."""
    return ModelInfo(name=name, source="remote", architecture="remote", device="remote",
                     dtype="remote", weights="remote", kv_dtype="remote", context_len=context_len,
                     served_by=served_by, base_url=base_url)


class RemoteHandle(RequestHandle):
    """A request on the remote server, behind :class:`engine.output.handle.RequestHandle`'s
    interface (``events``, ``output``, ``finished``, ``result()``, iteration, ``abort()``,
    ``close()``): a reader thread folds the server's stream into events; aborting closes the
    connection."""

    def __init__(self, request_id: str, response: httpx.Response, sent_s: float,
                 on_finish) -> None:
        super().__init__(request_id, self._close_stream, lambda _rid: 0)  # no queue position
        self._response, self._sent_s, self._on_finish = response, sent_s, on_finish
        threading.Thread(target=self._read, name=f"remote-{request_id}", daemon=True).start()

    def _close_stream(self, _request_id: str) -> bool:
        """Close the connection: an OpenAI-compatible server aborts a request whose client
        went away (this project's server and vLLM free its KV blocks)."""
        self.abort_requested = True  # before the reader sees the closed stream
        try:
            self._response.close()
        except Exception:  # noqa: BLE001 - closing from another thread may race the reader
            pass
        return True

    def _read(self) -> None:
        folder = StreamFolder(self.request_id, self._sent_s)
        error = None
        try:
            for chunk in sse_data(self._response.iter_lines()):
                for ev in folder.fold(chunk):
                    self._push(ev)
        except RemoteError as exc:
            error = str(exc)
        except (httpx.HTTPError, OSError, RuntimeError) as exc:  # closed by abort, or cut off
            if not self.abort_requested:
                error = f"the stream broke off ({type(exc).__name__})"
        finally:
            self._response.close()
        self._end(folder, error)

    def _end(self, folder: StreamFolder, error: str | None) -> None:
        now = time.perf_counter()
        if self.abort_requested:
            reason = FinishReason.ABORT
        elif error is not None:
            reason = FinishReason.ERROR
        elif folder.finish_reason in ("length",):
            reason = FinishReason.LENGTH
        elif folder.finish_reason == "abort":
            reason = FinishReason.ABORT
        else:
            reason = FinishReason.STOP
        usage = folder.usage or {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        times = RequestTimes(arrival=self._sent_s, token_times=[e.end_s for e in self.events],
                             finished=now)
        if self.events:
            times.scheduled = self._sent_s
        metrics = RequestMetrics.from_times(times, prompt_tokens)
        if usage.get("completion_tokens") is not None:
            metrics.output_tokens = int(usage["completion_tokens"])
        output = RequestOutput(
            request_id=self.request_id, prompt_token_ids=[], token_ids=[-1] * len(self.events),
            text="".join(e.text_delta for e in self.events), finish_reason=reason,
            metrics=metrics, error=error, deltas=[e.text_delta for e in self.events])
        self._on_finish(output)
        self._finish(output)


class ClientRolling:
    """p50/p90/p99 of the client-measured TTFT, TPOT and e2e of the page's last requests
    (the same keys as ``engine.telemetry.rolling.RollingStats.summary``)."""

    def __init__(self, window: int = 100) -> None:
        self._items: deque = deque(maxlen=window)
        self._lock = threading.Lock()
        self.version = 0  # changes on every add (the page's cached table compares it)

    def add(self, output: RequestOutput) -> None:
        m = output.metrics
        with self._lock:
            self._items.append((str(output.finish_reason), m.ttft_s, m.tpot_s, m.e2e_s,
                                len(output.token_ids)))
            self.version += 1

    def summary(self) -> dict:
        with self._lock:
            items = list(self._items)
        ok = [it for it in items if it[0] in ("stop", "length")]

        def pct(values):
            if not values:
                return {"p50": None, "p90": None, "p99": None}
            got = np.percentile(np.asarray(values, dtype=float), (50, 90, 99), method="linear")
            return {f"p{p}": float(v) for p, v in zip((50, 90, 99), got)}

        return {"count": len(items), "finished": len(ok),
                "aborted": sum(1 for it in items if it[0] == "abort"),
                "failed": sum(1 for it in items if it[0] == "error"),
                "ttft_s": pct([it[1] for it in ok]), "tpot_s": pct([it[2] for it in ok if it[4] > 1]),
                "tpot_count": sum(1 for it in ok if it[4] > 1),
                "e2e_s": pct([it[3] for it in ok])}


class RemoteEngine:
    """The page's engine, served by a remote OpenAI-compatible server.

    Args:
        base_url: the API's base URL, ending in ``/v1`` (``http://host:8000/v1``).
        api_key: sent as ``Authorization: Bearer``; model: the model to ask for (default: the
            first of the server's ``/v1/models``).
        metrics_url: the Prometheus endpoint (default: ``/metrics`` at the base URL's root).
        poll_s: seconds between two reads of it.

    Raises:
        RemoteError: the server could not be reached, or lists no model.
    """

    remote = True
    capabilities = EngineCapabilities(remote=True)
    spec = None  # no model shape from an OpenAI-compatible server
    pool_bytes = None

    def __init__(self, base_url: str, api_key: str | None = None, model: str | None = None,
                 metrics_url: str | None = None, poll_s: float = 1.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(timeout=httpx.Timeout(10.0, read=None), limits=httpx.Limits(
            max_connections=256, max_keepalive_connections=32))
        listed = self._models()
        if model is None:
            if not listed:
                raise RemoteError(f"{self.base_url}/models lists no model; pass --model")
            model = listed[0]["id"]
        entry = next((m for m in listed if m.get("id") == model), {})
        owner = str(entry.get("owned_by") or "")
        engine_name = KNOWN_ENGINES.get(owner.lower(), owner or "OpenAI-compatible server")
        root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        self.poller = MetricsPoller(metrics_url or root + "/metrics", self.headers, poll_s).start()
        self.remote_view = RemoteView(self)
        self.info = remote_info(model, engine_name, self.base_url,
                                int(entry.get("max_model_len") or DEFAULT_CONTEXT))
        self.max_seq_tokens = self.info.context_len
        self.rolling = ClientRolling()
        self.counts = {"finished": 0, "aborted": 0, "failed": 0}
        self.recent_steps: list = []
        self.gpu = None
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def _models(self) -> list[dict]:
        try:
            r = self.http.get(self.base_url + "/models", headers=self.headers)
        except httpx.HTTPError as exc:
            raise RemoteError(f"{self.base_url} could not be reached ({type(exc).__name__})") from None
        if r.status_code != 200:
            raise RemoteError(f"{self.base_url}/models answered HTTP {r.status_code}")
        try:
            data = r.json().get("data") or []
        except (ValueError, AttributeError):
            raise RemoteError(f"{self.base_url}/models is not an OpenAI model list") from None
        return [m for m in data if isinstance(m, dict) and m.get("id")]

    def body(self, prompt, params: SamplingParams, raw: bool) -> tuple[str, dict]:
        """``(route, JSON body)`` of a request: OpenAI's fields, and vLLM's extra ``top_k``,
        ``min_p``, ``repetition_penalty`` only when they are set (a strict server refuses
        fields it does not know)."""
        body = {"model": self.info.name, "stream": True, "stream_options": {"include_usage": True},
                "temperature": params.temperature, "top_p": params.top_p}
        if params.max_tokens is not None:
            body["max_tokens"] = params.max_tokens
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(params, name):
                body[name] = getattr(params, name)
        if params.top_k not in (0, -1):
            body["top_k"] = params.top_k
        if params.min_p:
            body["min_p"] = params.min_p
        if params.repetition_penalty != 1.0:
            body["repetition_penalty"] = params.repetition_penalty
        body.update(remote_fields(params.structured_outputs))  # the sidebar's structured output
        if raw:
            return "/completions", {**body, "prompt": prompt, "logprobs": 5}
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        return "/chat/completions", {**body, "messages": messages, "logprobs": True,
                                     "top_logprobs": 5}

    def submit(self, prompt, params: SamplingParams | None = None, *, raw: bool = False,
               use_kv_cache: bool = True, request_id: str | None = None) -> RemoteHandle:
        """Send a streamed request; returns its handle once the server has accepted it.

        Raises:
            ValueError: the server refused a value (HTTP 400; its message names the field).
            QueueFullError: the server is busy (HTTP 429).
            RemoteError: any other refusal or failure, with the server's message.
        """
        params = params or SamplingParams()
        route, body = self.body(prompt, params, raw)
        rid = request_id or f"remote-{next(self._ids)}"
        sent = time.perf_counter()
        try:
            response = open_stream(self.http, self.base_url + route, body, self.headers)
        except RemoteError as exc:
            text = str(exc)
            if text.endswith("(HTTP 400)"):
                raise ValueError(text) from None
            if text.endswith("(HTTP 429)"):
                raise QueueFullError(text) from None
            raise
        return RemoteHandle(rid, response, sent, self._finished)

    def _finished(self, output: RequestOutput) -> None:
        self.rolling.add(output)
        with self._lock:
            self.counts[FinishReason(output.finish_reason).outcome] += 1

    def generate(self, prompt, params: SamplingParams | None = None, **kwargs) -> RequestOutput:
        """Submit and wait for the output."""
        return self.submit(prompt, params, **kwargs).result()

    def abort(self, request_id: str) -> bool:
        """Not by id: a remote request is aborted through its handle (closing its stream)."""
        return False

    def detokenize(self, token_ids: list[int]) -> str:
        """A remote server's tokenizer is not here."""
        raise NotImplementedError("a remote engine has no tokenizer here")

    def experiment_model(self):
        """No local model: the lessons need one."""
        raise NotImplementedError("a remote engine has no local model for the lessons")

    def rolling_summary(self) -> dict:
        """This page's own recent requests (the server's are not visible)."""
        return self.rolling.summary()

    @property
    def rolling_version(self) -> int:
        """Changes whenever a request ends."""
        return self.rolling.version

    def reset_rolling(self) -> None:
        """Nothing to reset: the table follows this page's own last requests."""

    def compile_status(self) -> CompileStatus:
        """The server's decode step is its own: nothing to report from here."""
        return CompileStatus(path="remote")

    def stats(self) -> EngineStats:
        """The page's engine numbers: running and waiting from the server's ``/metrics`` (0
        when it has none), this page's own finished/aborted/failed counts, no block pool
        (``batching`` False, with :meth:`RemoteView.batching_note` saying why and what the
        metrics tell)."""
        m = self.poller.latest if self.poller.reason is None else {}
        with self._lock:
            counts = dict(self.counts)
        out = {"waiting": int(m.get("waiting", 0)), "running": int(m.get("running", 0)),
               "queue_max": 0, **counts, "kv_bytes_live": 0, "batching": False,
               "batching_note": self.remote_view.batching_note(),
               "preemptions": int(m.get("preemptions", 0)),
               "blocks_used": round(1000 * m.get("kv_usage", 0.0))}  # changes redraw the note
        if m.get("prefix_queries"):
            out["prefix_hit_rate"] = m.get("prefix_hits", 0.0) / m["prefix_queries"]
        return EngineStats(**out)

    def block_snapshot(self) -> BlockPoolSnapshot:
        """Empty: a remote server's block pool is not visible."""
        return BlockPoolSnapshot.empty()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop polling and close the connections."""
        self.poller.stop()
        self.http.close()
