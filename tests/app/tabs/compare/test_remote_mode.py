"""The Compare tab in front of a remote server (sampling settings only) and beside one (the
"this engine vs the remote server" preset), on fake engines."""

import dataclasses

import gradio as gr

from engine.protocol import EngineCapabilities

from app.state.playground import Playground
from app.tabs import compare
from app.tabs.compare import handlers
from app.tabs.compare.engines import EngineSet
from app.tabs.compare.presets import BY_KEY
from app.tabs.context import TabContext
from tests.support.fakes import FakeEngine


class RemoteFake(FakeEngine):
    capabilities = EngineCapabilities(remote=True)

    def submit(self, prompt, params, raw=False, use_kv_cache=True, *, request_id=None):
        return super().submit(prompt, params, raw, use_kv_cache, request_id=request_id)


def _built(engine, peer=None):
    pg = Playground(engine, monitor=False)
    with gr.Blocks():
        ctx = dataclasses.replace(TabContext(pg=pg, engine=engine), compare_peer=peer)
        c = compare.build(ctx)
    return pg, c


def test_in_front_of_a_remote_server_only_sampling_settings_show():
    pg, c = _built(RemoteFake())
    shown = [x.elem_id for x in c["left_settings"] if x.visible]
    assert shown == ["cmp-left-temperature", "cmp-left-top-p", "cmp-left-top-k", "cmp-left-seed",
                     "cmp-left-max-tokens"]
    assert [b.value for b in c["preset_btns"]] == [BY_KEY["greedy_sampling"].label]
    pg.close()


def test_a_remote_comparison_runs_two_sampling_settings_and_refuses_the_rest():
    eng = RemoteFake()
    pg, engines = Playground(eng, monitor=False), EngineSet(eng)
    res = list(handlers.compare(pg, engines, "s", "Hi", {"temperature": 0},
                                {"temperature": 1.0, "seed": 3}, 8))[-1]["result"]
    assert res["right"]["text"] == "Hello, world!" and [p.seed for _, p, _, _ in eng.submitted] == [None, 3]
    notes = []
    list(handlers.compare(pg, engines, "s", "Hi", {}, {"kv_cache_dtype": "fp8"}, 8, notify=notes.append))
    assert notes[0].startswith("Refused: right.kv_cache_dtype needs this page's own engine")
    pg.close()


def test_beside_a_remote_server_its_preset_shows_and_runs_there():
    served, peer = FakeEngine(), RemoteFake()
    pg, c = _built(served, peer)
    assert BY_KEY["local_remote"].label in [b.value for b in c["preset_btns"]]
    p = BY_KEY["local_remote"]
    res = list(handlers.compare(pg, c["engines"], "s", "Hi", p.left, p.right, 8))[-1]["result"]
    assert res["left"]["engine"].startswith("served engine") and res["right"]["engine"].startswith("remote server")
    assert len(served.submitted) == 1 and len(peer.submitted) == 1 and peer.salts == [None]
    assert res["left"]["first_diff"] is None  # the same text, compared by token text
    _, plain = _built(FakeEngine())
    assert BY_KEY["local_remote"].label not in [b.value for b in plain["preset_btns"]]
    pg.close()
