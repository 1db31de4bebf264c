"""What changed in a live panel since the page last drew it, as small *ops* (plain dicts).

The Playground streams its panels through one channel (:mod:`app.tabs.playground.live_channel`):
each frame is one line of JSON naming, for every panel that changed, only the change. A frame
then costs what changed, not the whole answer so far: an answer's 500th frame carries its new
chips and plot points, not the 500 drawn before them.

Ops, by panel kind:

- HTML text (status, stat cards, KV formula, token chips): ``{"set": html}`` replaces it,
  ``{"app": html}`` appends to it (the chips only ever grow during an answer).
- Plotly figures: ``{"fig": {"data", "layout", "template"}}`` draws a new figure (the template
  by name; the channel sends each template once per run), then ``{"ext": {i: {key: [values]}}}``
  appends points to trace ``i``'s arrays, ``{"tr": {i: trace}}`` replaces trace ``i`` and
  ``{"lay": {key: value}}`` replaces top-level layout keys (a title, an axis).

Nothing here knows Gradio or the browser; :data:`app.tabs.playground.live_channel.LIVE_JS` applies
the ops.
"""

from __future__ import annotations

from collections import deque

import orjson

from app.render.plainfig import PlainFigure, template_json

ARRAY_KEYS = ("x", "y", "customdata", "text")
"""Trace properties that grow point by point (appended with ``ext``)."""


def text_op(old: str | None, new: str, append: bool = False) -> dict | None:
    """The op that turns HTML ``old`` into ``new``; ``None`` when equal.

    Args:
        old: what the panel shows (``None``: nothing sent yet in this run).
        new: what it should show.
        append: ``new`` usually extends ``old`` (token chips): send only the added part then.
    """
    if old == new:
        return None
    if append and old is not None and new.startswith(old):
        return {"app": new[len(old):]}
    return {"set": new}


def js_length(text: str) -> int:
    """``text.length`` in the browser: UTF-16 code units (a character beyond U+FFFF is two)."""
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def _arrays_equal_prefix(old: list, new: list) -> bool:
    return len(new) >= len(old) and new[:len(old)] == old


def figure_op(old: PlainFigure | None, new: PlainFigure) -> dict | None:
    """The op that turns figure ``old`` into ``new``; ``None`` when they are equal.

    Points appended to a trace's arrays (``x``, ``y``, ``customdata``, ``text``) become ``ext``;
    a trace that changed otherwise is resent whole (``tr``), changed top-level layout keys as
    ``lay``; a different number of traces, a removed layout key or a new template is a whole
    ``fig``. Comparisons are list and dict equality (C loops); the op's size is what changed.
    """
    if (old is None or len(old.traces) != len(new.traces) or old.template != new.template
            or not set(old.layout_dict) <= set(new.layout_dict)):
        return {"fig": figure_doc(new)}
    op: dict = {}
    lay = {k: v for k, v in new.layout_dict.items() if old.layout_dict.get(k) != v}
    if lay:
        op["lay"] = lay
    ext, tr = {}, {}
    for i, (a, b) in enumerate(zip(old.traces, new.traces)):
        if a == b:
            continue
        grown = {k: b[k] for k in ARRAY_KEYS if isinstance(b.get(k), list) and isinstance(a.get(k), list)}
        same_rest = set(a) == set(b) and all(a[k] == v for k, v in b.items() if k not in grown)
        if same_rest and all(_arrays_equal_prefix(a[k], v) for k, v in grown.items()):
            tails = {k: v[len(a[k]):] for k, v in grown.items() if len(v) > len(a[k])}
            lengths = {len(v) for v in grown.values()}
            if tails and len(lengths) == 1:
                ext[str(i)] = tails
                continue
        tr[str(i)] = b
    if ext:
        op["ext"] = ext
    if tr:
        op["tr"] = tr
    return op or None


def figure_doc(fig: PlainFigure) -> dict:
    """A figure as the ``fig`` op carries it: traces, layout and its template's name."""
    return {"data": fig.traces, "layout": fig.layout_dict, "template": fig.template}


