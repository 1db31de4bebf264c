"""A live Plotly panel that redraws in place: ``gr.HTML`` holding the figure's JSON, drawn with
``Plotly.react`` into one persistent ``<div>``.

``gr.Plot`` (Gradio 6.31) wraps its Plotly view in a keyed block that is rebuilt whenever the
figure changes: every update draws the figure twice (once into the old view, then into a fresh
one), and a fresh Plotly plot costs more than ``Plotly.react`` on an existing one. With a class of
pages streaming, that was most of each browser's work. This panel draws each new figure once,
into the same ``<div>``, so Plotly only updates what changed; the JSON is the same the page's
figures always sent (:class:`app.render.plainfig.PlainFigure`).

plotly.js comes from the plotly Python package (``package_data/plotly.min.js``), served by
the page's own static route (:mod:`app.server.file_routes`) and loaded once per page through the
component's ``head``.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

TEMPLATE = "<div class='live-plot'></div>"
# Draws props.value (the figure's JSON) into the panel's div, again whenever it changes; waits
# for plotly.js if the page is still loading it. Same settings as gr.Plot: responsive, autosize.
# A hidden panel (another tab) is drawn when it shows, and a panel whose width changes (window,
# sidebar) is resized: Plotly sizes a plot drawn while hidden at its default 700 px.
DRAW_JS = r"""
const box = element.querySelector('.live-plot');
let shown = null, pending = false;
const draw = () => {
  const value = props.value;
  if (!value || value === shown) return;
  if (!window.Plotly) { setTimeout(draw, 50); return; }
  if (!box.offsetWidth) { pending = true; return; }
  pending = false;
  shown = value;
  const fig = JSON.parse(value);
  fig.layout = fig.layout || {};
  fig.layout.autosize = true;
  window.Plotly.react(box, fig.data || [], fig.layout, {responsive: true});
};
new ResizeObserver(() => {
  if (!box.offsetWidth) return;
  if (pending) draw();
  else if (shown !== null && window.Plotly) window.Plotly.Plots.resize(box);
}).observe(box);
watch('value', draw);
draw();
"""


def plotly_js() -> Path:
    """plotly.min.js of the installed plotly package."""
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


def serve_plotly_js() -> str:
    """The ``<script>`` that loads plotly.min.js from the page's own static route
    (:mod:`app.server.file_routes`, which serves it from the plotly package): the URL names no
    server path."""
    from app.server.file_routes import STATIC_ROUTE

    return f"<script src='{STATIC_ROUTE}plotly.min.js'></script>"


def as_value(fig) -> str:
    """A figure (anything with ``to_json()``, or JSON text) as the panel's value."""
    if fig is None:
        return ""
    return fig if isinstance(fig, str) else fig.to_json()


def plot_panel(fig, elem_id: str, head: str, visible: bool = True, min_height: int = 330) -> gr.HTML:
    """The panel for one figure (``head``: :func:`serve_plotly_js`'s script tag; ``min_height``
    in CSS pixels, the figure's own height)."""
    return gr.HTML(as_value(fig), html_template=TEMPLATE, js_on_load=DRAW_JS, head=head, elem_id=elem_id,
                   visible=visible, container=True, padding=False, min_height=min_height)
