"""Plotly figures as plain ``{"data": [...], "layout": {...}}`` dicts, for the page's live panels.

Building a ``plotly.graph_objects.Figure`` validates every property it is given, and
``update_layout(template="plotly_white")`` copies and re-validates the whole template: with several
pages open that was most of the server's Python time, taken from the engine thread (docs/performance.md,
"Many pages at once"). The live panels instead build plain
dicts, resolve the template once per process, and serialize with orjson; the figure still
renders the same, since Plotly.js receives the same JSON.

``gr.Plot.postprocess`` (Gradio 6.31) serializes anything that is not matplotlib, bokeh or altair
with ``value.to_json()``: :class:`PlainFigure` provides that, and keeps its JSON, so one figure
shared by several pages is serialized once. Its ``data`` and ``layout`` read like plotly's
(``fig.data[0].x``, ``fig.layout.title.text``) for the tests; ``go.Figure(fig.to_plotly_json())``
validates it when wanted.
"""

from __future__ import annotations

from functools import lru_cache

import orjson

TEMPLATE = "plotly_white"


class Props(dict):
    """A dict whose keys also read as attributes, as plotly's objects do; a missing key reads as
    ``None`` (plotly's value of an unset property). Nested dicts and lists read the same way."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _view(self.get(name))


def _view(value):
    if isinstance(value, dict):
        return value if isinstance(value, Props) else Props(value)
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [_view(v) for v in value]
    return value


@lru_cache(maxsize=4)
def template_json(name: str = TEMPLATE) -> bytes:
    """The named Plotly template resolved to JSON once (what ``update_layout(template=name)`` puts
    in every figure's ``layout.template``)."""
    import plotly.io as pio

    return orjson.dumps(pio.templates[name].to_plotly_json())


class PlainFigure:
    """A figure as plain data: ``traces`` (list of trace dicts) and ``layout`` (a dict, without the
    template, which :meth:`to_json` adds).

    Args:
        traces: Plotly trace dicts (``{"type": "scatter", "x": [...], ...}``), drawn in order.
        layout: the layout dict; ``template`` names a Plotly template, spliced in when serialized.
    """

    def __init__(self, traces: list[dict], layout: dict, template: str | None = TEMPLATE) -> None:
        self.traces = traces
        self.layout_dict = layout
        self.template = template
        self._json: str | None = None

    @property
    def data(self) -> tuple:
        """The traces, readable as attributes (``fig.data[1].x``)."""
        return tuple(Props(t) for t in self.traces)

    @property
    def layout(self) -> Props:
        """The layout, readable as attributes (``fig.layout.title.text``); no template."""
        return Props(self.layout_dict)

    def to_json(self) -> str:
        """The figure as Plotly JSON (serialized once; the figure must not change afterwards)."""
        if self._json is None:
            layout = orjson.dumps(self.layout_dict, option=orjson.OPT_SERIALIZE_NUMPY)
            if self.template:
                tpl = b'"template":' + template_json(self.template)
                layout = b"{" + tpl + (b"," + layout[1:] if len(layout) > 2 else b"}")
            data = orjson.dumps(self.traces, option=orjson.OPT_SERIALIZE_NUMPY)
            self._json = (b'{"data":' + data + b',"layout":' + layout + b"}").decode()
        return self._json

    def to_plotly_json(self) -> dict:
        """The figure as the dict ``go.Figure.to_plotly_json()`` gives (template included)."""
        return orjson.loads(self.to_json())


def base_layout(title: str, x_title: str, y_title: str, height: int, **extra) -> dict:
    """The panels' common layout (title at the left, legend below, white template)."""
    layout = {
        "title": {"text": title, "font": {"size": 15}, "x": 0.01, "xanchor": "left"},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 40},
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.22, "xanchor": "left", "x": 0.0,
                   "traceorder": "normal"},
        "font": {"size": 13},
        "hovermode": "closest",
        # tick labels never reach past the panel (fixed margins): "allow" spares plotly.js a
        # measurement of every tick label at every draw (about 3 ms of a 15-18 ms redraw)
        "xaxis": {"title": {"text": x_title}, "ticklabeloverflow": "allow"},
        "yaxis": {"title": {"text": y_title}, "ticklabeloverflow": "allow"},
    }
    layout.update(extra)
    return layout


def add_hint(layout: dict, text: str) -> dict:
    """A grey note in the middle of the plot (what an empty panel shows)."""
    layout.setdefault("annotations", []).append(
        {"text": text, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
         "font": {"size": 14, "color": "#888"}})
    return layout
