"""The engine's background thread: it steps while there is work, and between two steps takes
what other threads handed it (aborts, calls onto the model's thread, holds, the stop).

:class:`EngineLoop` owns that thread and its inbox; :class:`engine.engine.LLMEngine` owns the
scheduler and the step. Both share the engine's one lock: the inbox is read and written under
it, so a request submitted, aborted or held is seen by the next step and never by half of one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Callable, Iterable

from engine.errors import EngineShutdownError
from engine.heap import freeze_long_lived
from engine.wiring import release_free_memory

log = logging.getLogger("engine")


class EngineLoop:
    """The thread that runs :meth:`LLMEngine.step` and the inbox other threads write to.

    Args:
        lock: the engine's lock (it guards the scheduler; the loop's condition shares it).
        step: one engine step, ``step() -> bool`` (False when there was nothing to run),
            called without the lock held.
        has_work: ``has_work() -> bool``, whether requests wait or run (called under the lock).
        runner: the model runner: warmed up before the first step on a CUDA device, and the
            argument of every :meth:`call`.
        device: the engine's device string (on a CPU, freed heap pages go back to the system
            whenever the engine goes idle: :func:`engine.wiring.release_free_memory`).
        warmup: warm the runner up first (CUDA only; a failure only costs the first TTFT).
    """

    def __init__(self, lock: threading.Lock, step: Callable[[], bool],
                 has_work: Callable[[], bool], runner, device: str, warmup: bool):
        self.wake = threading.Condition(lock)
        self.stopped = False
        self._step, self._has_work, self._runner = step, has_work, runner
        self._device, self._warmup = device, warmup
        self._aborts: set[str] = set()
        self._calls: deque[tuple[Future, Callable]] = deque()
        self._held = 0  # hold(): no new step starts while above 0 (until _hold_until)
        self._hold_until = 0.0
        self._thread = threading.Thread(target=self._run, name="llm-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # ---- the inbox (each method's caller holds the lock, except call and hold) ---------------
    def check_open(self) -> None:
        """Raises ``EngineShutdownError`` once :meth:`stop` ran."""
        if self.stopped:
            raise EngineShutdownError("the engine has been shut down")

    def abort(self, request_ids: Iterable[str]) -> None:
        """End these requests before the next step (unknown ids are skipped then)."""
        self._aborts.update(request_ids)
        self.wake.notify()

    def take_aborts(self) -> set[str]:
        """The request ids to abort now (the inbox forgets them)."""
        aborts, self._aborts = self._aborts, set()
        return aborts

    def stop(self, request_ids: Iterable[str]) -> None:
        """Refuse new work, abort these requests, and let the thread end once none is left."""
        self.stopped = True
        self.abort(request_ids)

    def join(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for the thread to end (after :meth:`stop`)."""
        self._thread.join(timeout)

    def call(self, fn: Callable) -> Future:
        """Queue ``fn(runner)`` for the thread, run between two steps (takes the lock).

        Raises:
            EngineShutdownError: after :meth:`stop`.
        """
        future: Future = Future()
        with self.wake:
            self.check_open()
            self._calls.append((future, fn))
            self.wake.notify()
        return future

    @contextlib.contextmanager
    def hold(self, timeout_s: float):
        """No new step starts while the block runs, for at most ``timeout_s`` seconds."""
        with self.wake:
            self._held += 1
        self._hold_until = time.perf_counter() + timeout_s
        try:
            yield
        finally:
            with self.wake:
                self._held -= 1
                self.wake.notify()

    # ---- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        if self._warmup and str(self._runner.device).startswith("cuda"):
            try:
                self._runner.warm_up()
            except Exception:  # noqa: BLE001 - a failed warm-up only costs the first TTFT
                log.exception("warm-up failed")
        freeze_long_lived("engine built")
        busy = False
        while True:
            with self.wake:
                self._run_calls()
                if self.stopped and not self._has_work() and not self._aborts:
                    return
                if self._held and time.perf_counter() < self._hold_until:  # see hold()
                    self.wake.wait(0.01)
                    continue
                if not self._aborts and not self._has_work():
                    if busy:  # just went idle: hand freed memory back to the system
                        busy = False
                        release_free_memory(self._device)
                    self.wake.wait(0.5)
                    continue
            busy = self._step() or busy

    def _run_calls(self) -> None:
        while self._calls:
            future, fn = self._calls.popleft()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(self._runner))
                except Exception as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)
