"""A live Plotly panel that redraws in place: ``gr.HTML`` holding the figure's JSON, drawn with
``Plotly.react`` into one persistent ``<div>``; while an answer streams, the live channel's ops
append points to it instead (:mod:`app.tabs.playground.live_channel`).

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

from app.render.live_js import REGISTRY_JS

TEMPLATE = "<div class='live-plot'></div>"
# Draws the figure: from props.value (the figure's JSON, with its template) when the value
# changes, and from the live channel's ops (app.render.live_ops: a new figure, points appended to
# its traces, layout keys) while an answer streams. Drawing waits for plotly.js, happens at most
# once per animation frame whatever arrived since, and only while the panel is on screen: a
# panel below the fold or in another tab is drawn when it shows. A panel whose width changes
# (window, sidebar) is resized. Same settings as gr.Plot: responsive, autosize.
DRAW_JS = REGISTRY_JS + r"""
const box = element.querySelector('.live-plot');
let fig = null, rev = 0, dirty = false, queued = false, onScreen = true;
const draw = () => {
  queued = false;
  if (!fig || !dirty) return;
  if (!window.Plotly) { queued = true; setTimeout(draw, 50); return; }
  if (!box.offsetWidth || !onScreen) return;   // drawn when it shows
  dirty = false;
  const layout = Object.assign({}, fig.layout, {autosize: true, datarevision: ++rev});
  if (typeof fig.template === 'string') layout.template = live.templates[fig.template];
  window.Plotly.react(box, fig.data || [], layout, {responsive: true});
};
const later = () => { dirty = true; if (!queued) { queued = true; requestAnimationFrame(draw); } };
const fromValue = () => {
  const value = props.value;
  if (!value) return;
  fig = JSON.parse(value);
  fig.layout = fig.layout || {};
  later();
};
const apply = (op) => {
  if (op.fig) fig = {data: op.fig.data, layout: op.fig.layout || {}, template: op.fig.template};
  if (!fig) return;
  if (op.lay) Object.assign(fig.layout, op.lay);
  if (op.tr) for (const i in op.tr) fig.data[+i] = op.tr[i];
  if (op.ext) for (const i in op.ext) {
    const t = fig.data[+i], cols = op.ext[i];
    for (const k in cols) { if (!Array.isArray(t[k])) t[k] = []; for (const v of cols[k]) t[k].push(v); }
  }
  later();
};
new ResizeObserver(() => {
  if (!box.offsetWidth) return;
  if (dirty) later();
  else if (rev && window.Plotly) window.Plotly.Plots.resize(box);
}).observe(box);
new IntersectionObserver((entries) => {
  onScreen = entries[entries.length - 1].isIntersecting;
  if (onScreen && dirty) later();
}).observe(box);
watch('value', fromValue);
fromValue();
if ('__NAME__') live.register('__NAME__', apply);
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


def plot_panel(fig, elem_id: str, head: str, visible: bool = True, min_height: int = 330,
               live_name: str = "") -> gr.HTML:
    """The panel for one figure (``head``: :func:`serve_plotly_js`'s script tag; ``min_height``
    in CSS pixels, the figure's own height; ``live_name``: the name its ops carry on the live
    channel, :mod:`app.tabs.playground.live_channel`, or empty for a panel drawn from its value
    only)."""
    return gr.HTML(as_value(fig), html_template=TEMPLATE, js_on_load=DRAW_JS.replace("__NAME__", live_name),
                   head=head, elem_id=elem_id,
                   visible=visible, container=True, padding=False, min_height=min_height)
