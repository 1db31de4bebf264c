"""The continuous-batching section: the live block pool, block tables, recent steps and numbers.

Pure functions of plain data (``engine.block_snapshot()``, a
:class:`engine.protocol.BlockPoolSnapshot`; ``engine.recent_steps`` as dicts; ``engine.stats()``,
an :class:`engine.protocol.EngineStats`) and of ``mine``, the request ids of the viewer's own session, so every
student sees their own requests marked. No Gradio, no engine, no torch.
"""

from __future__ import annotations

import html
import json
import math
from typing import NamedTuple

from app.render.figures import DECODE, HEIGHT, PREFILL
from app.render.fmt import fmt_int, fmt_seconds
from app.render.plainfig import PlainFigure, add_hint, base_layout
from engine.protocol import BlockPoolSnapshot, EngineStats

OTHER_DECODE = "#A9CCE3"   # light blue: other users' decode
OTHER_PREFILL = "#F5B7A5"  # light orange: other users' prefill
MAX_CELLS = 1024           # a larger pool is drawn with several blocks per cell
POOL_CLASSES = ("free", "cached", "other", "mine")
POOL_LABELS = {"free": "empty", "cached": "cached prefix", "other": "other requests", "mine": "your request"}
POOL_TIPS = {"free": "free and holding nothing",
             "cached": "free, but still holding a prompt prefix that a new request with the same start reuses",
             "other": "held by another running request", "mine": "held by your running request"}


def plain_steps(steps) -> list[dict]:
    """``BatchInfo`` objects (or dicts) as plain dicts, oldest first."""
    out = []
    for s in steps or []:
        # a shallow copy: the engine never changes a step's record once made (asdict's deep
        # copy of 64 steps cost more than drawing them)
        d = s if isinstance(s, dict) else (vars(s) if hasattr(s, "__dict__") else s.to_dict())
        out.append({**d, "request_ids": [str(r) for r in d.get("request_ids") or []]})
    return out


def step_phases(steps: list[dict]) -> list[dict[str, str]]:
    """Which requests of each step were prefilling and which decoding.

    Steps from the engine carry ``phases`` (one per request) and those are used as they are.
    For steps with only totals (``prefill_tokens``, ``decode_tokens`` = decoding requests), the ``len(request_ids) - decode_tokens`` prefilling requests are picked: newcomers to the
    batch first, then requests that were prefilling in the previous step (chunked prefill), then
    the latest joined (the scheduler appends newcomers).
    """
    out, prev = [], {}
    for s in steps:
        ids = s["request_ids"]
        phases = s.get("phases") or []
        if len(phases) == len(ids) and ids:  # the engine recorded each request's phase
            prev = dict(zip(ids, phases))
            out.append(prev)
            continue
        n_pre = max(0, len(ids) - int(s.get("decode_tokens") or 0)) if s.get("prefill_tokens") else 0
        order = sorted(range(len(ids)), key=lambda i: (0 if ids[i] not in prev else
                                                       1 if prev[ids[i]] == "prefill" else 2, -i))
        pre = {ids[i] for i in order[:n_pre]}
        prev = {r: ("prefill" if r in pre else "decode") for r in ids}
        out.append(prev)
    return out


_STRIP_GROUPS = {(True, "prefill"): ("your request: prefill", PREFILL),
                 (True, "decode"): ("your request: decode", DECODE),
                 (False, "prefill"): ("other requests: prefill", OTHER_PREFILL),
                 (False, "decode"): ("other requests: decode", OTHER_DECODE)}


