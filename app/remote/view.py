"""What the page shows for a remote engine where the built-in engine's panels have data the
server does not send: the badge, the KV line and plot (the server's KV usage from its
``/metrics``), and one line for each panel left without data, saying why."""

from __future__ import annotations

import html
import time

from app.render.plainfig import PlainFigure, add_hint, base_layout

CLIENT_SIDE = ("TTFT, per-token latency and tokens/s are measured on this client from the "
               "stream (network and the server's queue included)")
NO_MEMORY = "No memory breakdown from a remote server"
NO_TRACE = "No trace download: the server's steps are not visible to this page"
LESSONS = ("The Lessons run experiments inside the built-in engine (python -m app without "
           "--backend); this page drives a remote server.")
HEIGHT = 330


class RemoteView:
    """Draws the remote engine's parts of the page from a :class:`RemoteEngine`'s poller."""

    def __init__(self, engine) -> None:
        self.engine = engine

    # ---- lines -----------------------------------------------------------------------------
    def _metrics(self):
        p = self.engine.poller
        return (p.latest, None) if p.reason is None else ({}, p.reason)

    def badge_html(self) -> str:
        """The badge: the remote engine, its address and model, and that timings are the
        client's."""
        info = self.engine.info
        return ("<div class='model-badge'>"
                f"<div class='model-name'>{html.escape(info.name)}</div>"
                f"<div>served by <b>{html.escape(info.served_by)}</b> at "
                f"<code>{html.escape(info.base_url)}</code> (remote engine)</div>"
                f"<div>context {info.context_len:,} tokens</div>"
                f"<div class='remote-note'>{html.escape(CLIENT_SIDE)}.</div></div>")

    def kv_html(self) -> str:
        """The KV line: the server's KV cache usage, running and waiting requests and prefix
        hit rate from its ``/metrics``, or why there are none."""
        m, reason = self._metrics()
        if reason is not None:
            return (f"<div class='kv-formula' id='remote-kv'>No KV cache figures from "
                    f"{html.escape(self.engine.info.served_by)}: {html.escape(reason)}.</div>")
        parts = []
        if "kv_usage" in m:
            parts.append(f"<b>{100 * m['kv_usage']:.1f}%</b> of its KV cache in use")
        if "running" in m or "waiting" in m:
            parts.append(f"{int(m.get('running', 0))} running, {int(m.get('waiting', 0))} waiting")
        if m.get("prefix_queries"):
            parts.append(f"prefix-cache hit rate {m.get('prefix_hits', 0) / m['prefix_queries']:.0%}")
        return ("<div class='kv-formula' id='remote-kv'>Remote engine (from its /metrics, every "
                f"user's requests): {' · '.join(parts) or 'no KV figures'}. The per-request KV "
                "bytes of the built-in engine are not sent by a remote server.</div>")

    def batching_note(self) -> str:
        """The batching section's one line: what the server's metrics say, or why nothing."""
        m, reason = self._metrics()
        name = self.engine.info.served_by
        if reason is not None:
            return f"{name}'s block pool and steps are not visible here: {reason}."
        hit = (f", prefix-cache hit rate {m.get('prefix_hits', 0) / m['prefix_queries']:.0%}"
               if m.get("prefix_queries") else "")
        return (f"{name}'s block pool and steps are not visible to this page; its /metrics says: "
                f"KV cache {100 * m.get('kv_usage', 0.0):.1f}% used, {int(m.get('running', 0))} "
                f"running, {int(m.get('waiting', 0))} waiting{hit}.")

    # ---- figures -----------------------------------------------------------------------------
    def kv_figure(self) -> PlainFigure:
        """The server's KV cache usage (% of its blocks) over the last two minutes."""
        _, reason = self._metrics()
        hist = [(t, f) for t, f in self.engine.poller.history if "kv_usage" in f]
        now = time.time()
        x = [round(t - now, 1) for t, _ in hist]
        y = [100 * f["kv_usage"] for _, f in hist]
        traces = [{"type": "scatter", "name": "KV cache in use", "x": x, "y": y, "mode": "lines+markers",
                   "hovertemplate": "%{x:.0f} s: %{y:.1f}% of blocks<extra></extra>",
                   "line": {"color": "#2563eb"}}]
        last = f": {y[-1]:.1f}% now" if y else ""
        layout = base_layout(f"Remote KV cache usage{last}", "seconds ago", "% of KV blocks", HEIGHT)
        layout["yaxis"].update(rangemode="tozero")
        if reason is not None:
            add_hint(layout, f"No KV figures: {reason}")
        elif not y:
            add_hint(layout, "This server's /metrics has no KV cache usage")
        return PlainFigure(traces, layout)

    def memory_figure(self) -> PlainFigure:
        """An empty memory panel saying why."""
        layout = base_layout("Memory breakdown", "", "", HEIGHT)
        add_hint(layout, NO_MEMORY)
        return PlainFigure([], layout)
