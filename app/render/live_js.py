"""The page-wide registry that the live channel and its panels share (JavaScript, no Gradio).

Every panel script that takes the live channel's ops (:mod:`app.tabs.playground.live_channel`)
starts with :data:`REGISTRY_JS`: whichever component loads first defines
``window.playgroundLive``, the others find it. ``register(name, fn)`` names a panel's op handler
(and replays to it the frames of a run already streaming); the channel calls ``reset`` when a
new run's log starts and ``push`` for each frame, which hands every op to its panel.
"""

from __future__ import annotations

REGISTRY_JS = r"""
const live = window.playgroundLive || (window.playgroundLive = {
  panels: {}, frames: {}, templates: {},
  // a panel's op handler; the frames of runs already streaming are replayed to it
  register(name, fn) {
    this.panels[name] = fn;
    for (const frames of Object.values(this.frames))
      for (const f of frames) if (f[name] !== undefined) fn(f[name]);
  },
  reset(ch) { this.frames[ch] = []; },
  push(ch, frame) {
    (this.frames[ch] = this.frames[ch] || []).push(frame);
    if (frame._tpl) Object.assign(this.templates, frame._tpl);
    for (const name in frame) { const fn = this.panels[name]; if (fn) fn(frame[name]); }
  },
});
"""
"""Defines ``window.playgroundLive`` once per page, whichever component loads first."""
