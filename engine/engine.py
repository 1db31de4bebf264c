"""``LLMEngine``: one background thread owns the model; each step is schedule -> execute ->
update -> process."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future

import torch

from engine.config import EngineConfig
from engine.engine_views import EngineViews
from engine.core.batch_info import BatchInfo
from engine.core.finish_reason import FinishReason
from engine.core.sequence import SOURCES, Sequence
from engine.errors import EngineShutdownError
from engine.heap import freeze_long_lived, thaw
from engine.model.model_info import LoadedModel
from engine.model.special_tokens import special_token_ids
from engine.model.prompt import check_fits, encode_prompt
from engine.model.prompt_bytes import (check_prompt_bytes, check_prompt_prefix,
                                       longest_token_bytes)
from engine.output.events import RequestOutput
from engine.output.handle import RequestHandle
from engine.output.output_processor import OutputProcessor
from engine.core.sequence_group import new_group
from engine.params import SamplingParams, sample_seed
from engine.spec_decode.spec_state import spec_state_for
from engine.structured.engine_part import StructuredOutputs
from engine.wiring import build_parts, note_pool, release_free_memory
from engine.worker.kv_pool import kv_dtype_name

log = logging.getLogger("engine")


class LLMEngine(EngineViews):
    """An inference engine with explicit prefill and decode steps on one background thread.

    ``submit`` is thread-safe and returns a :class:`RequestHandle`. The engine thread runs
    :meth:`step`: ``scheduler.schedule()`` -> ``runner.execute()`` (forward pass and sampling)
    -> ``scheduler.update_from_output()`` (all bookkeeping) -> ``output_processor.process()``
    (text, stop strings, events, outputs). Data flows one way; only this class calls them.

    Args:
        loaded: a :class:`engine.model.model_info.LoadedModel`.
        config: an :class:`engine.config.EngineConfig` (defaults when omitted).
        runner: a model runner to use instead of the one built for the model (tests drive
            the engine with a fake one).
        **options: any :class:`EngineConfig` field, overriding ``config``
            (e.g. ``LLMEngine(loaded, batching=False)``).
    """

    def __init__(self, loaded: LoadedModel, config: EngineConfig | None = None, *,
                 runner=None, **options):
        self.config = dataclasses.replace(config or EngineConfig(), **options)
        self.loaded, self.info, self.spec = loaded, loaded.info, loaded.spec
        self.tokenizer = loaded.tokenizer
        self.longest_token_bytes = longest_token_bytes(loaded.tokenizer)
        # the draft model of speculative="draft", loaded before the KV pool is sized; its
        # per-request caches live outside that pool (engine.spec_decode.draft_proposer)
        self.drafter = None
        if self.config.draft_model is not None:
            from engine.spec_decode.draft_loader import load_draft_model

            self.drafter = load_draft_model(self.config.draft_model, loaded, progress=None)
        parts = build_parts(loaded, self.config,
                            loaded.eos_token_ids | special_token_ids(loaded.tokenizer), runner)
        if parts.kv_dtype is not None:   # the KV cache's storage, as this engine keeps it
            self.info = dataclasses.replace(
                self.info, kv_dtype=kv_dtype_name(parts.kv_dtype),
                kv_dtype_bytes=torch.empty(0, dtype=parts.kv_dtype).element_size())
        self.paged, self.batching_note = parts.paged, parts.note
        self.pool, self.block_manager = parts.pool, parts.block_manager
        self.runner, self.scheduler = parts.runner, parts.scheduler
        self.gpu, self.probe, self.rolling = parts.gpu, parts.probe, parts.rolling
        if self.drafter is not None and self.probe is not None:
            self.probe.weights += self.drafter.weights_bytes
        self.output_processor = OutputProcessor(loaded.tokenizer, self.rolling)
        self.structured = StructuredOutputs(loaded.tokenizer, loaded.model.config)
        self.recent_steps: deque[BatchInfo] = deque(maxlen=64)
        self._ids, self._steps = itertools.count(), itertools.count()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._aborts: set[str] = set()
        self._calls: deque[tuple[Future, object]] = deque()
        self._stopped = False
        self._held = 0  # hold(): no new step starts while above 0 (until _hold_until)
        self._hold_until = 0.0
        self._thread = threading.Thread(target=self._loop, name="llm-engine", daemon=True)
        self._thread.start()

    @property
    def max_seq_tokens(self) -> int:
        """Longest sequence (prompt + output) one request may reach, in tokens."""
        ctx = self.info.context_len
        if self.paged:
            ctx = min(ctx, len(self.block_manager.blocks) * self.block_manager.block_size)
        return ctx

    @property
    def max_prompt_bytes(self) -> int | None:
        """Most UTF-8 bytes of prompt text that could fit: :attr:`max_seq_tokens` times the
        longest token's bytes (``None`` when the tokenizer lists no vocabulary). A longer
        text is refused before it is tokenized (:mod:`engine.model.prompt_bytes`)."""
        if self.longest_token_bytes is None:
            return None
        return self.max_seq_tokens * self.longest_token_bytes

    # ---- public API --------------------------------------------------------------------------
    def submit(self, prompt, params: SamplingParams | None = None, *, raw: bool = False,
               use_kv_cache: bool = True, request_id: str | None = None,
               cache_salt: str | None = None, source: str = "user",
               speculative: str | bool | None = None,
               num_speculative_tokens: int | None = None) -> RequestHandle:
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
            source: ``"user"``, or ``"lesson"`` for a run of the page's lessons and bench
                experiments: its latency goes to the rolling statistics apart from the users'.
            speculative: drafter for this request: ``"ngram"`` (prompt lookup), ``"draft"``
                (the engine's ``draft_model``; ValueError without one), ``False`` or
                ``"off"`` for plain decoding, ``None`` for the engine's ``config.speculative``.
                Only with the paged cache and a KV cache; see :mod:`engine.spec_decode`.
            num_speculative_tokens: its ``k`` (``None``: ``config.num_speculative_tokens``).

        Returns:
            A :class:`RequestHandle` streaming :class:`StepEvent` objects.

        Raises:
            ValueError: empty or malformed prompt, a bad argument, or a prompt (plus
                ``max_tokens``) that does not fit the context window; the message names it.
                A structure (``params.structured_outputs``) that does not compile raises
                :class:`engine.structured.params.StructuredOutputError` naming its field.
                A prompt whose text alone is too large to fit is refused before it is
                tokenized (:mod:`engine.model.prompt_bytes`).
            QueueFullError: the waiting queue is full.
            EngineShutdownError: the engine was shut down.
        """
        params = params or SamplingParams()
        if not isinstance(params, SamplingParams):
            raise ValueError("params must be a SamplingParams")
        if cache_salt is not None and not isinstance(cache_salt, str):
            raise ValueError(f"cache_salt must be a string, got {type(cache_salt).__name__}")
        if source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
        ctx = self.max_seq_tokens
        what = "the context window" if ctx == self.info.context_len else "the KV cache pool"
        check_prompt_bytes(prompt, ctx, self.longest_token_bytes, what)  # before tokenizing
        check_prompt_prefix(self.tokenizer, prompt, ctx, what)  # a long one by its beginning
        prompt_ids = encode_prompt(self.tokenizer, prompt, raw=raw)
        check_fits(len(prompt_ids), params.max_tokens, ctx, what)
        rid = request_id or f"req-{next(self._ids)}"
        # the grammar compiles here, on the caller's thread, not between the engine's steps
        structured = self.structured.state_for(params, self.paged and use_kv_cache)
        if params.group_width > 1 or params.use_beam_search:
            if speculative not in (None, False, "off"):
                raise ValueError("speculative decoding works on one-sequence requests: use it "
                                 "without n, best_of or num_beams above 1")
            seq = self._new_group(rid, prompt_ids, params, use_kv_cache, ctx, cache_salt, source)
        else:
            gen = None
            if params.seed is not None:
                gen = torch.Generator(device=self.runner.device).manual_seed(params.seed)
            spec = spec_state_for(self.config, params, speculative, num_speculative_tokens,
                                  self.paged and use_kv_cache, self.drafter, rid)
            seq = Sequence(request_id=rid, prompt_ids=prompt_ids, params=params,
                           use_kv_cache=use_kv_cache, context_len=ctx, generator=gen,
                           cache_salt=cache_salt, source=source, spec=spec)
        self.structured.attach(seq, structured)
        handle = RequestHandle(rid, self.abort, self.scheduler_position)
        arrival = time.perf_counter()
        with self._wake:
            if self._stopped:
                raise EngineShutdownError("the engine has been shut down")
            if rid in self.output_processor.states:
                raise ValueError(f"request id {rid!r} is already in use")
            self.scheduler.add(seq)
            self.output_processor.add_request(seq, handle, arrival)
            self._wake.notify()
        return handle

    def _new_group(self, rid: str, prompt_ids: list[int], params: SamplingParams,
                   use_kv_cache: bool, ctx: int, cache_salt: str | None,
                   source: str = "user") -> Sequence:
        """The first sequence of a request with several samples or beams.

        Raises:
            ValueError: without the paged KV cache, wider than ``max_num_seqs``, or when its
                sequences, unshared, could not all fit the pool at full length.
        """
        if not (self.paged and use_kv_cache):
            raise ValueError("n, best_of and num_beams above 1 need the paged KV cache "
                             "(batching on, use_kv_cache on)")
        if params.group_width > self.scheduler.max_num_seqs:
            raise ValueError(f"{'num_beams' if params.use_beam_search else 'best_of'} must be at "
                             f"most max_num_seqs ({self.scheduler.max_num_seqs}), got "
                             f"{params.group_width}")
        bm = self.block_manager
        longest = len(prompt_ids) + (params.max_tokens or ctx - len(prompt_ids))
        if params.group_width * bm.blocks_needed(min(longest, ctx)) > len(bm.blocks):
            # after a preemption every sequence is recomputed on its own blocks: all must fit
            raise ValueError(
                f"{'num_beams' if params.use_beam_search else 'best_of'} = {params.group_width} "
                f"sequences of up to {min(longest, ctx)} tokens do not fit the KV cache pool "
                f"({len(bm.blocks) * bm.block_size} tokens); lower it or max_tokens")
        gens = [None] * params.group_width
        if params.seed is not None:
            gens = [torch.Generator(device=self.runner.device).manual_seed(sample_seed(params.seed, k))
                    for k in range(params.group_width)]
        return new_group(rid, prompt_ids, params, gens, self.scheduler.eos_token_ids, ctx,
                         use_kv_cache=use_kv_cache, cache_salt=cache_salt, source=source)

    def generate(self, prompt, params: SamplingParams | None = None, **kwargs) -> RequestOutput:
        """Submit and wait: the blocking convenience form of :meth:`submit`."""
        return self.submit(prompt, params, **kwargs).result()

    def abort(self, request_id: str) -> bool:
        """Stop a request before its next step and free its cache.

        Returns:
            True if the request was waiting or running, False if unknown or already finished.
        """
        with self._wake:
            if not any(s.group_id == request_id for s in self.scheduler.all_sequences()):
                return False
            self._aborts.add(request_id)
            self._wake.notify()
            return True

    @contextlib.contextmanager
    def hold(self, timeout_s: float = 5.0):
        """Keep the engine from starting a step while the block runs (a step in progress
        finishes): requests submitted inside it are scheduled together, as one batch, in the
        next step. The page's Compare tab submits its two sides this way, so neither waits a
        step behind the other.

        Args:
            timeout_s: the engine steps again after this many seconds even if the block has
                not ended (a caller that hangs never stalls other users for longer).
        """
        with self._wake:
            self._held += 1
        self._hold_until = time.perf_counter() + timeout_s
        try:
            yield self
        finally:
            with self._wake:
                self._held -= 1
                self._wake.notify()

    def call(self, fn) -> Future:
        """Run ``fn(runner)`` on the engine thread between two steps (the thread that owns the
        model): for work beside the requests, such as the Lessons' logits of one step.

        Returns:
            A ``Future`` with ``fn``'s result or exception.
        """
        future: Future = Future()
        with self._wake:
            if self._stopped:
                raise EngineShutdownError("the engine has been shut down")
            self._calls.append((future, fn))
            self._wake.notify()
        return future

    def scheduler_position(self, request_id: str) -> int:
        """Requests ahead of ``request_id`` (0 once it runs)."""
        with self._lock:
            return self.scheduler.position(request_id)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Abort everything, stop the thread and release every cache."""
        with self._wake:
            self._stopped = True
            self._aborts.update(s.request_id for s in self.scheduler.all_sequences())
            self._wake.notify()
        self._thread.join(timeout)
        self.runner.close()
        if self.gpu is not None:
            self.gpu.close()
        thaw()

    # ---- the engine thread -------------------------------------------------------------------
    def _loop(self) -> None:
        if self.config.warmup and str(self.runner.device).startswith("cuda"):
            try:
                self.runner.warm_up()
            except Exception:  # noqa: BLE001 - a failed warm-up only costs the first TTFT
                log.exception("warm-up failed")
        freeze_long_lived("engine built")
        busy = False
        while True:
            with self._wake:
                self._run_calls()
                if self._stopped and not self.scheduler.has_work() and not self._aborts:
                    return
                if self._held and time.perf_counter() < self._hold_until:  # see hold()
                    self._wake.wait(0.01)
                    continue
                if not self._aborts and not self.scheduler.has_work():
                    if busy:  # just went idle: hand freed memory back to the system
                        busy = False
                        release_free_memory(self.info.device)
                    self._wake.wait(0.5)
                    continue
            busy = self.step() or busy

    def _run_calls(self) -> None:
        while self._calls:
            future, fn = self._calls.popleft()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(self.runner))
                except Exception as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)

    def step(self) -> bool:
        """One engine step. Returns False when there was nothing to run."""
        with self._lock:
            if self._aborts:
                self._finish(self.scheduler.finish_requests(self._aborts, FinishReason.ABORT))
                self._aborts.clear()
            scheduler_output = self.scheduler.schedule()
        if scheduler_output is None:
            return False
        if self.probe is not None:
            self.probe.begin_step()
        runner_output = self.runner.execute(scheduler_output)
        memory = None
        if self.probe is not None:
            memory = self.probe.end_step(self._kv_bytes(), 1, scheduler_output.num_tokens)
            note_pool(memory, self.block_manager if self.paged else None)
            self._note_draft(memory)
        with self._lock:
            batch = self.scheduler.batch_info(scheduler_output, next(self._steps),
                                              runner_output.start_s)
            finished = self.scheduler.update_from_output(scheduler_output, runner_output)
            stopped = self.output_processor.process(scheduler_output, runner_output, batch,
                                                    memory)
            finished += self.scheduler.finish_requests(stopped, FinishReason.STOP)
            self._finish(finished)
            self.recent_steps.append(batch)
        return True

    def _finish(self, seqs: list[Sequence]) -> None:
        """Free the caches of finished sequences and hand their outputs to their callers."""
        self.runner.release([s.request_id for s in seqs])
        self.structured.release(seqs)
        if self.drafter is not None:
            for s in seqs:
                self.drafter.release(s.request_id)
        now = time.perf_counter()
        for seq in seqs:
            self.output_processor.finish(seq, now)

    # ---- snapshots for the page --------------------------------------------------------------
