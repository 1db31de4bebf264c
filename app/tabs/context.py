"""What every tab's ``build(ctx)`` is given."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


def _no_kwargs(session_id: str) -> dict:
    return {}


@dataclass
class TabContext:
    """The page's shared objects, handed to each tab's and each lesson's ``build``.

    Attributes:
        pg: the shared :class:`app.state.playground.Playground` (``None`` when a tab is built
            alone around an engine, as the lessons' tests do).
        engine: the :class:`engine.protocol.EngineClient` (``pg.engine`` by default).
        session_kwargs: ``(session id) -> dict`` of extra ``engine.submit`` arguments for a
            user's own prompts (``Playground.engine_kwargs``: the session's ``cache_salt``).
        max_concurrency: requests (page and API together) Gradio runs at once.
        sidebar: the sidebar's components by name (the Playground's inputs).
        demo: the ``gr.Blocks`` being built (for page-wide events: load, unload).
        lessons: whether the Lessons tab runs its experiments (``python -m app --lessons off``
            builds it as a note, with no event a client could call).
        compare_peer: a remote :class:`engine.protocol.EngineClient` beside the served engine
            (``python -m app --compare-base-url``), for the Compare tab; ``None`` without one.
        timers_active: whether a tab's own refresh timers tick from the page's load. The whole
            page builds the Lessons tab's timers stopped and starts them while that tab is
            selected: a timer's tick is a server event for every open page, wanted only where
            its panel shows.
        profile_view: the Lessons tab's machine-profile panel (``gr.HTML``), which a lesson
            whose run measures the profile redraws at once; ``None`` outside the Lessons tab.
        batch_views: the Batch size lesson's figure and summary (set when it is built), which
            Remedies redraws when its Measure runs the server's batch sweep; empty before.
        shown_by: the tab whose ``select`` shows this one's panels (the whole page's Lessons
            tab); ``None`` when the tab is the page (built alone), drawn at the page's load.
    """

    pg: object = None
    engine: object = None
    session_kwargs: Callable[[str], dict] = _no_kwargs
    max_concurrency: int = 36
    sidebar: dict = field(default_factory=dict)
    demo: object = None
    lessons: bool = True
    compare_peer: object = None
    timers_active: bool = True
    profile_view: object = None
    batch_views: list = field(default_factory=list)
    shown_by: object = None

    def draw_when_shown(self, fn, inputs, outputs) -> None:
        """Run ``fn`` (a server event, private, no progress) to draw ``outputs`` each time the
        tab shows: on ``shown_by``'s ``select``, or at the page's load when there is none.

        A draw at the page's load would put its outputs among the components Gradio's front end
        refreshes on every message of every later event (see :data:`app.page.SIDEBAR_JS`), for
        pages that never open the tab.
        """
        private = dict(api_visibility="private", concurrency_limit=None, show_progress="hidden")
        if self.shown_by is not None:
            self.shown_by.select(fn, inputs, outputs, **private)
            return
        import gradio as gr

        page = self.demo or gr.context.Context.root_block  # the Blocks being built
        if page is not None:
            page.load(fn, inputs, outputs, **private)

    @classmethod
    def of(cls, pg, max_concurrency: int = 36, sidebar: dict | None = None,
           lessons: bool = True) -> "TabContext":
        """The context of a whole page around playground ``pg``."""
        return cls(pg=pg, engine=pg.engine, session_kwargs=pg.engine_kwargs,
                   max_concurrency=max_concurrency, sidebar=dict(sidebar or {}), lessons=lessons)
