"""What "Run both" does, as a plain generator of *frames* (dicts of named panel values).

Frame keys (the live names of :mod:`app.tabs.compare.layout`'s panels): ``status``, ``left`` and
``right`` (token chips), ``latency`` and ``kv`` (figures), ``table``; the last frame also has
``diff`` (the 0-based index where the answers part as text, ``""`` when they don't), ``busy``
False and ``result``: ``{"left": figures, "right": figures}``
(:meth:`app.tabs.compare.run.SideRun.figures`). Tests read the frames directly.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator

from engine import ModelLoadError, QueueFullError

from app.render import cards
from app.render import compare as view
from app.render.fmt import fmt_bytes
from app.server import fields
from app.server.errors import log_internal
from app.state.run_state import Throttle
from app.state.shared_views import shared
from app.tabs.compare.engines import EngineSet
from app.tabs.compare.run import SideRun, apart, submit_pair
from app.tabs.compare.settings import MAX_TOKENS_CAP, SideSettings, parse_side
from app.tabs.playground.frames import TEXT_EVERY_S  # chips, status and table: the page's one text cadence

FIGURES_EVERY_S = 1.0  # the two plots
POLL_S = TEXT_EVERY_S  # a poll per text frame


def empty_frame(note: str = "Pick a preset or set both sides, then press Run both.") -> dict:
    """The panels before any run."""
    return {"status": cards.status_html(note, "info"), "left": view.tokens_html([]),
            "right": view.tokens_html([]), "latency": view.latency_figure({}),
            "kv": view.kv_figure({}), "table": view.table_html({})}


def parse_sides(left, right, max_tokens, engines: EngineSet) -> dict[str, SideSettings]:
    """Both sides checked (see :func:`app.tabs.compare.settings.parse_side`).

    Raises:
        ValueError: naming the side and field (``"right.weights must be one of ..."``).
    """
    if max_tokens is not None:  # the comparison's own field, named as such (not a side's)
        max_tokens = fields.whole("max_tokens", max_tokens)
        if not 1 <= max_tokens <= MAX_TOKENS_CAP:
            raise ValueError(f"max_tokens must be in [1, {MAX_TOKENS_CAP}], got {max_tokens}")
    flags = dict(remote=engines.remote, peer=engines.peer is not None)
    return {"left": parse_side("left", left, max_tokens, **flags),
            "right": parse_side("right", right, max_tokens, **flags)}


def compare(pg, engines: EngineSet, session_id: str, prompt, left, right, max_tokens=None,
            notify: Callable[[str], None] | None = None) -> Iterator[dict]:
    """Run one prompt with two settings at once and yield frames while both stream.

    Args:
        pg: the :class:`app.state.playground.Playground`; engines: the :class:`EngineSet`.
        session_id: the browser session (Stop and closing the tab abort both runs).
        prompt: the user message; left, right: each side's settings (dicts); max_tokens: for
            a side that sets none.
        notify: called with every refusal or failure (a toast on the page).

    Yields:
        Frames (see the module docstring); the last one has ``busy`` False, and ``result``
        when both runs were submitted.
    """
    def refuse(msg: str) -> Iterator[dict]:
        if notify:
            notify(msg)
        yield {"status": cards.status_html(msg, "error"), "busy": False}

    try:
        prompt = fields.text("prompt", prompt, default="")
        if not prompt.strip():
            yield from refuse("The prompt is empty: type something first.")
            return
        sides = parse_sides(left, right, max_tokens, engines)
    except ValueError as exc:
        yield from refuse(f"Refused: {exc}")
        return
    loading = not engines.remote and any(engines.key(s) is not None and s.engine == "local"
                                         for s in sides.values())
    note = ("Loading the second variant (once; a few seconds)…" if loading else "Submitting both sides…")
    yield {**empty_frame(note), "status": cards.status_html(note, "busy"), "busy": True}
    try:
        runs = submit_pair(pg, engines, session_id, prompt, sides)
    except QueueFullError as exc:
        yield from refuse(f"The engine is busy: {exc}")
        return
    except ModelLoadError as exc:  # its message may name server paths: logged, an id shown
        yield from refuse("That variant could not be loaded on this server: " + log_internal("Compare", exc))
        return
    except ValueError as exc:
        yield from refuse(f"Refused: {exc}")
        return
    except Exception as exc:  # noqa: BLE001 - a server failure
        yield from refuse(log_internal("Compare", exc))
        return
    budget = shared(pg).frames
    token = budget.open()
    try:
        yield from _frames(runs, budget, token)
    except Exception as exc:  # noqa: BLE001 - end the stream with a status, buttons restored
        yield from refuse(log_internal("Compare", exc))
    finally:
        budget.close(token)
        for run in runs:
            if run.handle is not None:
                pg.release(session_id, run.handle)
            engines.done(run.placement)


def _frames(runs: list[SideRun], budget, token) -> Iterator[dict]:
    text_due, figs_due = Throttle(TEXT_EVERY_S), Throttle(FIGURES_EVERY_S)
    while not all(r.finished for r in runs):
        _next_turn(runs)
        stretch = budget.stretch()
        text_due.interval_s, figs_due.interval_s = TEXT_EVERY_S * stretch, FIGURES_EVERY_S * stretch
        changed = [r.poll() for r in runs]
        if any(changed) and text_due.due():
            budget.frame(token)
            yield _frame(runs, final=False, figures=figs_due.due())
        waiting = next((r for r in runs if r.handle is not None and not r.handle.finished), None)
        if waiting is not None:
            try:
                waiting.handle.result(timeout=POLL_S)
            except TimeoutError:
                pass
        else:
            time.sleep(0)
    for r in runs:
        r.finish()
    yield _frame(runs, final=True, figures=True)


def _next_turn(runs: list[SideRun]) -> None:
    """Submit a side that waits for its turn once the side before it has ended; when that one
    was stopped (or failed), end the waiting side too, unsubmitted."""
    for before, run in zip(runs, runs[1:]):
        if run.start is None or not before.finished:
            continue
        if before.state.finish_reason in ("abort", "error") or \
                (before.handle is not None and before.handle.abort_requested):
            run.start = None
            run.state.finish_reason = "abort"
        else:
            run.start()


def _frame(runs: list[SideRun], final: bool, figures: bool) -> dict:
    left, right = runs
    if "remote" in (left.placement.kind, right.placement.kind):  # another tokenizer's ids
        diff = view.first_diff([t.text for t in left.state.tokens], [t.text for t in right.state.tokens],
                               finished=final)
    else:
        diff = view.first_diff(left.token_ids, right.token_ids, finished=final)
    frame = {name: r.chips.html(r.state.tokens, diff) for name, r in zip(view.SIDES, runs)}
    figs = {r.name: r.figures(diff) for r in runs}
    frame["table"] = view.table_html(figs)
    stopped = final and any(r.state.finish_reason in ("abort", "error") for r in runs)
    frame["status"] = cards.status_html(_status(runs, diff, final),
                                        "busy" if not final else "warn" if stopped else "ok")
    if figures:
        frame["latency"] = view.latency_figure({r.name: r.token_times_s() for r in runs})
        frame["kv"] = view.kv_figure({r.name: (r.state.kv_tokens, r.state.kv_bytes) for r in runs})
    if final:
        frame["diff"] = "" if diff is None else str(diff)  # the columns scroll to the marked chip
        frame["busy"] = False
        frame["result"] = {name: {k: v for k, v in f.items()} for name, f in figs.items()}
    return frame


def _status(runs: list[SideRun], diff: int | None, final: bool) -> str:
    left, right = runs
    shared_engine = left.placement.engine is right.placement.engine
    if apart({r.name: r.settings for r in runs}, {r.name: r.placement for r in runs}):
        how = ("one side after the other (sharing steps, the side with a cache would decode at "
               "the recompute's pace)")
    elif shared_engine:
        how = "both sides share the engine's batches"
    else:  # both variants' weights are in memory at once
        sizes = [getattr(r.placement.engine.info, "weights_bytes", 0) or 0 for r in runs]
        how = "two engines, each stepping in its own thread" + (
            f" (weights {fmt_bytes(sizes[0])} + {fmt_bytes(sizes[1])} in memory)" if all(sizes) else "")
    cut = [name for name, r in (("left", runs[0]), ("right", runs[-1])) if r.state.finish_reason == "length"]
    counts = f"Left {len(left.token_ids)} · Right {len(right.token_ids)} tokens" + (
        f" ({' and '.join(cut)} cut at max tokens)" if final and cut else "")
    if diff is None:
        part = "identical so far" if not final else "identical answers"
    else:
        part = f"the answers part at token #{diff + 1} (marked)"
    ended = {r.state.finish_reason for r in runs}
    head = ("Streaming" if not final else "Stopped" if "abort" in ended else
            "Failed" if "error" in ended else "Finished")
    return f"{head}: {counts} · {part} · {how}"
