"""The Playground tab: type a prompt and watch the engine answer.

- :mod:`.layout`: the components (first screen, live panels, batching section, downloads).
- :mod:`.frames`: the frame schema: every output named once, with its component and cadence.
- :mod:`.handlers`: what Generate, Stop and the timer do, as plain generators of frames.
- :mod:`.events`: the Gradio listeners and the API endpoints, thin adapters to the handlers.
- :mod:`.plot_panel`: the HTML panel that draws a Plotly figure from its JSON.
"""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr

from app.tabs.context import TabContext
from app.tabs.playground import events, handlers, layout
from app.tabs.playground.frames import TIMER_EVERY_S
from app.tabs.playground.live_channel import channel


def build(ctx: TabContext) -> SimpleNamespace:
    """Lay out the Playground inside its open ``gr.Tab`` and wire it (``ctx.demo``: the Blocks;
    ``ctx.sidebar``: the request's settings, which are its inputs).

    Returns:
        The page namespace: every component by the name the frame schema and the events use.
    """
    pg = ctx.pg
    empty = handlers.empty_panels(pg)
    conversation = layout.first_screen(pg, empty)
    panels = layout.panels(pg, empty, {**conversation, **ctx.sidebar})
    page = SimpleNamespace(**ctx.sidebar, **conversation, **panels, timer=gr.Timer(TIMER_EVERY_S),
                           timer_live=channel("timer-channel", "timer"),
                           batch_seen=gr.State(None), history=gr.State([]))
    events.wire(ctx.demo, page, pg, ctx.max_concurrency)
    return page
