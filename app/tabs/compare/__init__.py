"""The Compare tab: one prompt, two settings, both answers streaming side by side.

- :mod:`.settings`: one side's settings and their checks; :mod:`.presets`: the one-click pairs.
- :mod:`.engines`: which engine runs a side (the served one, a second variant, a remote peer).
- :mod:`.run`: submitting both sides together and folding their events.
- :mod:`.handlers`: Run both as a plain generator of frames; :mod:`.api`: ``/compare``.
- :mod:`.layout`: the components; :mod:`.events`: the listeners and the live channel's stream.
"""

from __future__ import annotations

from app.tabs.compare import events, handlers, layout
from app.tabs.compare.engines import EngineSet
from app.tabs.compare.presets import shown_presets
from app.tabs.context import TabContext


def build(ctx: TabContext) -> dict:
    """Lay out the Compare tab inside its open ``gr.Tab`` and wire it.

    ``ctx.compare_peer``: a remote engine beside the served one (the "this engine vs the remote
    server" preset), or ``None``.

    Returns:
        Its components by name, and ``engines``: the :class:`EngineSet` (its variant engines
        are shut down with ``engines.shutdown()``).
    """
    peer = getattr(ctx, "compare_peer", None)
    engines = EngineSet(ctx.engine, peer=peer)
    presets = shown_presets(engines.remote, peer is not None)
    empty = handlers.empty_frame()
    c = layout.top(engines.remote)
    c.update(layout.preset_buttons(presets))
    c.update(layout.settings(engines.remote, peer is not None))
    c.update(layout.answers(empty))
    c.update(layout.panels(empty))
    events.wire(c, ctx, engines, presets)
    c["engines"] = engines
    return c