class StripPicture:
    """The recent-steps strip of one list of steps: the cells are laid out once, and
    :meth:`figure` only sorts them into "yours" and "others" for a viewer.

    Args:
        steps: plain step dicts (:func:`plain_steps`), oldest first.
        idle: whether the engine is idle now (said in the title).
    """

    def __init__(self, steps: list[dict], idle: bool = False) -> None:
        first_seen: dict[str, int] = {}
        for i, s in enumerate(steps):
            for r in s["request_ids"]:
                first_seen.setdefault(r, i)
        # one cell per (step, request): (request id, phase, x, base, hover text, hover text "you")
        self.cells: list[tuple[str, str, int, int, str, str]] = []
        for s, phases in zip(steps, step_phases(steps)):
            ids = sorted(s["request_ids"], key=lambda r: first_seen[r])
            summary = (f"step {s['step_id']}: {len(ids)} requests, {s.get('prefill_tokens', 0)} prefill + "
                       f"{s.get('decode_tokens', 0)} decode tokens, {s.get('waiting', 0)} waiting")
            for slot, r in enumerate(ids):
                name = html.escape(r)
                self.cells.append((r, phases[r], s["step_id"], slot, f"{name}: {phases[r]}<br>{summary}",
                                   f"{name} (you): {phases[r]}<br>{summary}"))
        self.request_ids = frozenset(first_seen)
        # two short lines: one long line was cut at the panel's right edge on a 1440 px window
        title = ("Recent engine steps" + (" (engine idle now)" if idle and steps else "")
                 + "<br><span style='font-size:12px'>who shared each forward pass</span>")
        self.top = max([len(s["request_ids"]) for s in steps] + [2])
        self.title = title
        self.empty = not steps
        self._figures: dict[frozenset, PlainFigure] = {}

    def figure(self, mine: set[str]) -> PlainFigure:
        """The strip as ``mine`` sees it (one figure per distinct set of own requests shown)."""
        key = self.request_ids.intersection(mine or ())
        fig = self._figures.get(key)
        if fig is None:
            fig = self._figures[key] = self._draw(key)
        return fig

    def _draw(self, mine: frozenset) -> PlainFigure:
        cells = {k: ([], [], []) for k in _STRIP_GROUPS}
        for r, phase, x, base, text, text_you in self.cells:
            you = r in mine
            xs, bases, texts = cells[(you, phase)]
            xs.append(x)
            bases.append(base)
            texts.append(text_you if you else text)
        traces = []
        for key, (name, color) in _STRIP_GROUPS.items():
            xs, bases, texts = cells[key]
            traces.append({
                "type": "bar", "name": name, "x": xs, "y": [1] * len(xs), "base": bases,
                "hovertext": texts, "width": 0.85,
                "marker": {"color": color, "line": {"color": "#1b1b1b" if key[0] else "white",
                                                    "width": 1.2 if key[0] else 0.5}},
                "hovertemplate": "%{hovertext}<extra></extra>"})
        # always show the key: Plotly hides a legend with a single non-empty trace, which is the
        # usual picture once a lone request's prefill has scrolled out of the strip
        layout = base_layout(self.title, "engine step (newest on the right)", "requests in the step", HEIGHT,
                             barmode="overlay", bargap=0.1, showlegend=True)
        layout["margin"]["t"] = 56
        layout["yaxis"]["range"] = [0, self.top + 0.2]
        if self.top <= 10:
            layout["yaxis"]["dtick"] = 1
        if self.empty:
            add_hint(layout, "Press Generate: each engine step adds a column")
        return PlainFigure(traces, layout)


def strip_figure(steps: list[dict], mine: set[str], idle: bool = False) -> PlainFigure:
    """Recent engine steps: one column per step, one cell per request in its forward pass.

    Cells stack in order of joining, so a column's height is the step's batch size; your
    requests are the dark cells, other users' the light ones; orange = prefill, blue = decode.

    Returns:
        A figure with four bar traces: ``your request: prefill``, ``your request: decode``,
        ``other requests: prefill``, ``other requests: decode`` (x = step id, base = slot).
    """
    return StripPicture(steps, idle).figure(mine)


def _owners(snapshot: BlockPoolSnapshot) -> dict[int, list[tuple[str, int]]]:
    """Physical block -> [(request id, logical index)] over the running requests."""
    owners: dict[int, list[tuple[str, int]]] = {}
    for t in snapshot.tables or []:
        for logical, block in enumerate(t.blocks or []):
            owners.setdefault(int(block), []).append((str(t.request_id), logical))
    return owners


_RANK = {c: i for i, c in enumerate(POOL_CLASSES)}


