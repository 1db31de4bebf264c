"""The continuous-batching section: the live block pool, block tables, recent steps and numbers.

Pure functions of plain data (``engine.block_snapshot()``, ``engine.recent_steps`` as dicts,
``engine.stats()``) and of ``mine``, the request ids of the viewer's own session, so every
student sees their own requests marked. No Gradio, no engine, no torch.
"""

from __future__ import annotations

import html
import math

from .figures import DECODE, HEIGHT, PREFILL
from .fmt import fmt_int, fmt_seconds
from .plainfig import PlainFigure, add_hint, base_layout

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
        d = s if isinstance(s, dict) else (s.to_dict() if hasattr(s, "to_dict") else dict(vars(s)))
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


def strip_figure(steps: list[dict], mine: set[str], idle: bool = False) -> PlainFigure:
    """Recent engine steps: one column per step, one cell per request in its forward pass.

    Cells stack in order of joining, so a column's height is the step's batch size; your
    requests are the dark cells, other users' the light ones; orange = prefill, blue = decode.

    Returns:
        A figure with four bar traces: ``your request: prefill``, ``your request: decode``,
        ``other requests: prefill``, ``other requests: decode`` (x = step id, base = slot).
    """
    groups = {(True, "prefill"): ("your request: prefill", PREFILL),
              (True, "decode"): ("your request: decode", DECODE),
              (False, "prefill"): ("other requests: prefill", OTHER_PREFILL),
              (False, "decode"): ("other requests: decode", OTHER_DECODE)}
    cells = {k: {"x": [], "base": [], "text": []} for k in groups}
    first_seen: dict[str, int] = {}
    for i, s in enumerate(steps):
        for r in s["request_ids"]:
            first_seen.setdefault(r, i)
    for s, phases in zip(steps, step_phases(steps)):
        ids = sorted(s["request_ids"], key=lambda r: first_seen[r])
        summary = (f"step {s['step_id']}: {len(ids)} requests, {s.get('prefill_tokens', 0)} prefill + "
                   f"{s.get('decode_tokens', 0)} decode tokens, {s.get('waiting', 0)} waiting")
        for slot, r in enumerate(ids):
            you = r in mine
            c = cells[(you, phases[r])]
            c["x"].append(s["step_id"])
            c["base"].append(slot)
            c["text"].append(f"{html.escape(r)}{' (you)' if you else ''}: {phases[r]}<br>{summary}")
    traces = []
    for key, (name, color) in groups.items():
        c = cells[key]
        traces.append({
            "type": "bar", "name": name, "x": c["x"], "y": [1] * len(c["x"]), "base": c["base"],
            "hovertext": c["text"], "width": 0.85,
            "marker": {"color": color, "line": {"color": "#1b1b1b" if key[0] else "white",
                                                "width": 1.2 if key[0] else 0.5}},
            "hovertemplate": "%{hovertext}<extra></extra>"})
    title = "Recent engine steps: who shared each forward pass" + (" (engine idle now)" if idle and steps else "")
    # always show the key: Plotly hides a legend with a single non-empty trace, which is the
    # usual picture once a lone request's prefill has scrolled out of the strip
    layout = base_layout(title, "engine step (newest on the right)", "requests in the step", HEIGHT,
                         barmode="overlay", bargap=0.1, showlegend=True)
    top = max([len(s["request_ids"]) for s in steps] + [2])
    layout["yaxis"]["range"] = [0, top + 0.2]
    if top <= 10:
        layout["yaxis"]["dtick"] = 1
    if not steps:
        add_hint(layout, "Press Generate: each engine step adds a column")
    return PlainFigure(traces, layout)


def _owners(snapshot: dict, mine: set[str]) -> dict[int, list[tuple[str, int]]]:
    """Physical block -> [(request id, logical index)] over the running requests."""
    owners: dict[int, list[tuple[str, int]]] = {}
    for t in snapshot.get("tables") or []:
        for logical, block in enumerate(t.get("blocks") or []):
            owners.setdefault(int(block), []).append((str(t["request_id"]), logical))
    return owners


def pool_cells(snapshot: dict, mine: set[str], max_cells: int = MAX_CELLS) -> tuple[list[str], int]:
    """Each cell's class (``free``, ``cached``, ``other``, ``mine``) and blocks per cell.

    A cell of several blocks takes the strongest class among them (mine > other > cached > free).
    """
    state = snapshot.get("state") or []
    owners = _owners(snapshot, mine)
    per = max(1, math.ceil(len(state) / max_cells))
    rank = {c: i for i, c in enumerate(POOL_CLASSES)}
    cells = []
    for start in range(0, len(state), per):
        best = "free"
        for b in range(start, min(start + per, len(state))):
            if any(r in mine for r, _ in owners.get(b, ())):
                cls = "mine"
            elif state[b] == "used":
                cls = "other"
            else:
                cls = "cached" if state[b] == "cached" else "free"
            best = cls if rank[cls] > rank[best] else best
        cells.append(best)
    return cells, per


