"""The machine profile shown once, beside every lesson: its figures, when they were measured and
the load then, the one "Measure again", and a caution where a lesson ran after the profile or
the load has changed by more than 2× since (the student read 39.4 and 3.0 FLOPs per byte in two
lessons ten minutes apart, each "measured just now")."""

import re
from types import SimpleNamespace

import gradio as gr
import pytest

from app.tabs.lessons import batch, last_runs, machine_profile, profile_panel, roofline
from tests.app.tabs.lessons.test_machine_profile import SHAPE, _measures


@pytest.fixture(autouse=True)
def _fresh():
    machine_profile.forget()
    last_runs.clear()
    yield
    machine_profile.forget()
    last_runs.clear()


def _profile(at=1000.0, load=2.0):
    p = machine_profile.current(_measures(), clock=lambda: at)  # 161.4 GFLOP/s, 4.1 GB/s
    p["load_average"] = load
    return p


def test_a_lesson_run_after_the_profile_is_named_with_its_time():
    p = _profile()
    before = {"batch": {"at": 999.0}}
    assert profile_panel.cautions(p, before, 2.0) == []
    after = {"batch": {"at": 1000.0 + 3600}, "quantization": {"at": 900.0}, "compile": None}
    notes = profile_panel.cautions(p, after, 2.0)
    assert notes == ["Batch size ran at 01:16 UTC, after this profile: its figures were taken under that "
                     "moment's load and may differ from these."]


def test_the_run_that_measured_the_profile_is_not_named_as_after_it():
    """The Batch size sweep measures the profile when none is kept: it ends after the profile's
    stamp, yet it is that profile's own moment (the student read "Batch size ran at 06:47, after
    this profile" beside the profile that run had just measured)."""
    p = _profile()
    own = {"batch": {"at": 1000.0 + 30, "profile_at": p["measured_at"]}}
    assert profile_panel.cautions(p, own, 2.0) == []
    later = {"batch": {"at": 1000.0 + 30, "profile_at": p["measured_at"] - 600}}  # an older profile's
    assert len(profile_panel.cautions(p, later, 2.0)) == 1


def test_a_batch_sweep_records_the_stamp_of_a_profile_it_measured():
    """A sweep run with no profile kept measures one and records its stamp; one run with a
    profile kept from before records none."""
    rows = [{"batch": b, "throughput_tokens_per_s": 10.0 * b, "per_token_latency_ms": 10.0} for b in (1, 2)]
    p = _profile(at=2000.0)
    batch.record_last_run(rows, 24, p["measured_at"])
    assert last_runs.latest("batch")["profile_at"] == 2000.0
    assert profile_panel.cautions(p, {"batch": last_runs.latest("batch")}, 2.0) == []
    batch.record_last_run(rows, 24)
    assert last_runs.latest("batch")["profile_at"] is None


def test_a_lesson_run_under_a_load_more_than_twice_the_profiles_is_named():
    """A lesson run before the profile, but on a CPU shared with 4.5× the load: its figures and
    the profile's may differ, and the panel says why; a run at a like load says nothing."""
    p = _profile(load=2.0)
    notes = profile_panel.cautions(p, {"quantization": {"at": 900.0, "load": 9.0},
                                       "batch": {"at": 950.0, "load": 3.5}}, 2.0)
    assert notes == ["Quantization ran at 00:15 UTC under a load average of 9, more than 2× above the 2 "
                     "of this profile: its figures and these were taken on a differently shared CPU and "
                     "may differ."]
    last_runs.record("batch", {"rows": []})
    # stamped with the load as it finished (the 1-minute average moves a little between two reads)
    assert last_runs.latest("batch")["load"] == pytest.approx(machine_profile.load_average(), abs=1.0)


@pytest.mark.parametrize("then,now,changed", [(2.0, 4.1, True), (2.0, 4.0, False), (2.0, 0.9, True),
                                              (0.1, 0.9, False), (0.1, 1.1, True), (None, 9.0, False),
                                              (2.0, None, False)])
def test_a_load_changed_by_more_than_twice_is_named(then, now, changed):
    assert profile_panel.load_changed(then, now) is changed
    notes = profile_panel.cautions(_profile(load=then), {}, now)
    assert bool(notes) is changed
    if changed:
        assert f"The load average is {now:g} now" in notes[0] and f"the {then:g} at measuring" in notes[0]
        assert ("higher" if now > then else "lower") in notes[0] and "Measure again" in notes[0]


