"""The Remedies lesson's links to the figures that show each remedy, and the page script that
follows them: a lesson's tab is not in the page until it is opened (Gradio draws a tab's
contents when it is selected), so a plain ``#id`` link cannot reach a figure on another lesson
tab. Each link's target id is registered with its tab's title; the script opens that tab, waits
for the figure and scrolls it into view.

No torch, no Gradio.
"""

from __future__ import annotations

import json

TARGETS: dict[str, str] = {}
"""``elem_id`` of each linked figure → the title of the lesson tab that holds it."""


def figure_link(tab: str, elem_id: str, figure: str, prefix: str = "Lessons › ") -> str:
    """Markdown ``[Lessons › **tab**: “figure”](#elem_id)``, registered in :data:`TARGETS`.

    Args:
        tab: the lesson tab's title (as on the tab bar).
        elem_id: the figure's ``elem_id`` on that tab.
        figure: the figure's name as the figure itself prints it (its title, a panel's title, a
            trace's or a table row's name), so a student finds it there.
        prefix: what comes before the tab's title (``""`` for this view's own figures).

    Raises:
        ValueError: ``elem_id`` already registered for another tab.
    """
    if TARGETS.setdefault(elem_id, tab) != tab:
        raise ValueError(f"{elem_id} is on the {TARGETS[elem_id]} tab, not {tab}")
    return f"[{prefix}**{tab}**: “{figure}”](#{elem_id})"


FOLLOW_JS = """
() => {
  if (window.__lessonLinks) return;
  window.__lessonLinks = true;
  const TABS = %s;
  // a link's figure is followed until the reader does something else: a later link, the wheel, a
  // touch, a key or a press of the mouse ends it (following on would pull the page back under
  // the reader's pointer while the figures above it still draw)
  let following = 0;
  const stop = () => { following++; };
  for (const type of ['wheel', 'touchstart', 'keydown', 'mousedown'])
    window.addEventListener(type, stop, {capture: true, passive: true});
  document.addEventListener('click', (ev) => {
    const a = ev.target.closest && ev.target.closest('a[href^="#lesson-"]');
    if (!a) return;
    const id = a.getAttribute('href').slice(1);
    if (!(id in TABS)) return;
    ev.preventDefault();
    const tab = [...document.querySelectorAll('button[role=tab]')]
      .find(b => b.textContent.trim() === TABS[id]);
    if (tab && tab.getAttribute('aria-selected') !== 'true') tab.click();
    const mine = ++following, t0 = Date.now();
    // where the figure sits in the page (not in the window: scrolling does not move it there)
    const place = (el) => el.getBoundingClientRect().top - document.body.getBoundingClientRect().top;
    let settled = 0, last = null;
    const go = () => {
      if (mine !== following) return;
      const el = document.getElementById(id);
      if (el && el.offsetParent !== null) {
        // the figures above it may still be drawing and push it down: scroll again until its
        // place has held for half a second (a figure near the page's end never reaches the top)
        const now = place(el);
        if (last !== null && Math.abs(now - last) < 2) {
          if (++settled >= 5) return;
        } else {
          settled = 0;
          el.scrollIntoView({block: 'start'});
          last = place(el);
        }
      }
      if (Date.now() - t0 < 10000) setTimeout(go, 100);
    };
    go();
  }, true);
}
"""


def follow_js() -> str:
    """The page script (a Gradio ``js`` load hook) that follows the links of :data:`TARGETS`:
    opens the target's lesson tab, waits up to 10 s for the figure to be drawn, and scrolls it
    to the top of the window, again while the figures above it still move it in the page, until
    the reader scrolls, presses a key or the mouse, or follows another link. Installs its
    listener once per page."""
    return FOLLOW_JS % json.dumps(TARGETS)
