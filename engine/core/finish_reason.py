"""Why a request ended: the one list of finish reasons."""

from __future__ import annotations

import enum


class FinishReason(enum.StrEnum):
    """A finished request's reason; a ``str`` enum, so ``FinishReason.STOP == "stop"``.

    ``STOP``: an EOS token, a stop token or a stop string. ``LENGTH``: ``max_tokens`` or the
    context window. ``ABORT``: the caller (or shutdown) stopped it. ``ERROR``: it failed.
    """

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"

    @property
    def ok(self) -> bool:
        """True when the model finished the request (``stop`` or ``length``)."""
        return self in (FinishReason.STOP, FinishReason.LENGTH)

    @property
    def outcome(self) -> str:
        """The engine's outcome count it adds to: ``finished``, ``aborted`` or ``failed``."""
        return "finished" if self.ok else ("aborted" if self is FinishReason.ABORT else "failed")
