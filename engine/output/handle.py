"""The caller's side of a request: a thread-safe stream of step events and the final output."""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator

from engine.output.events import RequestOutput, StepEvent

_DONE = object()


class RequestHandle:
    """Iterate it to receive a request's :class:`StepEvent` objects as the engine produces them.

    Iteration ends when the request finishes; then :attr:`output` holds the
    :class:`RequestOutput`. Closing the handle (or leaving a ``with`` block) aborts an
    unfinished request, which frees its KV cache within one engine step.

    :attr:`num_prompt_tokens` is the prompt's length in tokens, known at submit (``None`` where
    the engine can't tell before the first token, e.g. a remote server).
    """

    num_prompt_tokens: int | None = None

    def __init__(self, request_id: str, abort: Callable[[str], bool],
                 position: Callable[[str], int], num_prompt_tokens: int | None = None):
        self.request_id = request_id
        self.num_prompt_tokens = num_prompt_tokens
        self.events: list[StepEvent] = []
        self.output: RequestOutput | None = None
        self._queue: queue.Queue = queue.Queue()
        self._abort = abort
        self._position = position
        self._done = threading.Event()
        self.abort_requested = False  # set once abort() reached the engine in time

    # engine side -------------------------------------------------------------------------
    def _push(self, event: StepEvent) -> None:
        self.events.append(event)
        self._queue.put(event)

    def _finish(self, output: RequestOutput) -> None:
        self.output = output
        self._done.set()
        self._queue.put(_DONE)

    # caller side -------------------------------------------------------------------------
    def __iter__(self) -> Iterator[StepEvent]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                self._queue.put(_DONE)  # later iterations end at once too
                return
            yield item

    def result(self, timeout: float | None = None) -> RequestOutput:
        """Wait for the request to end and return its output.

        Raises:
            TimeoutError: it did not end within ``timeout`` seconds.
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"request {self.request_id} still running after {timeout} s")
        return self.output

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def queue_position(self) -> int:
        """Requests ahead of this one in the engine (0 once it runs or ends)."""
        return 0 if self.finished else self._position(self.request_id)

    def abort(self) -> bool:
        """Ask the engine to stop this request; True if it was still running or waiting
        (then :attr:`abort_requested` is True until the request ends as ``abort``)."""
        if self.finished or not self._abort(self.request_id):
            return False
        self.abort_requested = True
        return True

    def close(self) -> None:
        """Abort if unfinished (call when the consumer goes away)."""
        self.abort()

    def __enter__(self) -> "RequestHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
