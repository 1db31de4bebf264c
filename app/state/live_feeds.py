"""A run's live frames on the page's own route, which the page reads instead of Gradio's messages.

Every message of a Gradio stream costs the browser about 4 ms of its main thread, whatever it
carries: Gradio's front end sets the loading status of each of the event's outputs, applies each
output's diff and hands each one to its component. The Playground's frames (the live channel's
JSON lines, :class:`app.render.live_ops.LiveLog`) need none of that. A run in raw mode therefore
opens a :class:`LiveFeed`: its first frame goes by Gradio and names the feed's path
(``/playground-live/<token>``, served by :mod:`app.server.live_route`); the page reads it as a
stream of those lines, and from the moment it does, the run's frames go there alone. Gradio's
stream then carries only what its components need: the downloads and the final text.

A feed nobody reads, or one whose reader went away, takes nothing: :meth:`LiveFeed.put` says
so, and the run's frames go by Gradio again. The page applies frames in the order of their
numbers, whichever way each came.

Threads: the run's handler (a Gradio worker thread) puts lines; the route's coroutine (the
server's event loop) takes them from an ``asyncio.Queue``, filled with
``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import secrets
import threading

LIVE_ROUTE = "/playground-live/"
"""Where a feed is read: ``LIVE_ROUTE + token``."""
MAX_FEEDS = 512
"""Feeds open at once (runs streaming to a page); beyond it a run streams by Gradio alone."""

OPEN, READ, CLOSED, BROKEN = "open", "read", "closed", "broken"
"""A feed's states: made and not read yet; read by its page; its run ended; its reader went away."""


class LiveFeed:
    """One run's frames for its page to read (see the module's docstring).

    Attributes:
        token: the feed's unguessable name (24 URL-safe characters).
        path: where the page reads it (:data:`LIVE_ROUTE` + token).
        state: :data:`OPEN`, :data:`READ`, :data:`CLOSED` or :data:`BROKEN`.
    """

    def __init__(self, token: str) -> None:
        self.token = token
        self.path = LIVE_ROUTE + token
        self.state = OPEN
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue | None = None

    @property
    def read(self) -> bool:
        """Whether the page reads this feed now (frames put go to it)."""
        return self.state == READ

    def put(self, line: str) -> bool:
        """Send one frame's line (ending in a newline) to the page reading the feed.

        Returns:
            ``False`` when no page reads it (not yet, or no longer): send the frame by Gradio.
        """
        with self._lock:
            if self.state != READ:
                return False
            loop, queue = self._loop, self._queue
        try:
            loop.call_soon_threadsafe(queue.put_nowait, line)
        except RuntimeError:  # the server's loop has closed
            self.broke()
            return False
        return True

    def close(self) -> None:
        """The run ended: the route sends what it holds and ends the response."""
        with self._lock:
            was, self.state = self.state, CLOSED
            loop, queue = self._loop, self._queue
        if was == READ:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, None)
            except RuntimeError:
                pass

    def broke(self) -> None:
        """The page stopped reading (it went away, or its connection broke)."""
        with self._lock:
            if self.state == READ:
                self.state = BROKEN

    def attach(self, loop: asyncio.AbstractEventLoop) -> asyncio.Queue | None:
        """The page starts reading, on the server's event loop ``loop``.

        Returns:
            The queue of lines (``None`` at the run's end), or ``None`` when the feed is read
            already, or closed: a feed is read once.
        """
        with self._lock:
            if self.state != OPEN:
                return None
            self._loop, self._queue, self.state = loop, asyncio.Queue(), READ
            return self._queue


class LiveFeeds:
    """The server's open feeds, by token: the runs' handlers open and close them, the route
    attaches pages to them.

    Args:
        limit: feeds open at once (:data:`MAX_FEEDS`).
    """

    def __init__(self, limit: int = MAX_FEEDS) -> None:
        self.limit = limit
        self._feeds: dict[str, LiveFeed] = {}
        self._lock = threading.Lock()

    def open(self) -> LiveFeed | None:
        """A new feed for a run; ``None`` when :attr:`limit` feeds are open (the run streams by
        Gradio alone). Close it with :meth:`close` when the run ends."""
        with self._lock:
            if len(self._feeds) >= self.limit:
                return None
            feed = LiveFeed(secrets.token_urlsafe(18))
            self._feeds[feed.token] = feed
            return feed

    def close(self, feed: LiveFeed | None) -> None:
        """End ``feed``'s run (``None``: nothing to do) and forget it."""
        if feed is None:
            return
        feed.close()
        with self._lock:
            self._feeds.pop(feed.token, None)

    def attach(self, token: str, loop: asyncio.AbstractEventLoop) -> tuple[LiveFeed, asyncio.Queue] | None:
        """The feed named ``token`` and its queue, for the page that reads it; ``None`` for an
        unknown token, or a feed read already or closed."""
        with self._lock:
            feed = self._feeds.get(token)
        queue = feed.attach(loop) if feed is not None else None
        return (feed, queue) if queue is not None else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._feeds)
