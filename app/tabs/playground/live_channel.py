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

import json

import gradio as gr

from app.render.live_js import REGISTRY_JS

CHANNEL_JS = REGISTRY_JS + r"""
const CH = '__CHANNEL__', BOXES = __BOXES__;
let drawn = '', run = null, seen = -1, waiting = {}, gapTimer = 0, reader = null;
const opened = new Set();   // feeds read already (a replayed first frame names its feed again)
// frames are applied in the order of their numbers, whichever way they came (the log's value
// or the run's feed); a frame whose predecessor has not come waits for it up to a second
const apply = (ops) => {
  seen = ops._n; delete ops._n;
  if (ops._feed) { if (!opened.has(ops._feed)) { opened.add(ops._feed); read(ops._feed, run); } delete ops._feed; }
  live.push(CH, ops);
};
const drain = () => { while (waiting[seen + 1]) { const f = waiting[seen + 1]; delete waiting[seen + 1]; apply(f); } };
const take = (ops) => {
  if (ops._n === undefined) { live.push(CH, ops); return; }
  if (ops._n <= seen) return;
  if (ops._n > seen + 1) {
    waiting[ops._n] = ops;
    if (!gapTimer) gapTimer = setTimeout(() => {   // never came: go on without it
      gapTimer = 0;
      const n = Math.min(...Object.keys(waiting).map(Number));
      if (n !== Infinity) { seen = n - 1; drain(); }
    }, 1000);
    return;
  }
  apply(ops); drain();
};
// the run's frames over the page's own route (app.state.live_feeds): one JSON line each
const read = async (path, id) => {
  if (reader) reader.abort();
  const ctl = reader = new AbortController();
  try {
    const r = await fetch(path, {signal: ctl.signal, cache: 'no-store'});
    if (!r.ok || !r.body) return;
    const body = r.body.getReader(), dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const {value, done} = await body.read();
      if (done || run !== id) break;
      buf += dec.decode(value, {stream: true});
      const end = buf.lastIndexOf('\n');
      if (end < 0) continue;
      for (const line of buf.slice(0, end).split('\n')) if (line.charCodeAt(0) === 123) take(JSON.parse(line));
      buf = buf.slice(end + 1);
    }
  } catch (e) {   // aborted, or the connection broke: the run's frames come by the log again
  } finally { if (reader === ctl) reader = null; }
};
const feed = () => {
  const v = props.value || '';
  if (drawn.startsWith(v)) return;   // the same log, or its first line alone (a run's end)
  let rest;
  if (drawn && v.startsWith(drawn)) rest = v.slice(drawn.length);
  else {   // a new run (or Clear) starts over; a new part of this run's log goes on
    const id = v.slice(0, v.indexOf('\n') + 1);
    if (id !== run) {
      live.reset(CH); run = id; seen = -1; waiting = {};
      if (reader) reader.abort();
    }
    rest = v;
  }
  drawn = v;
  for (const line of rest.split('\n')) if (line.charCodeAt(0) === 123) take(JSON.parse(line));
};
// text boxes (gr.Textbox) whose text the ops draw: set in place, following its end. An append
// says the length it extends ("at"): after a missed frame (Clear during a run, a part of the log
// not seen) the box appends nothing more, and the run's last Gradio value sets the whole text
for (const [name, id] of Object.entries(BOXES)) {
  let text = '', area = null, follow = null;
  live.register(name, (op) => {
    if (op.set !== undefined) text = op.set;
    else if (op.app !== undefined && (op.at === undefined || op.at === text.length)) text += op.app;
    else return;
    if (!area || !area.isConnected) {
      area = document.querySelector('#' + id + ' textarea');
      follow = area && live.follower(area);
    }
    if (!area) return;
    if (op.set !== undefined) follow.restart();   // a new answer is followed from its start
    follow(() => { area.value = text; });
  });
}
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


def channel(elem_id: str, name: str, boxes: dict[str, str] | None = None) -> gr.HTML:
    """The hidden component whose streamed value is a run's log (``name``: the channel's name,
    unique on the page); it reads the run's feed when the log names one.

    Args:
        boxes: op name -> ``elem_id`` of a ``gr.Textbox`` whose text the channel's ops draw in
            place (``set``/``app``), scrolled to its end unless the reader scrolled up.
    """
    js = CHANNEL_JS.replace("__CHANNEL__", name).replace("__BOXES__", json.dumps(boxes or {}))
    return gr.HTML("", html_template="<div class='live-channel'></div>", js_on_load=js, elem_id=elem_id,
                   elem_classes=["live-channel-block"], container=False, padding=False)


def html_panel(value: str, elem_id: str, name: str, js: str = "", **kwargs) -> gr.HTML:
    """An HTML panel drawn from its value and from the channel's ops for ``name`` (``set`` or
    ``app``), patched in place where it changed (a stat card's number, not the whole grid);
    ``js``: more of the component's script, run after the panel's (``element`` is the block)."""
    return gr.HTML(value, html_template=HTML_TEMPLATE,
                   js_on_load=HTML_PANEL_JS.replace("__NAME__", name) + js, elem_id=elem_id, **kwargs)