def template_line(name: str) -> bytes:
    """The frame that gives the browser a Plotly template once (``{"_tpl": {name: ...}}``)."""
    return b'{"_tpl":{' + orjson.dumps(name) + b":" + template_json(name) + b"}}\n"


LOG_LIMIT = 48_000
"""Characters a run's log grows to before it starts a new part (:class:`LiveLog`)."""

CARRY = 3
"""Frames a new part of the log repeats from the last one (frames the browser may not have seen)."""


class LiveLog:
    """The channel's value for one run: a first line naming the run, then one JSON line per frame.

    The value grows during a run, so Gradio's streaming diff sends each frame's new line and
    nothing else. It grows only to :data:`LOG_LIMIT` characters: then a new part starts (the first
    line again, a ``~part`` line, and the last :data:`CARRY` frames), so what the browser and the
    server do per frame with the whole value (diff, copy, compare) stays bounded however long the
    answer. Every frame carries its number ``_n``; the browser applies each number once, so the
    repeated frames change nothing where they were seen, and fill the gap where the browser saw
    two values as one (it draws the last value of a burst). A new run starts a new log (its first
    line differs), and the browser starts over.

    :attr:`head`, the first line alone, is what a run ends on: a value the drawn log starts with
    changes nothing in the browser. :attr:`last_line` is the line :meth:`add` appended (empty when
    it appended none), which a run read over its feed (:mod:`app.state.live_feeds`) sends there.

    Args:
        run_id: a name unique on this page (a new run's log must not start like the last one's).
        templates: Plotly template names the run's figures use, sent in the log's first frame.
        limit: :data:`LOG_LIMIT` (smaller in tests).
    """

    def __init__(self, run_id: str, templates: tuple[str, ...] = (), limit: int = LOG_LIMIT) -> None:
        self.head = run_id.replace("\n", " ") + "\n"
        self.value = self.head + b"".join(template_line(t) for t in templates).decode()
        self.limit = limit
        self.frames = 0
        self.parts = 1
        self.last_frame_bytes = 0
        self.last_line = ""
        self._recent: deque[str] = deque(maxlen=CARRY)

    def add(self, ops: dict) -> str:
        """Append one frame (panel name -> op; empty ops add nothing) and return the log."""
        ops = {k: v for k, v in ops.items() if v is not None}
        if not ops:
            self.last_frame_bytes, self.last_line = 0, ""
            return self.value
        line = orjson.dumps({**ops, "_n": self.frames}, option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"
        self.frames += 1
        self.last_frame_bytes, self.last_line = len(line), line
        if len(self.value) + len(line) > self.limit and self._recent:
            self.parts += 1
            self.value = self.head + f"~{self.parts}\n" + "".join(self._recent)
        self._recent.append(line)
        self.value += line
        return self.value


class LiveEncoder:
    """Each panel's last drawn value in one run, and the ops that bring the page up to a new frame.

    Args:
        append: names of HTML panels whose values grow at their end (the token chips).
        figures: names of panels that hold :class:`PlainFigure` values.
        counted: names among ``append`` whose appends also carry the length they extend
            (``"at"``, in :func:`js_length` units), so a text box that missed a frame appends
            nothing rather than text in the wrong place.
    """

    def __init__(self, append: frozenset[str] = frozenset(), figures: frozenset[str] = frozenset(),
                 counted: frozenset[str] = frozenset()) -> None:
        self.append = append
        self.figures = figures
        self.counted = counted
        self._last: dict = {}
        self._length: dict[str, int] = {}  # the counted panels' lengths as the browser counts

    def ops(self, frame: dict) -> dict:
        """``{name: op}`` for the panels of ``frame`` (name -> full value) that changed."""
        out = {}
        for name, value in frame.items():
            old = self._last.get(name)
            if name in self.figures:
                if value is old:
                    continue
                op = figure_op(old, value)
            else:
                op = text_op(old, value, name in self.append)
                if name in self.counted and op is not None:
                    if "app" in op:  # the length grows by the part appended, not recounted
                        op["at"] = self._length[name]
                        self._length[name] += js_length(op["app"])
                    else:
                        self._length[name] = js_length(value)
            self._last[name] = value
            if op is not None:
                out[name] = op
        return out
