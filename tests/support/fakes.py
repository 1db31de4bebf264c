"""Hand-made engine objects for the page's tests: :class:`FakeEngine`, a fake
:class:`engine.protocol.EngineClient`, and the events and outputs it streams."""

from __future__ import annotations

import threading

from engine.output.events import Candidate, RequestOutput, StepEvent
from engine.output.metrics import RequestMetrics, RequestTimes
from engine.model.model_spec import ModelSpec
from engine.protocol import (BlockPoolSnapshot, BlockTable, CompileStatus, EngineCapabilities,
                             EngineStats, ModelInfo)

BPT = 46_080  # KV bytes per token of the embedded model in fp32: 2 × 30 × 3 × 64 × 4
SECRET_PATH = "/srv/secret/weights.bin"  # named by the "crash" script's exception; must never reach a client


def pool_snapshot(tables=(), **fields) -> BlockPoolSnapshot:
    """A :class:`BlockPoolSnapshot` with ``fields``, its ``tables`` given as dicts of
    :class:`BlockTable`'s fields (``request_id``, ``blocks``, ``tokens``)."""
    return BlockPoolSnapshot(tables=[BlockTable(**t) for t in tables], **fields)


def fake_info(**overrides) -> ModelInfo:
    """The embedded model's :class:`engine.protocol.ModelInfo` in fp32, with ``overrides``."""
    spec = ModelSpec(
        name="smollm2-135m", architecture="LlamaForCausalLM", layers=30, heads=9, kv_heads=3,
        head_dim=64, hidden_size=576, intermediate_size=1536, vocab_size=49152,
        max_positions=8192, tie_word_embeddings=True, sliding_window=None, sliding_layers=0,
        num_params=134_515_008, source="test")
    fields = dict(name="smollm2-135m", source="test", architecture="LlamaForCausalLM",
                  device="cpu", dtype="float32", dtype_bytes=4, num_params=134_515_008,
                  weights_bytes=538_060_288, context_len=8192, spec=spec, weights="fp32",
                  kv_dtype="float32", kv_dtype_bytes=4)
    return ModelInfo(**{**fields, **overrides})


def memory(kv: int, device: str = "cpu") -> dict:
    """A CPU-style breakdown dict with an estimated activations part."""
    parts = [{"name": "weights", "bytes": 538_060_288, "measured": True, "note": ""},
             {"name": "kv_cache", "bytes": kv, "measured": True, "note": ""},
             {"name": "activations", "bytes": 217_344, "measured": False, "note": "estimate"},
             {"name": "runtime_other", "bytes": 400_000_000, "measured": False, "note": ""}]
    return {"device": device, "parts": parts, "total_bytes": sum(p["bytes"] for p in parts),
            "total_label": "process RSS", "timestamp": 0.0, "notes": []}


def make_events(prompt_len: int = 10, texts=("Hello", ",", " world", "!"), t0: float = 100.0,
                prefill_s: float = 0.2, decode_s: float = 0.05, rid: str = "req-0",
                finish: str | None = "stop") -> list[StepEvent]:
    """A prefill event then decode events, with KV numbers that follow the formula."""
    events, t = [], t0
    for i, text in enumerate(texts):
        phase = "prefill" if i == 0 else "decode"
        dur = prefill_s if i == 0 else decode_s
        kv_tokens = prompt_len + i
        cands = [Candidate(i + 1, text, 0.6, -0.51), Candidate(99, " other", 0.3, -1.2)]
        events.append(StepEvent(
            request_id=rid, phase=phase, step=i, token_id=i + 1, token_text=text, text_delta=text,
            token_prob=0.6, top_candidates=cands, start_s=t, end_s=t + dur,
            num_tokens=prompt_len if i == 0 else 1, kv_tokens=kv_tokens, kv_bytes=kv_tokens * BPT,
            finish_reason=finish if i == len(texts) - 1 else None, memory=memory(kv_tokens * BPT)))
        t += dur
    return events


def make_output(events: list[StepEvent], reason: str = "stop", error: str | None = None,
                arrival: float | None = None) -> RequestOutput:
    """The RequestOutput matching ``events`` (metrics from their timestamps)."""
    arrival = events[0].start_s - 0.01 if arrival is None and events else (arrival or 0.0)
    times = RequestTimes(arrival=arrival, scheduled=events[0].start_s if events else arrival,
                         token_times=[e.end_s for e in events],
                         finished=events[-1].end_s if events else arrival)
    prompt_len = events[0].num_tokens if events else 5
    return RequestOutput(request_id=events[0].request_id if events else "req-x",
                         prompt_token_ids=list(range(prompt_len)), token_ids=[e.token_id for e in events],
                         text="".join(e.text_delta for e in events), finish_reason=reason,
                         metrics=RequestMetrics.from_times(times, prompt_len), error=error,
                         memory=events[-1].memory if events else None)


