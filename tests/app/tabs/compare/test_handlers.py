"""The Compare tab's handler, engines and API on fake engines: frames, salts, variants, refusals."""

import dataclasses
import json

import gradio as gr
import pytest

from app.state.playground import Playground
from app.tabs.compare import api, handlers
from app.tabs.compare.engines import MAX_VARIANTS, EngineSet
from app.tabs.compare.events import live_updates
from tests.support.fakes import FakeEngine

API_KEYS = {"text", "token_ids", "token_times_s", "ttft_s", "tpot_s", "tokens_per_s",
            "kv_cache_bytes", "weight_bytes", "first_diff"}


def _pg(tmp_path, engine=None):
    return Playground(engine or FakeEngine(), trace_dir=tmp_path, monitor=False)


def test_both_sides_stream_and_the_last_frame_holds_both_results(tmp_path):
    eng = FakeEngine()
    pg = _pg(tmp_path, eng)
    frames = list(handlers.compare(pg, EngineSet(eng), "s", "Hi", {"temperature": 0},
                                   {"temperature": 0}, 8))
    assert frames[0]["busy"] is True and frames[-1]["busy"] is False
    res = frames[-1]["result"]
    for side in ("left", "right"):
        assert API_KEYS <= set(res[side])
        assert res[side]["text"] == "Hello, world!" and res[side]["first_diff"] is None
        assert res[side]["engine"].startswith("served engine")
    assert frames[-1]["diff"] == "" and "identical answers" in frames[-1]["status"]
    assert len(eng.submitted) == 2 and pg.active_count() == 0
    assert len(set(eng.salts)) == 2  # cold: a fresh salt per side, not the session's
    assert all(p.max_tokens == 8 for _, p, _, _ in eng.submitted)


def test_a_warm_side_runs_its_prompt_once_first_under_its_own_salt(tmp_path):
    eng = FakeEngine()
    list(handlers.compare(_pg(tmp_path, eng), EngineSet(eng), "s", "Hi", {},
                          {"prefix_cache": "warm"}, 8))
    assert len(eng.submitted) == 3 and eng.submitted[0][1].max_tokens == 1
    warm, left, right = eng.salts
    assert warm == right != left


def test_bad_settings_are_refused_before_anything_is_submitted(tmp_path):
    eng, notes = FakeEngine(), []
    frames = list(handlers.compare(_pg(tmp_path, eng), EngineSet(eng), "s", "Hi", {},
                                   {"weights": "int3"}, 8, notify=notes.append))
    assert notes == ["Refused: right.weights must be one of auto, int4, bf16, fp32, got 'int3'"]
    assert frames[-1]["busy"] is False and "result" not in frames[-1] and not eng.submitted
    notes.clear()
    list(handlers.compare(_pg(tmp_path, eng), EngineSet(eng), "s", "  ", {}, {}, 8, notify=notes.append))
    assert "prompt is empty" in notes[0]


def test_the_live_log_names_the_tabs_own_panels_and_carries_changes(tmp_path):
    eng = FakeEngine()
    frames = handlers.compare(_pg(tmp_path, eng), EngineSet(eng), "s", "Hi", {}, {}, 8)
    values = list(live_updates(frames, "cmp-test-1"))
    assert values[-1] == "cmp-test-1\n"  # the run ends on its first line (a small closing message)
    values = values[:-1]
    lines = [json.loads(x) for x in values[-1].splitlines()[1:] if x.startswith("{") and "_tpl" not in x]
    names = set().union(*lines)
    assert {"cmp-status", "cmp-left-tokens", "cmp-right-tokens", "cmp-latency", "cmp-kv",
            "cmp-table"} <= names
    assert not names & {"tokens", "latency", "status", "kv"}  # never the Playground's panels
    assert all(v.startswith(values[0]) for v in values)  # one append-only log
    assert "fig" in lines[0]["cmp-latency"]


class _Variant(FakeEngine):
    def __init__(self, weights, kv):
        super().__init__()
        self.info = dataclasses.replace(
            self.info, weights=weights, kv_dtype=kv if kv != "auto" else "bfloat16",
            weights_bytes={"int4": 94_835_584, "bf16": 325_653_376}.get(weights, 1))
        self.shut = False

    def shutdown(self):
        self.shut = True


def test_other_weights_run_on_a_second_engine_loaded_once_and_bounded(tmp_path):
    made = []

    def factory(served, weights, kv):
        made.append(_Variant(weights, kv))
        return made[-1]

    served = FakeEngine()
    engines = EngineSet(served, factory=factory)
    pg = _pg(tmp_path, served)
    last = list(handlers.compare(pg, engines, "s", "Hi", {"weights": "int4"}, {"weights": "bf16"}, 8))[-1]
    res = last["result"]
    assert res["left"]["weight_bytes"] == 94_835_584 and res["right"]["weight_bytes"] == 325_653_376
    assert res["left"]["engine"] == "second engine (int4, KV bf16)"
    assert "two engines" in last["status"] and "(weights 94.8 MB + 325.7 MB in memory)" in last["status"]
    assert not served.submitted and len(made[0].submitted) == 1
    list(handlers.compare(pg, engines, "s", "Hi", {"weights": "int4"}, {}, 8))
    assert len(made) == 2 and len(made[0].submitted) == 2  # kept, not loaded again
    list(handlers.compare(pg, engines, "s", "Hi", {"kv_cache_dtype": "fp8"}, {}, 8))
    assert len(engines.variants()) == MAX_VARIANTS and sum(v.shut for v in made) == 1
    assert engines.key(engines_side := handlers.parse_sides({}, {}, 8, engines)["left"]) is None
    engines.shutdown()
    assert all(v.shut for v in made) and engines_side.weights == "auto"


