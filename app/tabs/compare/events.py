"""The Compare tab's events: Run both (one event, its buttons switched in the browser as the
Playground's Generate: :mod:`app.tabs.run_buttons`), Stop, the presets, and the ``/compare``
API endpoint.

The stream sends one value: the tab's own live channel's log (:class:`app.render.live_ops.LiveLog`),
one JSON line per frame with what changed in each panel (chips appended, plot points added).
"""

from __future__ import annotations

import itertools

import gradio as gr

from app.render.live_ops import LiveEncoder, LiveLog
from app.render.plainfig import TEMPLATE
from app.server.errors import guard
from app.tabs.run_buttons import start_js, wire_run
from app.tabs.compare import api, handlers
from app.tabs.compare.layout import LIVE, SIDE_FIELDS
from app.tabs.compare.presets import Preset
from app.tabs.compare.settings import DEFAULTS

PRIVATE = dict(api_visibility="private", concurrency_limit=None, show_progress="hidden")
LIVE_APPEND = frozenset({LIVE["left"], LIVE["right"]})
LIVE_FIGURES = frozenset({LIVE["latency"], LIVE["kv"]})
_RUNS = itertools.count(1)


def live_updates(frames, run_id: str):
    """:func:`app.tabs.compare.handlers.compare`'s frames as the channel's log, one value per
    frame (``run_id``: unique on the page), then the log's first line alone
    (:attr:`app.render.live_ops.LiveLog.head`), which ends the run."""
    log = LiveLog(run_id, templates=(TEMPLATE,))
    panels = LiveEncoder(append=LIVE_APPEND, figures=LIVE_FIGURES)
    for frame in frames:
        yield log.add(panels.ops({LIVE[k]: v for k, v in frame.items() if k in LIVE}))
    # Gradio's closing message carries the last value whole: the log cut back to its first line
    # keeps it small (the channel keeps what it drew from a value its drawn log starts with)
    yield log.head


def side_dict(values) -> dict:
    """One side's component values (:data:`SIDE_FIELDS` order) as its settings dict; the
    page's seed -1 means random."""
    d = dict(zip(SIDE_FIELDS, values))
    if d.get("seed") is not None and isinstance(d["seed"], (int, float)) and d["seed"] < 0:
        d["seed"] = None
    return d


def preset_values(preset: Preset) -> list:
    """What a preset puts in the prompt box, the watch line and both sides' components."""
    out = [preset.prompt or gr.skip(), f"**{preset.label}.** {preset.watch}"]
    for side in (preset.left, preset.right):
        merged = {**DEFAULTS.as_dict(), **side}
        out += [(-1 if merged[f] is None and f == "seed" else merged[f]) for f in SIDE_FIELDS]
    return out


def wire(c: dict, ctx, engines, presets: tuple[Preset, ...]) -> None:
    """Attach the tab's listeners and the ``/compare`` endpoint (inside the Blocks)."""
    pg = ctx.pg
    sides = c["left_settings"] + c["right_settings"]

    def on_run(values: dict, request: gr.Request):  # values: component -> value (a set input)
        left = side_dict(values.get(x) for x in c["left_settings"])
        right = side_dict(values.get(x) for x in c["right_settings"])
        frames = handlers.compare(pg, engines, request.session_hash, values.get(c["prompt"]),
                                  left, right, notify=gr.Warning)
        yield from live_updates(frames, f"cmp-{request.session_hash}-{next(_RUNS)}")

    run = c["run"].click(
        guard(on_run), {c["prompt"], *sides}, c["live"], js=start_js("cmp-run", "cmp-stop"),
        show_progress="hidden", concurrency_limit=ctx.max_concurrency, concurrency_id="engine",
        api_visibility="private")
    wire_run(run, "cmp-run", "cmp-stop")

    def on_stop(request: gr.Request):
        pg.stop(request.session_hash)

    c["stop"].click(guard(on_stop), None, None, **PRIVATE)
    for preset, btn in zip(presets, c["preset_btns"]):
        btn.click(guard(lambda p=preset: preset_values(p)), None, [c["prompt"], c["watch"]] + sides,
                  **PRIVATE)
    gr.api(guard(api.make_compare(pg, engines)), api_name="compare",
           concurrency_limit=ctx.max_concurrency, concurrency_id="engine")