def pool_html(snapshot: dict, mine: set[str], max_cells: int = MAX_CELLS) -> str:
    """The block pool as a grid of squares, one per KV block, with a legend and per-block tooltips."""
    state = snapshot.get("state") or []
    if not state:
        return "<div class='bp-empty'>No paged KV block pool in this engine.</div>"
    cells, per = pool_cells(snapshot, mine, max_cells)
    owners = _owners(snapshot, mine)
    counts = {c: cells.count(c) for c in POOL_CLASSES} if per == 1 else None
    out = []
    for i, cls in enumerate(cells):
        if per == 1:
            who = "; ".join(f"{r}{' (you)' if r in mine else ''}, logical block {lb}" for r, lb in owners.get(i, ()))
            tip = f"block {i}: {POOL_LABELS[cls]}" + (f" — {who}" if who else "")
        else:
            tip = f"blocks {i * per}–{min(len(state), (i + 1) * per) - 1}: {POOL_LABELS[cls]} (strongest)"
        out.append(f"<i class='bp-cell bp-{cls}' title='{html.escape(tip, quote=True)}'></i>")
    legend = "".join(f"<span title='{POOL_TIPS[c]}'><i class='bp-cell bp-{c}'></i>{POOL_LABELS[c]}"
                     f"{f' ({fmt_int(counts[c])})' if counts else ''}</span>" for c in POOL_CLASSES)
    size = snapshot.get("block_size", "?")
    scale = (f"each square is one block of {size} tokens' keys and values" if per == 1 else
             f"each square is {per} blocks of {size} tokens (pool too large to draw block by block)")
    return (f"<div class='bp'><div class='bp-title'>KV block pool: {fmt_int(len(state))} blocks "
            f"({scale})</div><div class='bp-legend'>{legend}</div>"
            f"<div class='bp-grid'>{''.join(out)}</div></div>")


def tables_html(snapshot: dict, mine: set[str], max_rows: int = 8, max_chips: int = 24) -> str:
    """Each running request's block table: logical block → physical block, yours first and marked."""
    tables = list(snapshot.get("tables") or [])
    size = int(snapshot.get("block_size") or 16)
    if not tables:
        return ("<div class='bt'><div class='bp-title'>Block tables</div>"
                "<div class='bp-empty'>No request is running right now.</div></div>")
    tables.sort(key=lambda t: (str(t["request_id"]) not in mine, str(t["request_id"])))
    users = {}
    for t in tables:
        for b in t.get("blocks") or []:
            users[int(b)] = users.get(int(b), 0) + 1
    rows = []
    for t in tables[:max_rows]:
        rid, blocks, tokens = str(t["request_id"]), list(t.get("blocks") or []), int(t.get("tokens") or 0)
        you = rid in mine
        chips = []
        for lb, pb in enumerate(blocks[:max_chips]):
            filled = max(0, min(size, tokens - lb * size))
            shared = users.get(int(pb), 0) > 1
            tip = f"logical block {lb} → physical block {pb}: {filled}/{size} tokens" + (
                " · shared with another request (same prefix)" if shared else "")
            cls = "bt-chip" + (" bt-partial" if filled < size else "") + (" bt-shared" if shared else "")
            chips.append(f"<span class='{cls}' title='{html.escape(tip, quote=True)}'>"
                         f"<sub>{lb}</sub>{pb}</span>")
        if len(blocks) > max_chips:
            chips.append(f"<span class='bt-more'>… +{len(blocks) - max_chips} blocks</span>")
        who = "<b class='bt-you'>you</b>" if you else "<span class='bt-other'>other</span>"
        rows.append(f"<div class='bt-row{' bt-mine' if you else ''}'>{who}<span class='bt-id'>"
                    f"{html.escape(rid)} · {fmt_int(tokens)} tokens in {len(blocks)} blocks</span>"
                    f"<span class='bt-chips'>{''.join(chips)}</span></div>")
    more = (f"<div class='bt-more'>… and {len(tables) - max_rows} more running requests</div>"
            if len(tables) > max_rows else "")
    return ("<div class='bt'><div class='bp-title'>Block tables of the running requests</div>"
            "<div class='bt-help'>Each chip maps one of the request's blocks to the pool: "
            "<span class='bt-chip'><sub>2</sub>417</span> = its logical block 2 is physical block 417. "
            "<span class='bt-chip bt-partial'>dashed</span> = partly filled; "
            "<span class='bt-chip bt-shared'>purple</span> = a prompt-prefix block shared with another "
            f"request (stored once).</div>{''.join(rows)}{more}</div>")


