"""The prefix cache: a secret salt per session unless the server shares it on purpose.

The page runs in this process on 127.0.0.1 around a fake engine (``tests.support.fakes``),
so these tests need no model.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets

import httpx
import pytest

from app.state.playground import Playground
from engine.protocol import EngineCapabilities
from tests.support.fakes import FakeEngine
from tests.support.gradio_queue import fn_index, queue_call
from tests.support.servers import launch


# ---- 2. prefix cache: a secret salt per session unless shared ----------------------------------
class PrefixFake(FakeEngine):
    def stats(self):
        return dataclasses.replace(super().stats(), batching=True, blocks_total=64, blocks_used=0,
                                   blocks_free=64, blocks_cached=8, block_size=16, preemptions=0,
                                   prefix_hit_rate=0.42)


def test_each_session_gets_its_own_secret_salt(tmp_path):
    import inspect

    from app.tabs.playground import handlers

    eng = FakeEngine()
    assert "cache_salt" in inspect.signature(eng.submit).parameters
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    assert not pg.prefix_cache_shared
    for session in ("alice", "alice", "bob"):
        list(handlers.generate(pg, session, "chat", "Hi", [], "", 0.7, 1.0, 0, 0.0, 1.0, 8, -1, True))
    a1, a2, b = eng.salts
    assert a1 == a2 and a1 != b and len(a1) == len(b) == 32
    assert "alice" not in a1 and "bob" not in b
    pg.end_session("alice")  # a session that comes back later is a new one
    assert pg.cache_salt("alice") != a1 and pg.cache_salt("bob") == b

    shared = FakeEngine()
    pg = Playground(shared, trace_dir=tmp_path, monitor=False, shared_prefix_cache=True)
    assert pg.prefix_cache_shared and pg.cache_salt("alice") is None
    for session in ("alice", "bob"):
        list(handlers.generate(pg, session, "chat", "Hi", [], "", 0.7, 1.0, 0, 0.0, 1.0, 8, -1, True))
    assert shared.salts == [None, None]


def test_api_clients_and_lessons_get_their_sessions_salt(served):
    from gradio_client import Client

    from app.tabs.lessons.kv_cache import kv_live

    demo, url, pg, eng = served
    one, two = Client(url, verbose=False), Client(url, verbose=False)
    for client in (one, one, two):
        client.predict(prompt="Hi", api_name="/generate")
    a1, a2, b = eng.salts
    assert a1 == a2 and a1 != b and one.session_hash not in (a1, b) and two.session_hash not in (a1, b)
    index = fn_index(demo, "on_kv")
    session = secrets.token_hex(8)
    queue_call(url, index, ["Tell me a story.", 16], session)
    assert eng.salts[3:] == [pg.cache_salt(session)] * 2
    list(kv_live(eng, "Hi", 16, submit_kwargs={"cache_salt": "s1"}))
    assert eng.salts[5:] == ["s1", "s1"]


def test_an_engine_without_cache_salt_is_reported_as_sharing(tmp_path, caplog):
    class OldEngine(FakeEngine):
        capabilities = EngineCapabilities(supports_traces=True, supports_lessons=True)

        def submit(self, prompt, params, raw=False, use_kv_cache=True):
            return super().submit(prompt, params, raw, use_kv_cache)

    caplog.set_level(logging.WARNING, logger="app")
    pg = Playground(OldEngine(), trace_dir=tmp_path, monitor=False)
    assert pg.prefix_cache_shared and "every user shares its prefix cache" in caplog.text
    assert pg.engine_kwargs("alice") == {}
    pg.submit("alice", "Hi", handlers_params())


def handlers_params():
    from app.tabs.playground.handlers import make_params

    return make_params(0.7, 1.0, 0, 0.0, 1.0, 8, -1)


@pytest.mark.parametrize("shared", [False, True])
def test_stats_show_the_prefix_hit_rate_only_when_the_cache_is_shared(tmp_path, shared):
    from gradio_client import Client

    from app.tabs.playground import handlers

    pg = Playground(PrefixFake(), trace_dir=tmp_path, monitor=False, shared_prefix_cache=shared)
    demo, url = launch(pg)
    try:
        stats = Client(url, verbose=False).predict(api_name="/stats")
        page = httpx.get(url).text
    finally:
        demo.close()
        pg.close()
    assert ("prefix_hit_rate" in stats["engine"]) is shared
    assert stats["engine"]["prefix_cache_shared"] is shared
    html = handlers.session_batch_frame(pg, "alice")["batch_stats"]
    assert ("prefix-cache hits" in html) is shared and ("42%" in html) is shared
    assert ("shared by every user" in page) is shared
    assert ("Your prefix cache is your own" in page) is not shared


@pytest.mark.slow
@pytest.mark.parametrize("argv,salted", [((), True), (("--shared-prefix-cache",), False)])
def test_python_m_app_salts_by_default_and_shares_on_request(run_cli, argv, salted):
    from gradio_client import Client

    def probe(demo, eng):
        Client(demo.local_url, verbose=False).predict(prompt="Hi", api_name="/generate")
        stats = Client(demo.local_url, verbose=False).predict(api_name="/stats")
        assert stats["engine"]["prefix_cache_shared"] is not salted

    _, eng = run_cli(probe, *argv)
    assert len(eng.salts) == 1 and isinstance(eng.salts[0], str) is salted
