"""The Lessons tab: nine small experiments for a classroom, on the page's own engine, and the
remedies for each bottleneck with their figures on it.

One module per lesson, each with the same shape: ``TITLE``, ``TEXT`` and ``build(ctx)`` (lays
out and wires itself inside its ``gr.Tab``, returns its components by name), beside its own
handlers and figures. :data:`LESSONS` lists them in the order of the tabs. The work that needs
torch lives in ``engine.experiments``; every lesson run is submitted as a lesson request
(``source="lesson"``, :mod:`app.tabs.lessons.runs`), so it stays out of the users' latency
percentiles. Nothing here imports torch.
"""

from __future__ import annotations

import importlib

import gradio as gr

from app.server.errors import log_internal
from app.tabs.context import TabContext

LESSONS = ("kv_cache", "prefill", "calculator", "sampling", "quantization", "batch", "roofline",
           "speculative", "constrained", "remedies")
"""The lessons' modules in this package, in the order of their tabs; adding one is one module
and one entry here. They are imported when the tab is built: ``engine.experiments`` imports
torch, which the page itself never does (a remote engine's page needs none)."""


OFF_NOTE = ("The lessons are turned off on this server (`python -m app --lessons off`): their "
            "experiments load model variants and take minutes of the machine. Run the page on "
            "your own machine to try them.")
"""What the Lessons tab shows when the server runs with ``--lessons off``."""


def lesson_modules() -> list:
    """The modules of :data:`LESSONS`, imported."""
    return [importlib.import_module(f"{__name__}.{name}") for name in LESSONS]


def build(ctx: TabContext) -> dict:
    """Build the Lessons tab inside an open ``gr.Tab``: one sub-tab per lesson of
    :data:`LESSONS`. An engine without a local model (a remote server) gets a note instead,
    and so does a failure to build (its reason goes to the server log: it may name server
    paths). Returns every lesson's components by name."""
    if not ctx.lessons:
        gr.Markdown(OFF_NOTE)
        return {}
    if not ctx.engine.capabilities.supports_lessons:
        from app.remote.view import LESSONS as NOTE

        gr.Markdown(NOTE)
        return {}
    try:
        return build_lessons(ctx.engine, ctx.session_kwargs, timers_active=False, shown_by=ctx.shown_by)
    except Exception as exc:  # noqa: BLE001 - the playground must still load
        gr.Markdown(f"The lessons are unavailable on this server ({log_internal('the Lessons tab', exc)}).")
        return {}


def build_lessons(engine, session_kwargs=None, timers_active: bool = True, shown_by=None) -> dict:
    """The lessons' sub-tabs around ``engine`` alone (inside an open ``gr.Blocks``/``gr.Tab``).

    Args:
        engine: the running :class:`engine.protocol.EngineClient` (its queue runs every model
            call but the explorer's one-pass step recomputation).
        session_kwargs: ``(session id) -> dict`` of extra ``engine.submit`` arguments for a
            user's own prompts (``Playground.engine_kwargs``: the session's ``cache_salt``).
        timers_active: whether the lessons' refresh timers (the profile panel's, Remedies')
            tick from the page's load; the whole page starts them when its Lessons tab is
            selected (:func:`shown_with_tab`).
        shown_by: the page's Lessons tab, whose ``select`` draws the lessons' panels
            (:meth:`TabContext.draw_when_shown`); ``None``: at the page's load.

    Returns:
        The components by name (for tests and further wiring).
    """
    from app.tabs.lessons import profile_panel

    ctx = TabContext(engine=engine, session_kwargs=session_kwargs or (lambda session_id: {}),
                     timers_active=timers_active, shown_by=shown_by)
    c: dict = profile_panel.build(engine, ctx)
    ctx.profile_view = c["profile_html"]  # the one profile every lesson prints; a sweep redraws it
    # "wrap": with ten lessons the tab bar takes two rows at 1280 px instead of hiding tabs
    # behind Gradio's "⋯" overflow menu
    with gr.Tabs(elem_id="lesson-tabs", overflow_behavior="wrap"):
        for lesson in lesson_modules():
            with gr.Tab(lesson.TITLE):
                c.update(lesson.build(ctx))
    return c


def shown_with_tab(components: dict) -> list:
    """What the page switches with the Lessons tab among its ``components`` (what :func:`build`
    returned): the refresh timers (started while the tab shows) and the profile's right-hand
    sidebar (shown while the tab shows)."""
    return [c for c in components.values() if isinstance(c, (gr.Timer, gr.Sidebar))]


def switched(parts: list, shown: bool) -> list:
    """The updates of :func:`shown_with_tab`'s ``parts`` for the Lessons tab ``shown`` or not."""
    return [gr.Timer(active=shown) if isinstance(p, gr.Timer) else gr.Sidebar(visible=shown)
            for p in parts]