def test_the_panel_prints_the_ridge_the_lessons_print():
    p = _profile()
    html = profile_panel.panel_html(p, {}, 2.0)
    ridge = re.search(r"= <b>([\d.,]+) FLOPs per byte</b>", html).group(1)
    table = roofline.roofline_table(SHAPE, 512, p)
    row = next(line for line in table.splitlines() if line.startswith("| this machine"))
    lesson = re.search(r"= <b>([\d,.]+) FLOPs per byte</b>",
                       batch.ridge_html(batch.ridge_crossing(SHAPE, p, 512), None)).group(1)
    assert ridge == row.split("|")[4].strip() == lesson == "39.4"
    assert "161.4 ÷ 4.1" in html and "4.1 GB/s" in html and "161.4 GFLOP/s" in html
    assert machine_profile.stamp(p) in html and machine_profile.stamp(p) in row
    assert "Not measured yet" in profile_panel.panel_html(None, {}, 1.0)
    # the caution is on the panel itself
    assert "after this profile" in profile_panel.panel_html(p, {"remedies": {"at": 2000.0}}, 2.0)


def test_measure_again_is_the_one_button_that_measures_anew(engine):
    """On the embedded model's engine: the panel sits once on the Lessons tab; Measure again
    measures (the kept profile changes its time), the roofline lesson's button reuses it."""
    from app.tabs import lessons

    with gr.Blocks() as demo:
        with gr.Tab("Lessons"):
            c = lessons.build_lessons(engine)
    panels = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == profile_panel.ELEM_ID]
    assert len(panels) == 1 and isinstance(c["profile_html"], gr.HTML)
    assert "Not measured yet" in c["profile_html"].value
    fns = {f.name: f for f in demo.fns.values()}
    who = SimpleNamespace(session_hash="profile-test")
    html = fns["on_measure_again"].fn(who)
    kept = machine_profile.kept()
    assert kept is not None and html is not None
    assert f"{kept['bandwidth_gb_per_s']:,.1f} GB/s" in html and machine_profile.stamp(kept) in html
    roof = next(f for f in demo.fns.values() if f.name == "on_measure")
    roof.fn("this page's model", "fp16", "fp16", "", 512, who)
    assert machine_profile.kept()["measured_at"] == kept["measured_at"]  # reused, not measured
    labels = [b.value for b in demo.blocks.values() if isinstance(b, gr.Button)]
    assert "Measure again" in labels and not [v for v in labels if "Measure this machine" in str(v)]


def test_the_lessons_timers_tick_only_while_the_lessons_tab_is_selected(tmp_path):
    """A timer's tick is a server event for every open page: on the whole page the profile
    panel's and Remedies' timers start stopped and the profile's right-hand sidebar hidden; the
    Lessons tab's selection starts and shows them, every other tab's stops and hides them (the
    student saw a blank 290 px column on Compare after visiting Lessons)."""
    from app.page import build_demo
    from app.state.playground import Playground
    from tests.support.fakes import FakeEngine

    demo = build_demo(Playground(FakeEngine(), trace_dir=tmp_path, monitor=False))
    timers = [b for b in demo.blocks.values() if isinstance(b, gr.Timer) and b.value == 10.0]
    side = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "lesson-profile-sidebar"]
    assert len(timers) == 2 and not any(t.active for t in timers)
    assert len(side) == 1 and side[0].visible is False
    tabs = {b.elem_id: b._id for b in demo.blocks.values() if isinstance(b, gr.Tab)}
    for elem_id, shown in (("tab-lessons", True), ("tab-playground", False), ("tab-compare", False)):
        fn = next(f for f in demo.fns.values()
                  if any(t[0] == tabs[elem_id] and t[1] == "select" for t in f.targets)
                  and side[0] in f.outputs)
        out = fn.fn()
        assert {o._id for o in fn.outputs} == {t._id for t in timers} | {side[0]._id}
        got = {o._id: u for o, u in zip(fn.outputs, out)}
        for o in fn.outputs:
            u = got[o._id]
            args = u.constructor_args if hasattr(u, "constructor_args") else u
            assert args["active" if isinstance(o, gr.Timer) else "visible"] is shown
    # the request settings' sidebar opens and closes in the browser: no server event has it
    # among its inputs or outputs (Gradio's front end would then refresh the loading status of
    # every component inside it on every later message of every event)
    sidebar = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "sidebar")
    assert not [f for f in demo.fns.values() if f.fn is not None and (sidebar in f.outputs or sidebar in f.inputs)]
    assert [f for f in demo.fns.values() if f.fn is None and f.js and "sidebar" in f.js
            and any(t[0] == tabs["tab-compare"] for t in f.targets)]


def test_the_batch_sweep_redraws_the_profile_panel_when_it_ends():
    """The sweep's summary names "the panel at the right"; the panel is one of its outputs, so
    a profile the sweep measured shows there when the sweep ends (the student saw "Not measured
    yet" beside the result until the next refresh)."""
    from app.tabs import lessons
    from tests.support.fakes import FakeEngine

    with gr.Blocks() as demo:
        c = lessons.build_lessons(FakeEngine())
    fn = next(f for f in demo.fns.values() if any(t[0] == c["batch_run"]._id for t in f.targets))
    assert c["profile_html"]._id in {o._id for o in fn.outputs}
