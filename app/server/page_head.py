"""A script at the top of the page's ``<head>``, before Gradio's own modules run.

Gradio 6.31's status tracker (the timer beside a running event) redraws at every animation
frame while its status is "pending", and stops only when its status changes. A tracker
unmounted while pending never hears that change, and its loop runs at 60 frames a second for
as long as the page is open. Every page has one: the app's "Loading..." tracker, unmounted as
the page appears; a component hidden by the event that updates it adds another. Each loop keeps
the browser producing frames: an idle Playground cost its browser 11-12% of a core with them
and 5% with them slowed to 4 a second (docs/performance.md, "A light page").

:data:`TRACKER_FRAMES_JS` slows every status tracker's loop to :data:`TRACKER_EVERY_MS`: the
tracker's module keeps the ``requestAnimationFrame`` it found when it loaded, so the wrapper has
to be in place before Gradio's modules load; :class:`PageHead` writes it into the page's HTML.
A visible tracker's timer shows tenths of a second; it now moves four times a second.
"""

from __future__ import annotations

TRACKER_EVERY_MS = 250
"""How often a status tracker's timer redraws (ms); Gradio's own loop redraws every frame."""

TRACKER_UNSEEN_MS = 1000
"""How often a status tracker's loop runs while no tracker on the page shows a timer (ms): the
loops of trackers unmounted while pending, which nobody sees. Each run costs the browser a frame
(its commit and composite, about 3 ms of CPU across Chromium's processes)."""

TRACKER_FRAMES_JS = """<script>(() => {
  const frame = window.requestAnimationFrame.bind(window);
  window.requestAnimationFrame = (callback) => {
    const stack = new Error().stack || '';
    const tracker = stack.includes('/statustracker'), motion = stack.includes('at Object.tick (');
    if (!tracker && !motion) return frame(callback);
    const shown = document.querySelector('.progress-text');
    if (shown && !tracker) return frame(callback);   // a loader on screen moves smoothly
    return setTimeout(() => frame(callback), shown ? __EVERY__ : __UNSEEN__);
  };
})();</script>""".replace("__EVERY__", str(TRACKER_EVERY_MS)).replace("__UNSEEN__", str(TRACKER_UNSEEN_MS))
"""The wrapper of ``window.requestAnimationFrame`` (a ``<script>`` element): a callback asked
for from Gradio's status tracker module runs at the first frame after :data:`TRACKER_EVERY_MS`
while a tracker on the page shows its timer (``.progress-text``), after
:data:`TRACKER_UNSEEN_MS` while none does. Svelte's motion loop (its ``raf.tick``: the springs
of a tracker's loader, which also run on for a tracker unmounted while pending, about 24 frames
a second on an idle page) runs every frame while a tracker shows, and after
:data:`TRACKER_UNSEEN_MS` while none does. Every other caller is untouched."""


class PageHead:
    """ASGI middleware: the page's HTML (``GET`` of ``/`` under the app's root) with ``html``
    inserted right after its ``<head>``.

    Args:
        app: the ASGI app it wraps.
        html: what to insert (default :data:`TRACKER_FRAMES_JS`).
    """

    def __init__(self, app, html: str = TRACKER_FRAMES_JS) -> None:
        self.app = app
        self.html = html.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET" or scope.get("path", "") not in ("/", ""):
            await self.app(scope, receive, send)
            return
        start: dict = {}
        body: list[bytes] = []

        async def held(message):
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            head, whole = self.inserted(start, b"".join(body))
            await send(head)
            await send({"type": "http.response.body", "body": whole})

        await self.app(scope, receive, held)

    def inserted(self, start: dict, body: bytes) -> tuple[dict, bytes]:
        """``(start message, body)`` of a response with the HTML inserted: an HTML body that is
        not compressed and has a ``<head>``; any other response is returned as it was."""
        headers = [(k, v) for k, v in start.get("headers", [])]
        kind = next((v for k, v in headers if k.lower() == b"content-type"), b"")
        encoded = any(k.lower() == b"content-encoding" for k, _ in headers)
        at = body.find(b"<head>")
        if b"text/html" in kind and not encoded and at >= 0:
            at += len(b"<head>")
            body = body[:at] + self.html + body[at:]
            headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
        return {**start, "headers": headers}, body