class FakeHandle:
    """Finished-at-once handle carrying prepared events and output."""

    num_prompt_tokens = None  # as a RequestHandle that can't tell before the first token

    def __init__(self, rid, events, output, engine):
        self.request_id = rid
        self.events = list(events)
        self.output = output
        self.finished = True
        self._engine = engine
        self.closed = False
        self.abort_requested = False

    def result(self, timeout=None):
        return self.output

    def queue_position(self):
        return 0

    def abort(self):
        return False  # already finished

    def close(self):
        self.closed = True


class SlowHandle(FakeHandle):
    """A handle that releases one prepared event per wait and ends as ``abort`` on the wait
    after :meth:`abort` (what the engine does one step after an abort)."""

    def __init__(self, rid, events, output, engine):
        super().__init__(rid, [], None, engine)
        self.finished = False
        self._pending = list(events)

    def result(self, timeout=None):
        if self.abort_requested:
            self.output, self.finished = make_output(self.events, reason="abort"), True
        elif self._pending:
            self.events.append(self._pending.pop(0))
            if not self._pending:
                self.output, self.finished = make_output(self.events), True
        if not self.finished and timeout is None:
            return self.result()
        if not self.finished:
            raise TimeoutError("still running")
        return self.output

    def abort(self):
        if self.finished:
            return False
        self._engine.aborted.append(self.request_id)
        self.abort_requested = True
        return True


class FakeRolling:
    def __init__(self):
        self.outputs = []

    def summary(self):
        return {"count": len(self.outputs), "finished": len(self.outputs), "aborted": 0, "failed": 0,
                "ttft_s": {"p50": 0.2, "p90": 0.3, "p99": 0.4}, "tpot_s": {"p50": 0.05, "p90": 0.05, "p99": 0.05},
                "e2e_s": {"p50": 0.4, "p90": 0.5, "p99": 0.6}}


class FakeEngine:
    """An :class:`engine.protocol.EngineClient` that answers every request with a canned
    stream; ``script`` picks what happens next.

    script values: ``"ok"`` (stream and stop), ``"slow"`` (one event per wait, abortable),
    ``"error"`` (engine error after two tokens),
    ``"queue_full"`` (``QueueFullError`` from submit), ``"too_long"`` (``ValueError``),
    ``"crash"`` (an unexpected ``KeyError`` naming a server path, from submit).
    """

    capabilities = EngineCapabilities(supports_traces=True, supports_lessons=True,
                                      supports_cache_salt=True)
    pool_bytes = None
    remote_view = None

    def __init__(self, script: str = "ok"):
        self.info = fake_info()
        self.recent_steps = []
        self.spec = self.info.spec
        self.gpu = None
        self.rolling = FakeRolling()
        self.script = script
        self.submitted = []
        self.salts = []  # the cache_salt of each submitted request
        self.aborted = []
        self._n = 0
        self._lock = threading.Lock()

    def submit(self, prompt, params, raw=False, use_kv_cache=True, *, request_id=None, cache_salt=None,
               source="user"):
        from engine import QueueFullError

        if self.script == "queue_full":
            raise QueueFullError("the queue is full (32 requests waiting); try again in a moment")
        if self.script == "crash":
            raise KeyError(SECRET_PATH)
        if self.script == "too_long":
            raise ValueError("prompt (9000 tokens) + max_tokens (256) = 9256 tokens exceeds the "
                             "context window of 8192 tokens")
        with self._lock:
            rid = f"req-{self._n}"
            self._n += 1
        self.submitted.append((prompt, params, raw, use_kv_cache))
        self.salts.append(cache_salt)
        if self.script == "error":
            events = make_events(rid=rid, texts=("Hel", "lo"), finish=None)
            out = make_output(events, reason="error", error="RuntimeError: logits contain NaN")
        else:
            events = make_events(rid=rid)
            out = make_output(events)
        self.rolling.outputs.append(out)
        if self.script == "slow":
            return SlowHandle(rid, make_events(rid=rid, texts=tuple("abcdefgh")), out, self)
        return FakeHandle(rid, events, out, self)

    def abort(self, request_id):
        self.aborted.append(request_id)
        return True

    @property
    def max_seq_tokens(self):
        return self.info.context_len

    def generate(self, prompt, params=None, **kwargs):
        return self.submit(prompt, params, **kwargs).result()

    def detokenize(self, token_ids):
        return "".join(f"<{i}>" for i in token_ids)

    def rolling_summary(self):
        return self.rolling.summary()

    @property
    def rolling_version(self):
        return len(self.rolling.outputs)

    def reset_rolling(self):
        self.rolling.outputs.clear()

    def experiment_model(self):
        raise NotImplementedError("a fake engine has no model")

    def block_snapshot(self):
        return BlockPoolSnapshot.empty()

    def shutdown(self):
        self.stopped = True

    def compile_status(self):
        return CompileStatus()

    def stats(self):
        return EngineStats(waiting=0, running=0, finished=len(self.rolling.outputs), queue_max=32)
