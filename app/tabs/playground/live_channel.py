"""The live channel: one streamed value that carries every live panel's changes.

A Gradio stream with one output per panel costs the browser a component update for each output
of each frame (state copy, loading status, re-render), and each panel's whole value: the stat
cards' HTML, every figure's JSON. The Playground instead streams one hidden ``gr.HTML`` whose
value is an append-only log (:class:`app.render.live_ops.LiveLog`): a first line naming the
run, then one numbered JSON line per frame with each changed panel's *op*
(:mod:`app.render.live_ops`), started over in a new part (same first line) when it reaches a
bound. Gradio's streaming diff sends only the new line; the channel's script parses it and hands each
op to its panel through a small registry on ``window`` (:data:`REGISTRY_JS`). Each panel is its
own ``gr.HTML`` with a script that applies ops in place: chips appended, cards patched where
they changed, plot points appended and drawn at most once per animation frame, and only while
the plot is on screen.

A panel's own Gradio value still draws it whole (the page's first load, the timer's refreshes);
both paths end in the same drawing code.
"""

from __future__ import annotations

import gradio as gr

from app.render.live_js import REGISTRY_JS

CHANNEL_JS = REGISTRY_JS + r"""
const CH = '__CHANNEL__';
let drawn = '', run = null, seen = -1;
const feed = () => {
  const v = props.value || '';
  if (drawn.startsWith(v)) return;   // the same log, or its first line alone (a run's end)
  let rest;
  if (drawn && v.startsWith(drawn)) rest = v.slice(drawn.length);
  else {   // a new run (or Clear) starts over; a new part of this run's log goes on
    const id = v.slice(0, v.indexOf('\n') + 1);
    if (id !== run) { live.reset(CH); run = id; seen = -1; }
    rest = v;
  }
  drawn = v;
  for (const line of rest.split('\n')) {
    if (line.charCodeAt(0) !== 123) continue;
    const ops = JSON.parse(line);
    if (ops._n !== undefined) { if (ops._n <= seen) continue; seen = ops._n; delete ops._n; }
    live.push(CH, ops);
  }
};
watch('value', feed);
feed();
"""

MORPH_JS = r"""
// patch node a into b where they differ, keeping what is equal (depth: levels to descend)
const sameShell = (a, b) => a.nodeType === 1 && b.nodeType === 1 && a.tagName === b.tagName &&
  a.childNodes.length === b.childNodes.length && a.attributes.length === b.attributes.length &&
  [...b.attributes].every((x) => a.getAttribute(x.name) === x.value);
const morph = (a, b, depth) => {
  if (a.isEqualNode(b)) return;
  if (depth > 0 && sameShell(a, b)) {
    const ak = [...a.childNodes], bk = [...b.childNodes];
    for (let i = 0; i < ak.length; i++) morph(ak[i], bk[i], depth - 1);
  } else a.replaceWith(b);
};
const patch = (box, html) => {
  const t = document.createElement('template');
  t.innerHTML = html;
  const ak = [...box.childNodes], bk = [...t.content.childNodes];
  if (ak.length !== bk.length) { box.replaceChildren(t.content); return; }
  for (let i = 0; i < ak.length; i++) morph(ak[i], bk[i], 4);
};
"""

HTML_PANEL_JS = REGISTRY_JS + MORPH_JS + r"""
const box = element.querySelector('.live-html');
let html = null;
const show = (h) => { h = h || ''; if (h !== html) { html = h; patch(box, h); } };
watch('value', () => show(props.value));
show(props.value);
if ('__NAME__') live.register('__NAME__', (op) => {
  if (op.set !== undefined) show(op.set);
  else if (op.app !== undefined) show((html || '') + op.app);
});
"""

HTML_TEMPLATE = "<div class='live-html'></div>"


def channel(elem_id: str, name: str) -> gr.HTML:
    """The hidden component whose streamed value is a run's log (``name``: the channel's name,
    unique on the page)."""
    return gr.HTML("", html_template="<div class='live-channel'></div>",
                   js_on_load=CHANNEL_JS.replace("__CHANNEL__", name), elem_id=elem_id,
                   elem_classes=["live-channel-block"], container=False, padding=False)


def html_panel(value: str, elem_id: str, name: str, **kwargs) -> gr.HTML:
    """An HTML panel drawn from its value and from the channel's ops for ``name`` (``set`` or
    ``app``), patched in place where it changed (a stat card's number, not the whole grid)."""
    return gr.HTML(value, html_template=HTML_TEMPLATE, js_on_load=HTML_PANEL_JS.replace("__NAME__", name),
                   elem_id=elem_id, **kwargs)
