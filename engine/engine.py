"""``LLMEngine``: one background thread owns the model; each step is schedule -> execute ->
update -> process."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
import time
from collections import deque
from concurrent.futures import Future

import torch

from engine.config import EngineConfig
from engine.engine_loop import EngineLoop
from engine.engine_views import EngineViews
from engine.core.batch_info import BatchInfo
from engine.core.finish_reason import FinishReason
from engine.core.sequence import Sequence
from engine.heap import thaw
from engine.input_processor import InputProcessor
from engine.model.model_info import LoadedModel
from engine.model.special_tokens import special_token_ids
from engine.model.prompt_bytes import longest_token_bytes
from engine.output.events import RequestOutput
from engine.output.handle import RequestHandle
from engine.output.output_processor import OutputProcessor
from engine.params import SamplingParams
from engine.structured.engine_part import StructuredOutputs
from engine.wiring import build_parts, note_pool
from engine.worker.kv_pool import kv_dtype_name


class LLMEngine(EngineViews):
    """An inference engine with explicit prefill and decode steps on one background thread.

    ``submit`` is thread-safe and returns a :class:`RequestHandle`. The engine thread runs
    :meth:`step`: ``scheduler.schedule()`` -> ``runner.execute()`` (forward pass and sampling)
    -> ``scheduler.update_from_output()`` (all bookkeeping) -> ``output_processor.process()``
    (text, stop strings, events, outputs). Data flows one way; only this class calls them.
    Around the step: :class:`engine.input_processor.InputProcessor` checks and builds a
    submitted request on the caller's thread, and :class:`engine.engine_loop.EngineLoop` runs
    the thread and takes aborts, calls, holds and the stop from other threads.

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
        self.input_processor = InputProcessor(
            tokenizer=self.tokenizer, longest_token_bytes=self.longest_token_bytes,
            context_len=lambda: self.info.context_len, config=self.config, paged=self.paged,
            block_manager=self.block_manager, scheduler=self.scheduler,
            structured=self.structured, drafter=self.drafter, device=self.runner.device)
        self._steps = itertools.count()
        self._lock = threading.Lock()
        # the loop looks ``step`` up at each call: a wrapper put on the engine (the class
        # benchmark's step timer, scripts/bench_class.py) sees every step the loop runs
        self._loop = EngineLoop(self._lock, lambda: self.step(), self.scheduler.has_work, self.runner,
                                self.info.device, self.config.warmup)
        self._loop.start()

    @property
    def max_seq_tokens(self) -> int:
        """Longest sequence (prompt + output) one request may reach, in tokens."""
        return self.input_processor.max_seq_tokens

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
        seq = self.input_processor.process_inputs(
            prompt, params, raw=raw, use_kv_cache=use_kv_cache, request_id=request_id,
            cache_salt=cache_salt, source=source, speculative=speculative,
            num_speculative_tokens=num_speculative_tokens)
        rid = seq.request_id
        handle = RequestHandle(rid, self.abort, self.scheduler_position, len(seq.prompt_ids))
        arrival = time.perf_counter()
        with self._lock:
            self._loop.check_open()
            if rid in self.output_processor.states:
                raise ValueError(f"request id {rid!r} is already in use")
            self.scheduler.add(seq)
            self.output_processor.add_request(seq, handle, arrival)
            self._loop.wake.notify()
        return handle

    def generate(self, prompt, params: SamplingParams | None = None, **kwargs) -> RequestOutput:
        """Submit and wait: the blocking convenience form of :meth:`submit`."""
        return self.submit(prompt, params, **kwargs).result()

    def abort(self, request_id: str) -> bool:
        """Stop a request before its next step and free its cache.

        Returns:
            True if the request was waiting or running, False if unknown or already finished.
        """
        with self._lock:
            if not any(s.request_id == request_id for s in self.scheduler.all_sequences()):
                return False
            self._loop.abort([request_id])
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
        with self._loop.hold(timeout_s):
            yield self

    def call(self, fn) -> Future:
        """Run ``fn(runner)`` on the engine thread between two steps (the thread that owns the
        model): for work beside the requests, such as the Lessons' logits of one step.

        Returns:
            A ``Future`` with ``fn``'s result or exception.

        Raises:
            EngineShutdownError: the engine was shut down.
        """
        return self._loop.call(fn)

    def scheduler_position(self, request_id: str) -> int:
        """Requests ahead of ``request_id`` (0 once it runs)."""
        with self._lock:
            return self.scheduler.position(request_id)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Abort everything, stop the thread and release every cache."""
        with self._lock:
            self._loop.stop([s.request_id for s in self.scheduler.all_sequences()])
        self._loop.join(timeout)
        self.runner.close()
        if self.gpu is not None:
            self.gpu.close()
        thaw()

    # ---- the engine thread (engine.engine_loop runs it) ------------------------------------
    def step(self) -> bool:
        """One engine step. Returns False when there was nothing to run."""
        with self._lock:
            aborts = self._loop.take_aborts()
            if aborts:
                self._finish(self.scheduler.finish_requests(aborts, FinishReason.ABORT))
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
            finished += self.scheduler.finish_sequences(stopped, FinishReason.STOP)
            self._finish(finished)
            self.recent_steps.append(batch)
        return True

    def _finish(self, seqs: list[Sequence]) -> None:
        """Free the caches of finished sequences and hand their outputs to their callers."""
        self.runner.release([s.seq_id for s in seqs])
        self.structured.release(seqs)
        if self.drafter is not None:
            for s in seqs:
                self.drafter.release(s.request_id)
        now = time.perf_counter()
        for seq in seqs:
            self.output_processor.finish(seq, now)
