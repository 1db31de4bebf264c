"""What every open page draws alike, computed once per refresh for all of them.

With a class of pages open, per-page work must stay proportional to what the page itself
changes: the batching section's engine data (stats, the block pool snapshot, recent steps) is
read once per refresh and its pictures drawn once (:class:`app.render.batch.BatchSection`), each
page only marking its own requests; the Device panel is drawn once per device sample, the
rolling table once per finished request. Pages then send the same objects, and a figure shared
by several pages is serialized once.
"""

from __future__ import annotations

import threading
import time
import weakref

from app.render import cards, figures
from app.render.batch import BatchSection, Streaming
from app.state.frame_budget import FrameBudget

DEVICE_EVERY_S = 1.0  # the device sampler's own interval: a newer figure would show the same readings


class SharedViews:
    """The shared parts of the page for one :class:`app.state.playground.Playground`.

    Args:
        pg: the playground.
        clock: seconds clock (``time.monotonic``; tests pass a fake).
    """

    def __init__(self, pg, clock=time.monotonic) -> None:
        self.pg = pg
        self.clock = clock
        self._lock = threading.Lock()
        self._section: BatchSection | None = None
        self._section_at = float("-inf")
        self._device = None
        self._device_at = float("-inf")
        self._rolling: tuple[tuple, str] | None = None
        self.frames = FrameBudget()  # the streaming pages' shared frame rate (app.state.frame_budget)

    def batch_section(self, max_age_s: float = 0.0) -> BatchSection:
        """The batching section now, drawn once for every page.

        Args:
            max_age_s: a section drawn less than this many seconds ago is good enough (pages
                streaming an answer redraw the section once a second and accept one half a
                second old, so many pages share one engine snapshot); otherwise the engine's
                numbers are read, and the section is redrawn only if they changed.
        """
        with self._lock:  # one page draws, the others wait for its result (about a millisecond)
            now = self.clock()
            section = self._section
            if section is not None and now - self._section_at < max_age_s:
                return section
            stats = self.pg.visible_stats()  # no other users' prefix hits unless shared
            pages, fps = self.frames.summary()  # for the teacher: the class and its frame rate
            streaming = Streaming(pages, round(fps, 1))
            last = _last_step_id(self.pg.engine.recent_steps)
            key = (last, stats.running, stats.waiting, stats.blocks_used, stats.blocks_cached,
                   streaming)
            if section is None or section.key != key:
                _, snapshot, steps = self.pg.batch_data()
                section = self._section = BatchSection(stats, snapshot, steps, streaming)
                section.key = key
            self._section_at = now
            return section

    def device_figure(self):
        """The Device panel, redrawn at most once per device sample."""
        return self.device_drawing()[1]

    def device_drawing(self) -> tuple[float, object]:
        """``(drawn_at, figure)``: the Device panel and when it was drawn (this object's clock,
        seconds), so a page can tell a new drawing from the one it has without comparing the
        figures."""
        with self._lock:
            now = self.clock()
            if self._device is None or now - self._device_at >= DEVICE_EVERY_S:
                mon = self.pg.device
                self._device = figures.device_figure(mon.samples(), mon.gpu_available, mon.reason, mon.name)
                self._device_at = now
            return self._device_at, self._device

    def rolling_html(self) -> str:
        """The recent-requests table, redrawn when a request has ended or the table was reset."""
        st = self.pg.engine_stats()
        key = (st.finished, st.aborted, st.failed, self.pg.engine.rolling_version)  # a reset too
        with self._lock:
            if self._rolling is None or self._rolling[0] != key:
                self._rolling = (key, cards.rolling_table_html(self.pg.rolling_summary()))
            return self._rolling[1]


def _last_step_id(recent):
    if not recent:
        return None
    try:
        last = recent[-1]
    except IndexError:  # emptied meanwhile
        return None
    return last["step_id"] if isinstance(last, dict) else last.step_id


_views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_views_lock = threading.Lock()


def shared(pg) -> SharedViews:
    """The :class:`SharedViews` of a playground (made on first use, gone with the playground)."""
    with _views_lock:
        views = _views.get(pg)
        if views is None:
            views = _views[pg] = SharedViews(pg)
        return views
