"""The page-wide registry that the live channel and its panels share (JavaScript, no Gradio).

Every panel script that takes the live channel's ops (:mod:`app.tabs.playground.live_channel`)
starts with :data:`REGISTRY_JS`: whichever component loads first defines
``window.playgroundLive``, the others find it. ``register(name, fn)`` names a panel's op handler
(and replays to it the frames of a run already streaming); the channel calls ``reset`` when a
new run's log starts and ``push`` for each frame, which hands every op to its panel.
``follower(el, hold)`` keeps a growing box (the token chips, a text box the channel fills)
scrolled to its end while the reader leaves it there.
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
  // follow(grow): run grow() (it adds to el), then scroll el to its end once per animation
  // frame, unless the reader has scrolled it up or hold() says wait. Whether el sits at its end
  // is read when it scrolls, not before each change (that forced a layout of the page per frame);
  // el's scroll event for its own scrolling comes a frame later, when more content may have
  // moved the end: that one is not the reader's
  follower(el, hold) {
    let atEnd = true, pinned = false, own = -1;
    el.addEventListener('scroll', () => {
      if (el.scrollTop === own) { own = -1; return; }
      atEnd = el.scrollTop + el.clientHeight >= el.scrollHeight - 24;
    }, {passive: true});
    const follow = (grow) => {
      grow();
      if (pinned || !atEnd) return;
      pinned = true;
      requestAnimationFrame(() => {
        pinned = false;
        if (!atEnd || (hold && hold())) return;
        const before = el.scrollTop;
        el.scrollTop = el.scrollHeight;
        if (el.scrollTop !== before) own = el.scrollTop;
      });
    };
    follow.restart = () => { atEnd = true; };   // new content is followed from its start
    return follow;
  },
});
"""
"""Defines ``window.playgroundLive`` once per page, whichever component loads first."""