def kv_utilization(snapshot: dict) -> float | None:
    """Token slots filled / token slots of the used blocks, from the snapshot's block tables.

    A prefix block shared by several requests counts once (summing each request's tokens would
    count it once per request and pass 100%). ``None`` when no block is in use.
    """
    size = int(snapshot.get("block_size") or 16)
    used = sum(1 for s in snapshot.get("state") or [] if s == "used")
    if not used:
        return None
    filled: dict[int, int] = {}
    for t in snapshot.get("tables") or []:
        tokens = int(t.get("tokens") or 0)
        for lb, pb in enumerate(t.get("blocks") or []):
            filled[int(pb)] = max(filled.get(int(pb), 0), max(0, min(size, tokens - lb * size)))
    return min(1.0, sum(filled.values()) / (used * size))


def stats_html(stats: dict, steps: list[dict], queue_time_s: float | None = None,
               util: float | None = None) -> str:
    """One line of numbers: running / waiting, blocks, KV utilization (``util``, else the last
    step's), preemptions, prefix hits, and the viewer's queue time when known."""
    running = int(stats.get("running") or 0)
    if util is None and steps and running:
        util = min(1.0, float(steps[-1].get("kv_utilization") or 0.0))
    free, cached = int(stats.get("blocks_free") or 0), int(stats.get("blocks_cached") or 0)
    items = [
        ("running", fmt_int(running), "requests in the batch now"),
        ("waiting", fmt_int(stats.get("waiting", 0)), "requests queued for a free slot or KV blocks"),
        ("blocks used", f"{fmt_int(stats.get('blocks_used', 0))} / {fmt_int(stats.get('blocks_total', 0))}",
         "KV blocks held by running requests"),
        ("cached prefix", fmt_int(cached), "free blocks still holding a prompt prefix a new request can reuse"),
        ("empty", fmt_int(max(0, free - cached)), "free blocks holding nothing"),
        ("KV utilization", f"{util:.0%}" if util is not None else "–",
         "token slots filled / token slots of the used blocks: paging wastes at most one partly "
         "filled block per request"),
        ("preemptions", fmt_int(stats.get("preemptions", 0)),
         "requests evicted to free blocks and recomputed later"),
        ("prefix-cache hits", f"{float(stats.get('prefix_hit_rate') or 0):.0%}",
         "prompt tokens found in cached blocks / prompt tokens looked up"),
    ]
    if queue_time_s is not None:
        items.append(("your queue time", fmt_seconds(queue_time_s),
                      "how long your request waited before its first step"))
    pills = "".join(f"<span class='bs-pill' title='{html.escape(d, quote=True)}'><span class='bs-label'>{k}"
                    f"</span> <b>{v}</b></span>" for k, v, d in items)
    return f"<div class='bs'>{pills}</div>"


def batch_frame(stats: dict, snapshot: dict, steps, mine: set[str], queue_time_s: float | None = None) -> dict:
    """The section's four outputs: ``batch_stats`` and ``pool`` / ``tables`` HTML, ``strip`` figure.

    Without continuous batching (``stats["batching"]`` false) the numbers give way to the
    engine's ``batching_note`` and the picture stays empty.
    """
    steps = plain_steps(steps)
    mine = set(mine or ())
    if not stats.get("batching", False):
        note = stats.get("batching_note") or "This engine serves one request at a time (no continuous batching)."
        fig = strip_figure([], mine)
        return {"batch_stats": f"<div class='status status-warn'>{html.escape(note)}</div>",
                "pool": "", "tables": "", "strip": fig}
    util = kv_utilization(snapshot or {}) if stats.get("running") else None
    return {"batch_stats": stats_html(stats, steps, queue_time_s, util),
            "pool": pool_html(snapshot or {}, mine), "tables": tables_html(snapshot or {}, mine),
            "strip": strip_figure(steps, mine, idle=not stats.get("running") and not stats.get("waiting"))}


def signature(stats: dict, steps, mine: set[str]) -> tuple:
    """What the section shows, cheaply: unchanged signature = nothing to redraw."""
    last = steps[-1] if steps else None
    sid = (last.get("step_id") if isinstance(last, dict) else getattr(last, "step_id", None)) if last else None
    return (sid, stats.get("running"), stats.get("waiting"), stats.get("blocks_used"),
            stats.get("blocks_cached"), tuple(sorted(mine)))
