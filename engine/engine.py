"""``LLMEngine``: one background thread owns the model and runs schedule -> forward -> sample."""

from __future__ import annotations

import itertools
import threading
from collections import deque
import logging
import time

import torch

from .batch_info import BatchInfo
from .block_manager import BlockManager
from .detokenizer import IncrementalDetokenizer, StopStringMatcher, TokenTexts
from .events import Candidate, RequestOutput, StepEvent
from .kv_pool import KVPool
from .handle import RequestHandle
from .loader import LoadedModel, special_token_ids
from .metrics import RequestMetrics, RequestTimes
from .model_runner import ModelRunner, PagedModelRunner
from .params import SamplingParams
from .prompt import encode_prompt
from .sampler import Sampler
from .scheduler import ScheduledSeq, Scheduler, SchedulerOutput
from .sequence import Sequence, SequenceStatus

# Model families whose attention goes through transformers' attention interface with the
# Llama layout (rotary from position_ids, one attention call per layer): paged attention works.
PAGED_FAMILIES = {"llama", "mistral", "qwen2", "qwen3"}
DEFAULT_KV_BUDGET_CPU = 512 * 2**20
log = logging.getLogger("engine")
_NO_IDS = torch.empty(0, dtype=torch.long)


class LLMEngine:
    """An inference engine with explicit prefill and decode steps on one background thread.

    ``submit`` is thread-safe and returns a :class:`RequestHandle`; the engine thread runs
    ``step()`` = schedule, run the model, postprocess (sample, detokenize, stop, emit events).

    Args:
        loaded: a :class:`engine.loader.LoadedModel`.
        max_queue: most requests waiting at once (a full queue raises ``QueueFullError``).
        telemetry: attach a memory breakdown to every step, keep rolling latency stats, and
            read NVML when a GPU is present.
        batching: continuous batching over the paged KV cache (Llama, Qwen2, Mistral
            families); False, or another architecture, serves one request at a time.
        max_num_seqs: most requests running at once.
        max_num_batched_tokens: the per-step token budget (longer prompts prefill in chunks).
        block_size: tokens per KV block.
        kv_cache_bytes: bytes of the KV block pool (default: 512 MiB on CPU, half the free
            memory on a GPU).
        enable_prefix_caching: reuse full blocks of a shared prompt prefix.
        weight_stationary: on CPU, run decode steps of 2-4 sequences with the
            weight-stationary linear layout (:mod:`engine.weight_stationary`); False keeps
            ``F.linear`` everywhere.
    """

    def __init__(self, loaded: LoadedModel, max_queue: int = 32, telemetry: bool = True,
                 batching: bool = True, max_num_seqs: int = 32,
                 max_num_batched_tokens: int = 512, block_size: int = 16,
                 kv_cache_bytes: int | None = None, enable_prefix_caching: bool = True,
                 weight_stationary: bool = True):
        self.loaded = loaded
        self.info = loaded.info
        self.spec = loaded.spec
        self.tokenizer = loaded.tokenizer
        self.token_text = TokenTexts(loaded.tokenizer)
        self.sampler = Sampler(exempt_ids=loaded.eos_token_ids | special_token_ids(loaded.tokenizer))
        self.telemetry = telemetry
        model_type = getattr(loaded.model.config, "model_type", "")
        self.batching_note = ""
        if batching and model_type not in PAGED_FAMILIES:
            self.batching_note = (f"{model_type or 'this'} architecture is served one request at "
                                  "a time: paged attention supports Llama, Qwen2 and Mistral")
            batching = False
        self.paged = batching
        self.pool = None
        self.block_manager = None
        if batching:
            budget = kv_cache_bytes or self._default_kv_budget()
            per_token = self.spec.kv_bytes_per_token(self.info.dtype_bytes)
            num_blocks = KVPool.blocks_for_budget(budget, per_token, block_size)
            self.pool = KVPool(self.spec.layers, self.spec.kv_heads, self.spec.head_dim,
                               num_blocks, block_size, next(loaded.model.parameters()).dtype,
                               self.info.device)
            self.block_manager = BlockManager(num_blocks, block_size, enable_prefix_caching)
            self.runner = PagedModelRunner(loaded.model, self.pool, block_size, weight_stationary)
        else:
            self.runner = ModelRunner(loaded.model)
        self.scheduler = Scheduler(self.block_manager, max_queue=max_queue,
                                   max_num_seqs=max_num_seqs,
                                   max_num_batched_tokens=max_num_batched_tokens)
        from .telemetry.rolling import RollingStats

        self.rolling = RollingStats()
        self.recent_steps: deque[BatchInfo] = deque(maxlen=64)
        self.gpu = None
        self.probe = None
        if telemetry:
            from .telemetry.memory import MemoryProbe
            from .telemetry.nvml import GpuMonitor

            if self.info.device.startswith("cuda"):
                self.gpu = GpuMonitor(torch.device(self.info.device).index or 0)
            self.probe = MemoryProbe(loaded.model, self.info.device, self.spec,
                                     self.info.dtype_bytes, gpu=self.gpu)
        self._handles: dict[str, RequestHandle] = {}
        self._ids = itertools.count()
        self._steps = itertools.count()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stopped = False
        self._counts = {"finished": 0, "aborted": 0, "failed": 0}
        self._thread = threading.Thread(target=self._loop, name="llm-engine", daemon=True)
        self._thread.start()

    def _default_kv_budget(self) -> int:
        """KV pool bytes: 512 MiB on CPU; on a GPU, half of the memory free after loading."""
        if self.info.device.startswith("cuda"):
            free, _ = torch.cuda.mem_get_info(torch.device(self.info.device))
            return int(free * 0.5)
        return DEFAULT_KV_BUDGET_CPU

    @property
    def max_seq_tokens(self) -> int:
        """Longest sequence (prompt + output) one request may reach, in tokens."""
        ctx = self.info.context_len
        if self.pool is not None:
            ctx = min(ctx, self.pool.num_blocks * self.pool.block_size)
        return ctx

    # public API ---------------------------------------------------------------------------
    def submit(self, prompt, params: SamplingParams | None = None, *, raw: bool = False,
               use_kv_cache: bool = True, request_id: str | None = None,
               cache_salt: str | None = None) -> RequestHandle:
        """Queue a request.

        Args:
            prompt: text (one user message through the chat template, or plain text with
                ``raw=True``) or a list of ``{"role", "content"}`` chat messages.
            params: sampling settings (defaults: :class:`SamplingParams()`).
            raw: send a text prompt as is, without the chat template.
            use_kv_cache: False recomputes the whole sequence at every decode step.
            request_id: optional id; one is made when omitted.
            cache_salt: requests share cached prefix blocks only with requests of the same
                salt (vLLM's ``cache_salt``); ``None`` shares the cache with every unsalted
                request. A web server gives each user its own, so no one can probe another's
                prompt by timing.

        Returns:
            A :class:`RequestHandle` streaming :class:`StepEvent` objects.

        Raises:
            ValueError: empty or malformed prompt, or a prompt (plus ``max_tokens``) that does
                not fit the context window; the message names the numbers.
            QueueFullError: the waiting queue is full.
            RuntimeError: the engine was shut down.
        """
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError("params must be a SamplingParams")
        prompt_ids = encode_prompt(self.tokenizer, prompt, raw=raw)
        ctx = self.max_seq_tokens
        n = len(prompt_ids)
        if params.max_tokens is None and n >= ctx:
            raise ValueError(f"prompt is {n} tokens but the context window is {ctx} tokens: "
                             "no room for a single new token")
        if params.max_tokens is not None and n + params.max_tokens > ctx:
            what = "the context window" if ctx == self.info.context_len else "the KV cache pool"
            raise ValueError(f"prompt ({n} tokens) + max_tokens ({params.max_tokens}) = "
                             f"{n + params.max_tokens} tokens exceeds {what} of {ctx} tokens")
        rid = request_id or f"req-{next(self._ids)}"
        gen = None
        if params.seed is not None:
            gen = torch.Generator(device=self.runner.device).manual_seed(params.seed)
        seq = Sequence(request_id=rid, prompt_ids=prompt_ids, params=params,
                       use_kv_cache=use_kv_cache, detok=IncrementalDetokenizer(self.tokenizer),
                       times=RequestTimes(arrival=time.perf_counter()), context_len=ctx,
                       generator=gen, stop_matcher=StopStringMatcher(params.stop),
                       cache_salt=cache_salt)
        if cache_salt is not None and not isinstance(cache_salt, str):
            raise ValueError(f"cache_salt must be a string, got {type(cache_salt).__name__}")
        handle = RequestHandle(rid, self.abort, self.scheduler_position)
        with self._wake:
            if self._stopped:
                raise RuntimeError("the engine has been shut down")
            if rid in self._handles:
                raise ValueError(f"request id {rid!r} is already in use")
            self.scheduler.add(seq)
            self._handles[rid] = handle
            self._wake.notify()
        return handle

    def generate(self, prompt, params: SamplingParams | None = None, **kwargs) -> RequestOutput:
        """Submit and wait: the blocking convenience form of :meth:`submit`."""
        return self.submit(prompt, params, **kwargs).result()

    def abort(self, request_id: str) -> bool:
        """Stop a request before its next step and free its cache.

        Returns:
            True if the request was waiting or running, False if unknown or already finished.
        """
        with self._wake:
            for seq in self.scheduler.all_sequences():
                if seq.request_id == request_id and not seq.is_finished:
                    seq.abort_requested = True
                    self._wake.notify()
                    return True
        return False

    def scheduler_position(self, request_id: str) -> int:
        """Requests ahead of ``request_id`` (0 once it runs)."""
        with self._lock:
            return self.scheduler.position(request_id)

    def stats(self) -> dict:
        """Counts (waiting, running, finished, aborted, failed, queue_max), live KV bytes,
        and with paged attention the block pool (blocks used/free/cached, preemptions,
        prefix-cache hit rate)."""
        with self._lock:
            running = list(self.scheduler.running)
            out = {"waiting": len(self.scheduler.waiting), "running": len(running),
                   "queue_max": self.scheduler.max_queue, **self._counts,
                   "kv_bytes_live": sum(self._kv_bytes(s) for s in running),
                   "batching": self.paged, "batching_note": self.batching_note,
                   "preemptions": self.scheduler.num_preemptions}
            if self.block_manager is not None:
                b = self.block_manager.stats()
                out.update(blocks_total=b.num_blocks, blocks_used=b.used, blocks_free=b.free,
                           blocks_cached=b.cached, block_size=b.block_size,
                           prefix_hit_rate=b.hit_rate)
            return out

    def block_snapshot(self) -> dict:
        """The block pool now, for drawing PagedAttention's picture.

        Returns:
            ``{"block_size", "num_blocks", "state": per-block "free" / "cached" / "used",
            "tables": [{"request_id", "blocks", "tokens"}...]}`` where ``tokens`` counts the
            slots computed or being computed by the step in flight; empty without paging.
        """
        if self.block_manager is None:
            return {}
        with self._lock:
            bm = self.block_manager
            state = ["used" if b.ref_count else ("cached" if b.key is not None else "free")
                     for b in bm.blocks]
            tables = [{"request_id": s.request_id, "blocks": list(s.block_table),
                       "tokens": s.num_computed + s.num_inflight}
                      for s in self.scheduler.running if s.block_table]
            return {"block_size": bm.block_size, "num_blocks": len(bm.blocks), "state": state,
                    "tables": tables}

    def _kv_bytes(self, seq: Sequence) -> int:
        """Bytes of a sequence's keys and values in the cache (measured from the tensors)."""
        if seq.kv is not None:
            return seq.kv.nbytes()
        if self.pool is not None and seq.block_table:
            return seq.num_computed * self.pool.bytes_per_token
        return 0

    def memory_snapshot(self):
        """The memory breakdown now (``None`` with telemetry off)."""
        if self.probe is None:
            return None
        with self._lock:
            kv = self.pool.nbytes if self.pool is not None else sum(
                self._kv_bytes(s) for s in self.scheduler.running)
        return self.probe.snapshot(kv_bytes=kv)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Abort everything, stop the thread and release every cache."""
        with self._wake:
            self._stopped = True
            for seq in self.scheduler.all_sequences():
                seq.abort_requested = True
            self._wake.notify()
        self._thread.join(timeout)
        if self.gpu is not None:
            self.gpu.close()

    # engine thread ------------------------------------------------------------------------
    def _loop(self) -> None:
        busy = False
        while True:
            with self._wake:
                self._reap_aborted()
                if self._stopped and not self.scheduler.has_work():
                    return
                batch = self.scheduler.schedule()
                if batch is None:
                    if busy:  # just went idle: hand freed memory back to the system
                        busy = False
                        release_free_memory(self.info.device)
                    self._wake.wait(0.5)
                    continue
            busy = True
            self.step(batch)

    def _reap_aborted(self) -> None:
        for seq in self.scheduler.all_sequences():
            if seq.abort_requested and not seq.is_finished:
                self._finish(seq, "abort")

    def step(self, batch: SchedulerOutput) -> None:
        """Run one scheduled step: model forward, sampling, postprocessing, events."""
        for seq in batch.recompute:
            self._guarded(seq, self._run_one, seq)
        if not batch.entries:
            return
        if not self.paged:
            for e in batch.entries:
                self._guarded(e.seq, self._run_one, e.seq)
            return
        try:
            self._run_paged(batch.entries)
        except Exception:  # noqa: BLE001 - isolate the failing request: rerun each alone
            for e in batch.entries:
                if not e.seq.is_finished:
                    self._guarded(e.seq, self._run_paged, [e])

    def _guarded(self, seq: Sequence, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - one request's failure must not stop others
            self._fail(seq, exc)

    def _run_paged(self, entries: list[ScheduledSeq]) -> None:
        """One packed forward for ``entries``, then sampling for each that reached its end."""
        if self.probe is not None:
            self.probe.begin_step()
        start = time.perf_counter()
        for e in entries:
            if e.seq.times.scheduled is None:
                e.seq.times.scheduled = start
        logits = self.runner.run(entries)
        total = sum(e.num_new for e in entries)
        memory = None
        if self.probe is not None:  # the packed step is one row of ``total`` tokens
            memory = self.probe.end_step(self.pool.nbytes, 1, total)
            kv = memory.part("kv_cache")
            if kv is not None:
                b = self.block_manager.stats()
                kv.note = (f"paged pool allocated once: {b.num_blocks} blocks x {b.block_size} "
                           f"tokens; {b.used} in use, {b.cached} free but holding a prefix")
        info = self._batch_info(entries, start)
        sampling = []
        for e in entries:
            seq = e.seq
            if e.samples:  # read before num_computed moves on
                sampling.append(e)
            seq.num_computed += e.num_new
            seq.num_inflight = 0
            seq.first_unkeyed = self.block_manager.register_full_blocks(
                seq.block_table, seq.all_ids, seq.num_computed, seq.first_unkeyed,
                seq.cache_salt)
        if not sampling:
            return
        seqs = [e.seq for e in sampling]
        choices = self.sampler.sample_many(logits, [q.params for q in seqs],
                                           [q.generator for q in seqs],
                                           lambda i: _penalty_ids(seqs[i], logits.device))
        for e, choice in zip(sampling, choices):
            if isinstance(choice, Exception):  # e.g. NaN logits of this request only
                self._fail(e.seq, choice)
                continue
            try:
                self._emit(e.seq, choice, start, e.num_new, memory, info)
            except Exception as exc:  # noqa: BLE001 - one request's failure must not stop others
                self._fail(e.seq, exc)

    def _batch_info(self, entries: list[ScheduledSeq], start: float) -> BatchInfo:
        b = self.block_manager.stats()
        # tokens held per physical block (a shared prefix block counts once)
        held: dict[int, int] = {}
        bs = self.block_manager.block_size
        for seq in self.scheduler.running:
            filled = seq.num_computed + seq.num_inflight
            for i, blk in enumerate(seq.block_table):
                held[blk] = max(held.get(blk, 0), min(bs, max(0, filled - i * bs)))
        info = BatchInfo(
            step_id=next(self._steps), start_s=start,
            request_ids=[e.seq.request_id for e in entries],
            new_tokens=[e.num_new for e in entries],
            phases=[e.phase for e in entries],
            prefill_tokens=sum(e.num_new for e in entries if e.phase == "prefill"),
            decode_tokens=sum(1 for e in entries if e.phase == "decode"),
            running=len(self.scheduler.running), waiting=len(self.scheduler.waiting),
            blocks_used=b.used, blocks_free=b.free, blocks_cached=b.cached,
            kv_utilization=sum(held.values()) / max(1, len(held) * bs),
            preemptions=self.scheduler.num_preemptions, prefix_hit_rate=b.hit_rate)
        self.recent_steps.append(info)
        return info

    def _sample_and_emit(self, seq: Sequence, logits, start: float, num_tokens: int, memory,
                         info: BatchInfo | None) -> None:
        """Sample the next token from ``[V]`` logits, postprocess, and stream the event."""
        context, outputs = _penalty_ids(seq, logits.device)
        choice = self.sampler.sample(logits, seq.params, context, outputs, seq.generator)
        self._emit(seq, choice, start, num_tokens, memory, info)

    def _emit(self, seq: Sequence, choice, start: float, num_tokens: int, memory,
              info: BatchInfo | None) -> None:
        """Append the sampled token, postprocess (detokenize, stops), and stream the event."""
        end = time.perf_counter()
        phase = "decode" if seq.output_ids else "prefill"
        if phase == "prefill":  # a chunked prefill spans several steps: it began when scheduled
            start = seq.times.scheduled
        seq.last_memory = memory
        seq.output_ids.append(choice.token_id)
        seq.times.token_times.append(end)
        delta = self._postprocess(seq, choice.token_id)
        text = self.token_text
        event = StepEvent(
            request_id=seq.request_id, phase=phase, step=len(seq.output_ids) - 1,
            token_id=choice.token_id, token_text=text(choice.token_id), text_delta=delta,
            token_prob=choice.prob,
            top_candidates=[Candidate(i, text(i), p, _log(p))
                            for i, p in zip(choice.top_ids, choice.top_probs)],
            start_s=start, end_s=end, num_tokens=num_tokens,
            kv_tokens=seq.kv.num_tokens if seq.kv is not None else seq.num_computed
            if seq.use_kv_cache else 0,
            kv_bytes=self._kv_bytes(seq) if seq.use_kv_cache else 0,
            batch_size=len(info.request_ids) if info else 1, finish_reason=seq.finish_reason,
            memory=memory, batch=info, block_table=list(seq.block_table))
        handle = self._handles.get(seq.request_id)
        if handle is not None:
            handle._push(event)
        if seq.finish_reason is not None:
            with self._lock:
                self._finish(seq, seq.finish_reason)

    def _run_one(self, seq: Sequence) -> None:
        """One step of one sequence with its own contiguous cache, or without any cache."""
        phase = "decode" if seq.output_ids else "prefill"
        if self.probe is not None:
            self.probe.begin_step()
        start = time.perf_counter()
        if seq.times.scheduled is None:
            seq.times.scheduled = start
        if phase == "prefill" and seq.use_kv_cache:
            seq.kv = self.runner.new_cache()
            logits = self.runner.prefill(seq.prompt_ids, seq.kv)
            num_tokens = len(seq.prompt_ids)
        elif seq.use_kv_cache:
            logits = self.runner.decode(seq.output_ids[-1], seq.kv)
            num_tokens = 1
        else:
            logits = self.runner.recompute(seq.all_ids)
            num_tokens = seq.num_tokens
        seq.num_computed = seq.num_tokens
        # process memory holds the paged pool (allocated once) even when this request uses none
        kv_bytes = self.pool.nbytes if self.pool is not None else (
            seq.kv.nbytes() if seq.kv is not None else 0)
        memory = self.probe.end_step(kv_bytes, 1, num_tokens) if self.probe is not None else None
        self._sample_and_emit(seq, logits, start, num_tokens, memory, None)

    def _postprocess(self, seq: Sequence, token: int) -> str:
        """Detokenize, check EOS / stop ids / stop strings / length; return the safe text delta."""
        p = seq.params
        seq.detok.add(token)
        if token in p.stop_token_ids:
            seq.finish_reason, seq.stop_reason = "stop", token
        elif not p.ignore_eos and token in self.loaded.eos_token_ids:
            seq.finish_reason, seq.stop_reason = "stop", token
        elif p.max_tokens is not None and len(seq.output_ids) >= p.max_tokens:
            seq.finish_reason = "length"
        elif seq.num_tokens >= seq.context_len:
            seq.finish_reason = "length"
        if seq.finish_reason is not None:
            seq.detok.finish()
        text = seq.detok.text
        hit = seq.stop_matcher.find(text, seq.emitted_len)
        if hit is not None:
            text = text[:hit[0]]
            seq.detok.text = text
            seq.finish_reason, seq.stop_reason = "stop", hit[1]
        end = len(text) if seq.finish_reason else seq.stop_matcher.safe_end(text)
        end = max(end, seq.emitted_len)
        delta = text[seq.emitted_len:end]
        seq.emitted_len = end
        return delta

    def _fail(self, seq: Sequence, exc: BaseException) -> None:
        """End a request with ``error``. Its message is short and safe to show a client: an
        unexpected exception gives only its type and the request id, while the traceback goes
        to the server log (logger ``engine``) under that id."""
        seq.error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, torch.OutOfMemoryError):
            seq.release_cache()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            seq.error = "out of memory: the request did not fit in the device's memory"
        elif not isinstance(exc, (ValueError, RuntimeError)):
            seq.error = (f"internal error ({type(exc).__name__}) in request {seq.request_id}; "
                         "details are in the server log")
        log.error("request %s failed: %s", seq.request_id, type(exc).__name__,
                  exc_info=(type(exc), exc, exc.__traceback__))
        with self._lock:
            self._finish(seq, "error")

    def _finish(self, seq: Sequence, reason: str) -> None:
        """End a sequence (caller holds the lock): free its cache, record metrics, notify."""
        if seq.is_finished:
            return
        seq.finish_reason = reason
        seq.status = SequenceStatus.FINISHED
        seq.times.finished = time.perf_counter()
        if seq.block_table:
            seq.last_kv_bytes = self._kv_bytes(seq)
        seq.release_cache()
        self.scheduler.release(seq)
        key = {"stop": "finished", "length": "finished", "abort": "aborted"}.get(reason, "failed")
        self._counts[key] += 1
        handle = self._handles.pop(seq.request_id, None)
        output = RequestOutput(
            request_id=seq.request_id, prompt_token_ids=list(seq.prompt_ids),
            token_ids=list(seq.output_ids), text=seq.detok.text[:seq.emitted_len]
            if reason in ("abort", "error") else seq.detok.text,
            finish_reason=reason, error=seq.error,
            metrics=RequestMetrics.from_times(seq.times, len(seq.prompt_ids)),
            kv_cache_bytes=seq.last_kv_bytes, stop_reason=seq.stop_reason,
            use_kv_cache=seq.use_kv_cache, memory=seq.last_memory,
            deltas=[e.text_delta for e in handle.events] if handle else [])
        self.rolling.add(output)
        if handle is not None:
            handle._finish(output)


def release_free_memory(device: str) -> None:
    """Return cached, unused memory to the system when the engine goes idle.

    On CUDA this empties torch's caching allocator; on Linux with glibc, ``malloc_trim(0)``
    gives the heap's free pages back (activations of a large batch otherwise stay in the
    process's RSS).
    """
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _penalty_ids(seq: Sequence, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(context_ids [N], output_ids [M])`` int64 for the penalties; empty when none is set
    (no need to build two tensors of every id at each step)."""
    p = seq.params
    if p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty:
        return (torch.tensor(seq.all_ids, dtype=torch.long, device=device),
                torch.tensor(seq.output_ids, dtype=torch.long, device=device))
    return _NO_IDS, _NO_IDS


def _log(p: float) -> float:
    import math

    return math.log(p) if p > 0 else float("-inf")