class PoolPicture:
    """The block pool of one snapshot, drawn once: every square's class and tooltip without a
    viewer, and which squares each running request holds. :meth:`html` marks one viewer's
    squares, so a page costs work in proportion to its own blocks, not to the pool.

    Args:
        snapshot: ``engine.block_snapshot()``.
        max_cells: most squares drawn (a larger pool puts several blocks in one square).
    """

    def __init__(self, snapshot: BlockPoolSnapshot, max_cells: int = MAX_CELLS) -> None:
        self.state = state = snapshot.state or []
        self.block_size = snapshot.block_size if snapshot.block_size is not None else "?"
        self.owners = owners = _owners(snapshot)
        # a pool of more than 4,096 blocks comes from the engine already in cells of several
        # blocks; ``per`` groups those cells again into at most ``max_cells`` squares
        self.cell_blocks = max(1, int(snapshot.blocks_per_cell or 1))
        self.num_blocks = int(snapshot.num_blocks or len(state) * self.cell_blocks)
        self.per = per = max(1, math.ceil(len(state) / max_cells))
        self.span = span = per * self.cell_blocks  # blocks per square
        self.base: list[str] = []  # each square's class for a viewer with no running request
        for start in range(0, len(state), per):
            best = "free"
            for b in range(start, min(start + per, len(state))):
                cls = "other" if state[b] == "used" else "cached" if state[b] == "cached" else "free"
                best = cls if _RANK[cls] > _RANK[best] else best
            self.base.append(best)
        self.squares: dict[str, set[int]] = {}  # request id -> squares holding one of its blocks
        for block, holders in owners.items():
            for r, _ in holders:
                self.squares.setdefault(r, set()).add(block // span)
        self.cells = [self._cell(i, cls, ()) for i, cls in enumerate(self.base)]
        self.counts = {c: self.base.count(c) for c in POOL_CLASSES} if span == 1 else None
        self._html: dict[frozenset, str] = {}

    def mine_squares(self, mine) -> set[int]:
        """The squares that hold a block of one of ``mine``'s requests."""
        out: set[int] = set()
        for r in mine or ():
            out |= self.squares.get(r, set())
        return out

    def classes(self, mine) -> list[str]:
        """Each square's class as ``mine`` sees it (``free``, ``cached``, ``other``, ``mine``)."""
        out = list(self.base)
        for i in self.mine_squares(mine):
            out[i] = "mine"
        return out

    def _cell(self, i: int, cls: str, mine) -> str:
        if self.span == 1:
            who = "; ".join(f"{r}{' (you)' if r in mine else ''}, logical block {lb}"
                            for r, lb in self.owners.get(i, ()))
            tip = f"block {i}: {POOL_LABELS[cls]}" + (f" — {who}" if who else "")
        else:  # the tooltip is written on hover (POOL_HOVER_JS): a frame carries classes only
            return f"<i class='bp-cell bp-{cls}'></i>"
        return f"<i class='bp-cell bp-{cls}' title='{html.escape(tip, quote=True)}'></i>"

    def html(self, mine) -> str:
        """The pool as a grid of squares, one per KV block, with a legend and per-block tooltips."""
        if not self.state:
            return "<div class='bp-empty'>No paged KV block pool in this engine.</div>"
        key = frozenset(r for r in (mine or ()) if r in self.squares)
        out = self._html.get(key)
        if out is None:
            out = self._html[key] = self._draw(key)
        return out

    def _draw(self, mine: frozenset) -> str:
        cells, counts = self.cells, self.counts
        own = self.mine_squares(mine)
        if own:
            cells = list(cells)
            counts = dict(counts) if counts else None
            for i in own:
                cells[i] = self._cell(i, "mine", mine)
                if counts:
                    counts[self.base[i]] -= 1
                    counts["mine"] += 1
        legend = "".join(f"<span title='{POOL_TIPS[c]}'><i class='bp-cell bp-{c}'></i>{POOL_LABELS[c]}"
                         f"{f' ({fmt_int(counts[c])})' if counts else ''}</span>" for c in POOL_CLASSES)
        scale = (f"each square is one block of {self.block_size} tokens' keys and values" if self.span == 1 else
                 f"each square is {self.span} blocks of {self.block_size} tokens: the pool is too large to draw block by block")
        return (f"<div class='bp'><div class='bp-title'>KV block pool: {fmt_int(self.num_blocks)} blocks "
                f"({scale})</div><div class='bp-legend'>{legend}</div>"
                f"<div class='bp-grid' data-span='{self.span}' data-n='{self.num_blocks}'>"
                f"{''.join(cells)}</div></div>")


POOL_HOVER_JS = """
element.addEventListener('mouseover', (e) => {
  const c = e.target, g = c.parentElement;
  if (!c.classList || !c.classList.contains('bp-cell') || c.title || !g || !g.dataset.span) return;
  const i = Array.prototype.indexOf.call(g.children, c), s = +g.dataset.span, n = +g.dataset.n;
  const kind = [...c.classList].find((k) => k !== 'bp-cell').slice(3);
  c.title = `blocks ${i * s}\u2013${Math.min(n, (i + 1) * s) - 1}: ${LABELS[kind]} (strongest)`;
});
""".replace("LABELS", json.dumps(POOL_LABELS))
"""The block pool's tooltips where a square stands for several blocks: written on hover from the
square's place in the grid (``data-span`` blocks a square, ``data-n`` blocks in all), so the
timer's 700-square frame carries no 700 titles."""


def pool_cells(snapshot: BlockPoolSnapshot, mine: set[str], max_cells: int = MAX_CELLS) -> tuple[list[str], int]:
    """Each cell's class (``free``, ``cached``, ``other``, ``mine``) and blocks per cell.

    A cell of several blocks takes the strongest class among them (mine > other > cached > free).
    """
    pic = PoolPicture(snapshot, max_cells)
    return pic.classes(mine), pic.per


def pool_html(snapshot: BlockPoolSnapshot, mine: set[str], max_cells: int = MAX_CELLS) -> str:
    """The block pool as a grid of squares, one per KV block, with a legend and per-block tooltips."""
    return PoolPicture(snapshot, max_cells).html(mine)


class TablesPicture:
    """The running requests' block tables of one snapshot: each row's chips are drawn once;
    :meth:`html` puts the viewer's rows first and marks them.

    Args:
        snapshot: ``engine.block_snapshot()``.
        max_rows: most rows shown; max_chips: most chips per row.
    """

    def __init__(self, snapshot: BlockPoolSnapshot, max_rows: int = 8, max_chips: int = 24) -> None:
        self.tables = list(snapshot.tables or [])
        self.size = int(snapshot.block_size or 16)
        self.max_rows, self.max_chips = max_rows, max_chips
        self.users: dict[int, int] = {}
        for t in self.tables:
            for b in t.blocks or []:
                self.users[int(b)] = self.users.get(int(b), 0) + 1
        self.ids = frozenset(str(t.request_id) for t in self.tables)
        self._chips: dict[str, str] = {}
        self._html: dict[frozenset, str] = {}

    def _row_chips(self, t: dict) -> str:
        rid = str(t.request_id)
        if rid not in self._chips:
            blocks, tokens, size = list(t.blocks or []), int(t.tokens or 0), self.size
            chips = []
            for lb, pb in enumerate(blocks[:self.max_chips]):
                filled = max(0, min(size, tokens - lb * size))
                shared = self.users.get(int(pb), 0) > 1
                tip = f"logical block {lb} → physical block {pb}: {filled}/{size} tokens" + (
                    " · shared with another request (same prefix)" if shared else "")
                cls = "bt-chip" + (" bt-partial" if filled < size else "") + (" bt-shared" if shared else "")
                chips.append(f"<span class='{cls}' title='{html.escape(tip, quote=True)}'>"
                             f"<sub>{lb}</sub>{pb}</span>")
            if len(blocks) > self.max_chips:
                chips.append(f"<span class='bt-more'>… +{len(blocks) - self.max_chips} blocks</span>")
            self._chips[rid] = "".join(chips)
        return self._chips[rid]

    def html(self, mine) -> str:
        """Each running request's block table: logical block → physical block, yours first and marked."""
        if not self.tables:
            return ("<div class='bt'><div class='bp-title'>Block tables</div>"
                    "<div class='bp-empty'>No request is running right now.</div></div>")
        key = self.ids.intersection(mine or ())
        out = self._html.get(key)
        if out is None:
            out = self._html[key] = self._draw(key)
        return out

    def _draw(self, mine: frozenset) -> str:
        tables = sorted(self.tables, key=lambda t: (str(t.request_id) not in mine, str(t.request_id)))
        rows = []
        for t in tables[:self.max_rows]:
            rid, n_blocks, tokens = str(t.request_id), len(t.blocks or []), int(t.tokens or 0)
            you = rid in mine
            who = "<b class='bt-you'>you</b>" if you else "<span class='bt-other'>other</span>"
            rows.append(f"<div class='bt-row{' bt-mine' if you else ''}'>{who}<span class='bt-id'>"
                        f"{html.escape(rid)} · {fmt_int(tokens)} tokens in {n_blocks} blocks</span>"
                        f"<span class='bt-chips'>{self._row_chips(t)}</span></div>")
        more = (f"<div class='bt-more'>… and {len(tables) - self.max_rows} more running requests</div>"
                if len(tables) > self.max_rows else "")
        return ("<div class='bt'><div class='bp-title'>Block tables of the running requests</div>"
                "<div class='bt-help'>Each chip maps one of the request's blocks to the pool: "
                "<span class='bt-chip'><sub>2</sub>417</span> = its logical block 2 is physical block 417. "
                "<span class='bt-chip bt-partial'>dashed</span> = partly filled; "
                "<span class='bt-chip bt-shared'>purple</span> = a prompt-prefix block shared with another "
                f"request (stored once).</div>{''.join(rows)}{more}</div>")


def tables_html(snapshot: BlockPoolSnapshot, mine: set[str], max_rows: int = 8, max_chips: int = 24) -> str:
    """Each running request's block table: logical block → physical block, yours first and marked."""
    return TablesPicture(snapshot, max_rows, max_chips).html(mine)


def kv_utilization(snapshot: BlockPoolSnapshot) -> float | None:
    """Token slots filled / token slots of the used blocks, from the snapshot's block tables.

    A prefix block shared by several requests counts once (summing each request's tokens would
    count it once per request and pass 100%). ``None`` when no block is in use.
    """
    size = int(snapshot.block_size or 16)
    filled: dict[int, int] = {}  # every block in use belongs to a running request's table
    for t in snapshot.tables or []:
        tokens = int(t.tokens or 0)
        for lb, pb in enumerate(t.blocks or []):
            filled[int(pb)] = max(filled.get(int(pb), 0), max(0, min(size, tokens - lb * size)))
    if not filled:
        return None
    return min(1.0, sum(filled.values()) / (len(filled) * size))


class Streaming(NamedTuple):
    """The server's streaming pages for the teacher: ``pages`` receiving an answer now, and the
    redraws each got per second over the frame budget's window (``fps``)."""

    pages: int
    fps: float


def stats_html(stats: EngineStats, steps: list[dict], queue_time_s: float | None = None,
               util: float | None = None, streaming: Streaming | None = None) -> str:
    """One line of numbers: running / waiting, blocks, KV utilization (``util``, else the last
    step's), preemptions, prefix hits (only when ``stats.prefix_hit_rate`` is set: a server whose
    sessions don't share the prefix cache leaves it ``None``), the streaming pages when
    ``streaming`` is given, and the viewer's queue time when known."""
    running = int(stats.running or 0)
    if util is None and steps and running:
        util = min(1.0, float(steps[-1].get("kv_utilization") or 0.0))
    free, cached = int(stats.blocks_free or 0), int(stats.blocks_cached or 0)
    items = [
        ("running", fmt_int(running), "requests in the batch now"),
        ("waiting", fmt_int(stats.waiting), "requests queued for a free slot or KV blocks"),
        ("blocks used", f"{fmt_int(stats.blocks_used or 0)} / {fmt_int(stats.blocks_total or 0)}",
         "KV blocks held by running requests / blocks the scheduler hands out (with the compiled "
         "decode step on, the pool keeps one block more aside: the padding rows of a batch "
         "bucket write there, so the total is one below the pool's)"),
        ("cached prefix", fmt_int(cached), "free blocks still holding a prompt prefix a new request can reuse"),
        ("empty", fmt_int(max(0, free - cached)), "free blocks holding nothing"),
        ("KV utilization", f"{util:.0%}" if util is not None else "–",
         "token slots filled / token slots of the used blocks: paging wastes at most one partly "
         "filled block per request"),
        ("preemptions", fmt_int(stats.preemptions),
         "requests evicted to free blocks and recomputed later"),
    ]
    if stats.prefix_hit_rate is not None:
        items.append(("prefix-cache hits", f"{float(stats.prefix_hit_rate):.0%}",
                      "prompt tokens found in cached blocks / prompt tokens looked up (every user's "
                      "requests: this server shares its prefix cache)"))
    if streaming is not None:
        items.append(("pages streaming", fmt_int(streaming.pages),
                      "pages of this server receiving an answer now"))
        items.append(("frames/s per page", f"{float(streaming.fps):.1f}",
                      "redraws each streaming page got over the last 5 s: the pages share one frame "
                      "budget, so a bigger class gets fewer frames, each with every token since the last"))
    if queue_time_s is not None:
        items.append(("your queue time", fmt_seconds(queue_time_s),
                      "how long your request waited before its first step"))
    pills = "".join(f"<span class='bs-pill' title='{html.escape(d, quote=True)}'><span class='bs-label'>{k}"
                    f"</span> <b>{v}</b></span>" for k, v, d in items)
    return f"<div class='bs'>{pills}</div>"


class BatchSection:
    """One refresh of the batching section, drawn once for every viewer: the pictures of the
    pool, the tables and the strip; :meth:`frame` marks one viewer's requests.

    Args:
        stats: ``engine.stats()``; snapshot: ``engine.block_snapshot()``;
        steps: ``engine.recent_steps`` (``BatchInfo`` objects or dicts), oldest first;
        streaming: the server's streaming pages, shown to the teacher (``None``: not shown).
    """

    def __init__(self, stats: EngineStats, snapshot: BlockPoolSnapshot, steps,
                 streaming: Streaming | None = None) -> None:
        self.stats, self.streaming = stats, streaming
        self.steps = plain_steps(steps)
        self.batching = bool(stats.batching)
        if self.batching:
            self.pool = PoolPicture(snapshot)
            self.tables = TablesPicture(snapshot)
            self.strip = StripPicture(self.steps, idle=not stats.running and not stats.waiting)
            self.util = kv_utilization(snapshot) if stats.running else None
            self.stats_line = stats_html(stats, self.steps, None, self.util, streaming)
        else:
            note = stats.batching_note or "This engine serves one request at a time (no continuous batching)."
            self.note = f"<div class='status status-warn'>{html.escape(note)}</div>"
            self.strip = StripPicture([])
        last = self.steps[-1].get("step_id") if self.steps else None
        self.key = (last, stats.running, stats.waiting, stats.blocks_used, stats.blocks_cached)

    def frame(self, mine, queue_time_s: float | None = None) -> dict:
        """The section's four outputs for a viewer whose own request ids are ``mine``."""
        mine = mine or ()
        if not self.batching:
            return {"batch_stats": self.note, "pool": "", "tables": "", "strip": self.strip.figure(set())}
        line = self.stats_line if queue_time_s is None else stats_html(self.stats, self.steps, queue_time_s, self.util,
                                                                     self.streaming)
        return {"batch_stats": line, "pool": self.pool.html(mine), "tables": self.tables.html(mine),
                "strip": self.strip.figure(mine)}

    def signature(self, mine) -> tuple:
        """What a viewer's section shows, cheaply: unchanged signature = nothing to redraw."""
        return self.key + (tuple(sorted(mine or ())),)


def batch_frame(stats: EngineStats, snapshot: BlockPoolSnapshot, steps, mine: set[str],
                queue_time_s: float | None = None) -> dict:
    """The section's four outputs: ``batch_stats`` and ``pool`` / ``tables`` HTML, ``strip`` figure.

    Without continuous batching (``stats.batching`` false) the numbers give way to the
    engine's ``batching_note`` and the picture stays empty.
    """
    return BatchSection(stats, snapshot, steps).frame(set(mine or ()), queue_time_s)


def signature(stats: EngineStats, steps, mine: set[str]) -> tuple:
    """What the section shows, cheaply: unchanged signature = nothing to redraw."""
    last = steps[-1] if steps else None
    sid = (last.get("step_id") if isinstance(last, dict) else getattr(last, "step_id", None)) if last else None
    return (sid, stats.running, stats.waiting, stats.blocks_used, stats.blocks_cached,
            tuple(sorted(mine)))
