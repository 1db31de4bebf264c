"""The machine profile, shown once for every lesson: a panel on the right of the Lessons tab
with the figures (read bandwidth, matmul GFLOP/s, their ridge point), when they were measured
and the machine's load then, the one "Measure again" button, and the server's one batching
curve in brief (batch-1 time per token and end-to-end throughput, from the Batch size lesson's
last sweep, which Remedies prints too).

Where a lesson ran after the profile was measured, or the load has since changed by more than
:data:`LOAD_FACTOR`, the panel says its figures and that lesson's may differ, and why. The text
is drawn at page load, after Measure again, and every :data:`REFRESH_S` seconds (a lesson run
by anyone on the server shows up on its own). No torch here.
"""

from __future__ import annotations

import html
import time

from app.render.fmt import fmt_rate
from app.tabs.lessons import last_runs, machine_profile

LOAD_FACTOR = 2.0
"""A load average this many times higher or lower than the profile's counts as changed."""
REFRESH_S = 10.0
"""Seconds between redraws of the panel."""
RUNS = (("batch", "Batch size"), ("quantization", "Quantization"),
        ("compile", "Memory-bound or compute-bound (eager against compiled)"), ("remedies", "Remedies (Measure)"))
"""The lesson runs kept by :mod:`app.tabs.lessons.last_runs`: ``(key, the tab that ran it)``."""
ELEM_ID = "lesson-profile"


def _hhmm(at: float) -> str:
    return time.strftime("%H:%M UTC", time.gmtime(at))


def load_changed(then: float | None, now: float | None) -> bool:
    """Whether the load average moved by more than :data:`LOAD_FACTOR` either way between the
    profile's ``then`` and ``now`` (runnable processes; ``None`` = unknown: never changed).
    Loads under 0.5 count as 0.5, so an idle machine's 0.1 → 0.3 is not a change."""
    if then is None or now is None:
        return False
    a, b = max(then, 0.5), max(now, 0.5)
    return max(a, b) / min(a, b) > LOAD_FACTOR


def cautions(profile: dict | None, runs: dict[str, dict | None], load_now: float | None) -> list[str]:
    """Why a lesson's figures may differ from the profile's, one sentence each.

    Args:
        profile: :func:`app.tabs.lessons.machine_profile.current`'s result, or ``None``.
        runs: ``{key of RUNS: last_runs.latest(key)}`` (each with ``at``, epoch seconds, and
            ``profile_at``, the ``measured_at`` of a profile the run measured itself).
        load_now: the 1-minute load average now, or ``None``.

    Returns:
        A sentence per lesson run after the profile was measured or under a load more than
        :data:`LOAD_FACTOR` times the profile's (each run's ``load``), and one when the load
        now has changed by more than that; empty without a profile.
    """
    if not profile:
        return []
    out = []
    then = profile.get("load_average")
    for key, tab in RUNS:
        run = runs.get(key)
        if not run or run.get("profile_at") == profile["measured_at"]:
            continue  # a run that measured this very profile (the first to need one) is of its moment
        after = run["at"] > profile["measured_at"]
        load = run.get("load")
        if load_changed(then, load):
            out.append(f"{tab} ran at {_hhmm(run['at'])} under a load average of {load:g}, more than "
                       f"{LOAD_FACTOR:g}× {'above' if load > then else 'below'} the {then:g} of this profile: "
                       "its figures and these were taken on a differently shared CPU and may differ.")
        elif after:
            out.append(f"{tab} ran at {_hhmm(run['at'])}, after this profile: its figures were taken "
                       "under that moment's load and may differ from these.")
    if load_changed(then, load_now):
        way = "higher" if load_now > then else "lower"
        out.append(f"The load average is {load_now:g} now, {way} than the {then:g} at measuring by more "
                   f"than {LOAD_FACTOR:g}×: what runs now gets a {'smaller' if way == 'higher' else 'larger'} "
                   "share of the CPU than the profile did, so figures measured now may differ. "
                   "Measure again for today's figures.")
    return out


