"""The Playground's frame schema: every output of the page, named once.

A *frame* is a dict of output name -> plain value (a string, a list, a figure) that
:mod:`app.tabs.playground.handlers` yields; :mod:`app.tabs.playground.events` turns frames into
Gradio values. Each :class:`Output` here says which component shows it (its attribute on the
page's namespace, see :mod:`app.tabs.playground.layout`), how often it refreshes while an answer
streams, whether it is a Plotly figure, and what Clear and the timer do with it. Every other
list (the stream's outputs, the timer's, Clear's, the batching section's) is derived from
:data:`OUTPUTS`: adding a panel is one entry here (and its component in the layout).

While an answer streams, the panels marked ``live`` are drawn from the live channel's ops
(:mod:`app.tabs.playground.live_channel`: each frame carries what changed) and the chat and the
completion are Gradio values of their own. The batching section, the device panel and the
rolling table are the page timer's (drawn once for every page); while the page's own answer
streams, its timer pauses and the answer's frames carry them, as ops, at the timer's interval: a
timer tick is a Gradio event of its own, which cost a streaming page more of its browser's time
than the tick's panels (and its pool HTML went whole where the ops patch what changed).

Refresh cadences while an answer streams (``Playground.follow`` polls at the text cadence, every
0.125 s: at most 8 frames a second, every token when decode runs at 8 tokens/s or less; each
text frame costs the browser about 10 ms of CPU, so 10 frames a second cost a 64-token answer
about 7% more of it, docs/performance.md): the text parts ride every frame, the heavier parts
join a text frame when their own interval has passed, so the plots cost about 3 Plotly redraws a
second in all (each one 10-20 ms of the browser's time). The figures are first due one interval
after the start: until then the last answer's plots stay, and an answer shorter than that draws
its plots once, in its last frame. Figures that fall due when the answer should reach its token
limit within half an interval (at its recent decode rate) are left to the last frame as well:
the page drew them twice in under half a second.
"""

from __future__ import annotations

from dataclasses import dataclass

TEXT_EVERY_S = 0.125   # text, token chips, stat cards and the KV formula line (also the follow poll)
FIGURES_EVERY_S = 1.0  # the latency and KV cache plots
FIGURES_LAST_PART = 0.5  # figures due this part of an interval before the answer's expected end wait for it
MEMORY_EVERY_S = 2.0   # the memory bar (its parts move little from one step to the next)
TIMER_EVERY_S = 2.0    # the page timer (device, rolling table, batching section), and a run's frames of them

# cadences
TEXT, FIGURES, MEMORY, BATCH = "text", "figures", "memory", "batch"
ONCE = "once"    # set by the first frame only (the prompt box, emptied in chat mode)
END = "end"      # set by the last frame (the conversation)
TIMER = "timer"  # by the page's timer (the device panel, the rolling table), or a run of its page

EMPTY = "empty"  # Clear: the value of ``handlers.empty_panels``


@dataclass(frozen=True)
class Output:
    """One output of the Playground.

    Attributes:
        name: its key in a frame.
        component: the attribute of the page namespace that shows it.
        cadence: when it is refreshed while streaming (:data:`TEXT`, :data:`FIGURES`, ...).
        figure: a Plotly figure (sent as JSON through ``app.tabs.playground.plot_panel``).
        live: drawn from the live channel's ops while an answer streams
            (:mod:`app.tabs.playground.live_channel`), not by its own Gradio value.
        stream: part of Generate's frames at its own cadence (a ``timer`` output is part of
            them at :data:`TIMER_EVERY_S`, while the page's timer pauses).
        timer: refreshed by the page's timer while the page's own answer is not streaming.
        clear: what Clear puts there: :data:`EMPTY`, a literal (``[]``, ``""``), or ``None``
            (Clear leaves it).
    """

    name: str
    component: str
    cadence: str
    figure: bool = False
    live: bool = False
    stream: bool = True
    timer: bool = False
    clear: object = None


OUTPUTS: tuple[Output, ...] = (
    Output("chat", "chatbot", TEXT, clear=()),
    Output("history", "history", END, clear=()),
    Output("completion", "completion", TEXT, clear=""),
    Output("message", "message", ONCE),
    Output("status", "status", TEXT, live=True, clear=EMPTY),
    Output("tokens", "tokens", TEXT, live=True, clear=EMPTY),
    Output("cards", "stat_cards", TEXT, live=True, clear=EMPTY),
    Output("latency", "latency", FIGURES, figure=True, live=True, clear=EMPTY),
    Output("kv", "kv_plot", FIGURES, figure=True, live=True, clear=EMPTY),
    Output("kv_formula", "kv_formula", TEXT, live=True, clear=EMPTY),
    Output("memory", "memory", MEMORY, figure=True, live=True, clear=EMPTY),
    Output("batch_stats", "batch_stats", BATCH, live=True, timer=True),
    Output("pool", "pool", BATCH, live=True, timer=True),
    Output("tables", "tables", BATCH, live=True, timer=True),
    Output("strip", "strip", BATCH, figure=True, live=True, timer=True),
    Output("rolling", "rolling", TIMER, live=True, timer=True),
    Output("device", "device", TIMER, figure=True, live=True, timer=True),
)
BY_NAME = {o.name: o for o in OUTPUTS}

# What a frame may carry besides outputs: the trace files' paths at the end, and ``busy``
# (True in the first frame, False in the last; absent while streaming).
CONTROL_KEYS = ("trace", "busy")
# The trace downloads Generate's stream empties in its first frame and fills in its last (JSON,
# CSV); Generate and Stop themselves are switched in the browser (events.RUN_JS).
DOWNLOADS = (("json", "json_btn"), ("csv", "csv_btn"))

LIVE_KEYS = tuple(o.name for o in OUTPUTS if o.live)                 # drawn through the live channel
LIVE_FIGURES = frozenset(o.name for o in OUTPUTS if o.live and o.figure)
LIVE_APPEND = frozenset({"tokens"})                                  # only grows while an answer streams
STREAM_KEYS = tuple(o.name for o in OUTPUTS if o.stream and not o.live and o.cadence in (TEXT, ONCE))
END_KEYS = tuple(o.name for o in OUTPUTS if o.stream and o.cadence == END)  # set by the run's last frame
DOWNLOAD_KEYS = tuple(name for name, _ in DOWNLOADS)
FIGURE_KEYS = frozenset(o.name for o in OUTPUTS if o.figure)
PLOT_KEYS = tuple(o.name for o in OUTPUTS if o.cadence in (FIGURES, MEMORY))
BATCH_KEYS = tuple(o.name for o in OUTPUTS if o.cadence == BATCH)
TIMER_KEYS = tuple(o.name for o in OUTPUTS if o.timer)
CLEAR_KEYS = tuple(o.name for o in OUTPUTS if o.clear is not None)
FRAME_KEYS = tuple(o.name for o in OUTPUTS if o.stream) + CONTROL_KEYS


def components(page, names) -> list:
    """The page's components for output (or trace download) ``names``, in order."""
    where = {**{o.name: o.component for o in OUTPUTS}, **dict(DOWNLOADS)}
    return [getattr(page, where[n]) for n in names]


def clear_value(name: str, empty: dict):
    """What Clear puts in output ``name`` (``empty``: the panels before any request)."""
    value = BY_NAME[name].clear
    if value == EMPTY:
        return empty[name]
    return list(value) if isinstance(value, tuple) else value
