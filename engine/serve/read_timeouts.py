"""Read timeouts for uvicorn: a connection that sends a request's headers or body too slowly is
closed, so half-sent requests cannot hold connections (and their memory) open.

uvicorn has no such timeout of its own: ``timeout_keep_alive`` only closes a connection idle
*between* requests, and as soon as a byte of the next request arrives it waits for the rest
for ever. :func:`timed_http_protocol` wraps uvicorn's HTTP protocol class (h11 or httptools,
whichever ``http="auto"`` picks) with a per-connection deadline checked a few times per
timeout:

- **headers:** from the connection's start, or the end of its previous response, the next
  request's headers must be complete within ``header_timeout_s``;
- **body:** from then on, its body must be complete within ``body_timeout_s``.

A connection past its deadline is closed; an app already reading the body sees
``http.disconnect``. Once the body is in, the response takes as long as it takes (streams).
nginx's ``client_header_timeout`` and ``client_body_timeout`` are the same idea.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

log = logging.getLogger("engine.serve")

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ReadTimeouts:
    """How long a client may take to send a request.

    Attributes:
        header_timeout_s: seconds for a request's headers, from the connection's start or the
            end of the previous response.
        body_timeout_s: seconds for its body, from the end of its headers.

    Raises:
        ValueError: a timeout that is not a positive number (the message names it).
    """

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")

    @property
    def tick_s(self) -> float:
        """How often a connection's deadline is checked: a quarter of the shorter timeout."""
        return max(0.05, min(self.header_timeout_s, self.body_timeout_s) / 4)


def timed_http_protocol(timeouts: ReadTimeouts, base: type | None = None) -> type:
    """uvicorn's HTTP protocol class with :class:`ReadTimeouts` (pass it as
    ``uvicorn.Config(http=...)``).

    Args:
        timeouts: the limits.
        base: the protocol class to wrap; ``None`` = what uvicorn's ``http="auto"`` uses.
    """
    if base is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol as base

    class TimedHTTPProtocol(base):
        read_timeouts = timeouts

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._seen_cycle = None  # the request whose headers the deadline already saw
            self._phase_start = time.monotonic()
            self._deadline_timer = self.loop.call_later(timeouts.tick_s, self._check_deadline)

        def connection_lost(self, exc) -> None:
            timer = getattr(self, "_deadline_timer", None)
            if timer is not None:
                timer.cancel()
            super().connection_lost(exc)

        def _check_deadline(self) -> None:
            self._deadline_timer = None
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                return  # closed, or upgraded to a WebSocket
            now = time.monotonic()
            cycle = self.cycle
            if cycle is not self._seen_cycle:  # new headers arrived: the body's clock starts
                self._seen_cycle, self._phase_start = cycle, now
            if cycle is None or cycle.response_complete:
                if cycle is not None and getattr(self, "_done_cycle", None) is not cycle:
                    self._done_cycle, self._phase_start = cycle, now  # the next request's clock
                limit, what = timeouts.header_timeout_s, "headers"
            elif cycle.more_body:
                limit, what = timeouts.body_timeout_s, "body"
            else:
                limit, what = None, ""  # the app is answering: no limit
                self._phase_start = now
            if limit is not None and now - self._phase_start > limit:
                log.info("closed a connection whose request %s took over %.0f s", what, limit)
                self.transport.close()
                return
            self._deadline_timer = self.loop.call_later(timeouts.tick_s, self._check_deadline)

    TimedHTTPProtocol.__name__ = TimedHTTPProtocol.__qualname__ = f"Timed{base.__name__}"
    return TimedHTTPProtocol