def batching_line(run: dict | None) -> str:
    """HTML: the server's one batching curve (the Batch size lesson's last sweep, whoever ran it:
    that lesson or Remedies' Measure) in brief: batch-1 time per token, end-to-end throughput
    from batch 1 to the largest batch and the knee, printed as that lesson prints them; or where
    to get one."""
    rows = sorted((run or {}).get("rows", []), key=lambda r: r["batch"])
    if not rows or rows[0]["batch"] != 1:
        return "<b>Batching</b>: not swept yet (the Batch size lesson, or Remedies' Measure)"
    first, last = rows[0], rows[-1]
    knee = f"knee at batch {run['knee']}" if run.get("knee") else f"no knee up to batch {last['batch']}"
    return (f"<b>Batching</b> <span class='profile-stamp'>(the Batch size sweep at {_hhmm(run['at'])}, "
            f"{run['new_tokens']} new tokens each)</span>: batch-1 time per token "
            f"<b>{first['per_token_latency_ms']:.0f} ms</b>; end to end "
            f"<b>{fmt_rate(first['throughput_tokens_per_s'])} → {fmt_rate(last['throughput_tokens_per_s'])}</b> "
            f"from batch 1 to {last['batch']}, {knee}")


def panel_html(profile: dict | None, runs: dict[str, dict | None], load_now: float | None) -> str:
    """The panel's HTML: the profile's figures with when and under which load they were taken,
    then :func:`cautions`; before any measurement, what Measure again does."""
    if not profile:
        return ("<b>This machine's profile</b><br>Not measured yet. <i>Measure again</i> times a memory "
                "read and a matmul (a few seconds); the Memory-bound and Batch size lessons measure it "
                "when they first need it. Every lesson prints this one profile.")
    gflops, bw = profile["flops_per_s"] / 1e9, profile["bandwidth_gb_per_s"]
    lines = [f"<b>This machine's profile</b> ({html.escape(str(profile.get('device', '')))}, "
             f"{html.escape(str(profile.get('dtype', '')))})",
             f"read bandwidth <b>{bw:,.1f} GB/s</b>", f"matmul <b>{gflops:,.1f} GFLOP/s</b>",
             f"ridge {gflops:,.1f} ÷ {bw:,.1f} = <b>{profile['ridge']:,.1f} FLOPs per byte</b>",
             f"<span class='profile-stamp'>{html.escape(machine_profile.stamp(profile))}</span>; "
             "every lesson prints these figures. They move with the machine's load."]
    lines.append(batching_line(runs.get("batch")))
    notes = cautions(profile, runs, load_now)
    if notes:
        lines.append("<span class='profile-caution' style='color:#9a5b00'>⚠ "
                     + "<br>⚠ ".join(html.escape(n) for n in notes) + "</span>")
    return "<br>".join(lines)


def current_html() -> str:
    """:func:`panel_html` of the server's kept profile, the lessons' last runs and the load now."""
    runs = {key: last_runs.latest(key) for key, _ in RUNS}
    return panel_html(machine_profile.kept(), runs, machine_profile.load_average())


def build(engine, ctx) -> dict:
    """The panel (call inside the Lessons tab): a right-hand ``gr.Sidebar`` holding the profile
    and the "Measure again" button, which measures anew on ``engine``'s device
    (:func:`app.tabs.lessons.roofline.measure_machine`), redrawn every :data:`REFRESH_S` by a
    timer that ticks from the page's load when ``ctx.timers_active`` (else once started by the
    page, which then also shows the sidebar, built hidden), and drawn when the tab shows
    (:meth:`app.tabs.context.TabContext.draw_when_shown`). Returns ``profile_html``,
    ``profile_run``, ``profile_timer`` and ``profile_sidebar``."""
    import gradio as gr

    from app.server.errors import guard
    from app.tabs.lessons.gate import gated
    from app.tabs.lessons.roofline import measure_machine

    private = dict(api_visibility="private", concurrency_limit=None, show_progress="hidden")
    active = ctx.timers_active
    # on the whole page it shows only while the Lessons tab is selected (the page switches it
    # with the tab, as it does the timer): a right sidebar left open takes 260 px of every tab
    with gr.Sidebar(position="right", open=True, width=260, elem_id="lesson-profile-sidebar",
                    visible=active) as sidebar:
        view = gr.HTML(current_html(), elem_id=ELEM_ID)
        run = gr.Button("Measure again", variant="secondary", elem_id="lesson-profile-run")
    timer = gr.Timer(REFRESH_S, active=active)
    timer.tick(guard(current_html), None, view, **private)
    ctx.draw_when_shown(guard(current_html), None, view)

    def on_measure_again():
        machine_profile.current(lambda: measure_machine(engine), fresh=True)
        return current_html()

    run.click(guard(gated(on_measure_again, "profile")), None, view, api_visibility="private", concurrency_limit=None)
    return {"profile_html": view, "profile_run": run, "profile_timer": timer, "profile_sidebar": sidebar}