def test_the_api_returns_both_sides_or_names_the_bad_field(tmp_path):
    eng = FakeEngine()
    fn = api.make_compare(_pg(tmp_path, eng), EngineSet(eng))
    out = fn("Hi", {"temperature": 0}, {"temperature": 1.0, "seed": 1}, 8)
    assert set(out) == {"left", "right"} and API_KEYS <= set(out["left"])
    json.dumps(out, default=str)
    with pytest.raises(gr.Error, match="right.kv_cache_dtype must be one of auto, bf16, fp8"):
        fn("Hi", {}, {"kv_cache_dtype": "int2"}, 8)
    with pytest.raises(gr.Error, match="max_tokens must be an integer"):
        fn("Hi", {}, {}, "many")
    before = len(eng.submitted)
    with pytest.raises(gr.Error, match=r"^.?Refused: max_tokens must be in \[1, 1024\], got 5000"):
        fn("Hi", {}, {}, 5000)  # the comparison's own field, not left's
    assert len(eng.submitted) == before


def test_stop_aborts_both_sides(tmp_path):
    eng = FakeEngine("slow")
    pg = _pg(tmp_path, eng)
    frames = handlers.compare(pg, EngineSet(eng), "s", "Hi", {}, {}, 8)
    next(frames)
    next(frames)  # both submitted and streaming
    assert pg.stop("s") is True
    last = list(frames)[-1]
    assert sorted(eng.aborted) == ["req-0", "req-1"] and last["busy"] is False
    assert last["result"]["left"]["finish_reason"] == "abort" and pg.active_count() == 0
    assert "Stopped" in last["status"] and "status-warn" in last["status"]


def test_a_variant_that_fails_to_load_is_reported_and_frees_the_other(tmp_path):
    from engine import ModelLoadError

    made = []

    def factory(served, weights, kv):
        if weights == "fp32" and kv == "fp8":
            raise ModelLoadError("no fp8 here")
        made.append(_Variant(weights, kv))
        return made[-1]

    served = FakeEngine()
    engines, notes = EngineSet(served, factory=factory), []
    last = list(handlers.compare(_pg(tmp_path, served), engines, "s", "Hi", {"weights": "int4"},
                                 {"kv_cache_dtype": "fp8"}, 8, notify=notes.append))[-1]
    assert last["busy"] is False and notes and notes[0].startswith("That variant could not be loaded on this server: internal error")
    assert engines._busy == {("int4", "auto"): 0}


def test_a_side_without_a_kv_cache_runs_after_the_other(tmp_path):
    """KV cache on vs off on one engine: Right is submitted only once Left has ended (sharing
    steps, Left would decode at Right's recompute pace), and the status says so."""
    eng = FakeEngine()
    pg = _pg(tmp_path, eng)
    frames = handlers.compare(pg, EngineSet(eng), "s", "Hi", {"use_kv_cache": True},
                              {"use_kv_cache": False}, 8)
    next(frames)
    next(frames)
    assert len(eng.submitted) == 1  # Left alone so far
    rest = list(frames)
    assert len(eng.submitted) == 2 and eng.submitted[1][3] is False  # Right: no cache
    res = rest[-1]["result"]
    assert res["left"]["text"] == res["right"]["text"] == "Hello, world!"
    assert "one side after the other" in rest[-1]["status"] and pg.active_count() == 0


def test_stopping_the_first_of_two_apart_sides_never_starts_the_second(tmp_path):
    eng = FakeEngine("slow")
    pg = _pg(tmp_path, eng)
    frames = handlers.compare(pg, EngineSet(eng), "s", "Hi", {}, {"use_kv_cache": False}, 8)
    next(frames)
    next(frames)
    assert pg.stop("s") is True
    last = list(frames)[-1]
    assert len(eng.submitted) == 1 and eng.aborted == ["req-0"]
    assert last["result"]["right"]["finish_reason"] == "abort" and last["busy"] is False
    assert "Stopped" in last["status"] and pg.active_count() == 0


def test_run_both_is_one_gradio_event_with_its_buttons_switched_in_the_browser(tmp_path):
    """Run both starts one server event; its buttons switch in the browser before it and after
    it (:mod:`app.tabs.run_buttons`), and no server step touches them."""
    from app.page import build_demo
    from app.state.playground import Playground
    from app.tabs.run_buttons import end_js, start_js
    from tests.support.fakes import FakeEngine

    demo = build_demo(Playground(FakeEngine(), trace_dir=tmp_path, monitor=False))
    run = next(f for f in demo.fns.values() if f.js == start_js("cmp-run", "cmp-stop"))
    assert run.fn is not None
    after = [f for f in demo.fns.values() if f.trigger_after == run._id]
    assert len(after) == 1 and after[0].fn is None and after[0].js == end_js("cmp-run", "cmp-stop")
    buttons = {c._id for c in demo.blocks.values() if getattr(c, "elem_id", None) in ("cmp-run", "cmp-stop")}
    assert len(buttons) == 2
    assert not [f for f in demo.fns.values() if buttons & {o._id for o in f.outputs}]
