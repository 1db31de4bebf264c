"""``python -m app`` serves the OpenAI-compatible routes under ``/v1``, ``/metrics`` and ``/health`` on the
page's own port, on the page's engine (the shared fp32 engine here)."""

from __future__ import annotations

import httpx
import pytest

from app.server.openai_mount import mount_api
from engine import SamplingParams
from tests.support.servers import launch

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def page(engine, tmp_path_factory):
    from app.state.playground import Playground

    pg = Playground(engine, trace_dir=tmp_path_factory.mktemp("traces"), monitor=False)
    demo, url = launch(pg)
    yield demo, url
    demo.close()
    pg.close()
    for listener in list(engine.output_processor.listeners):
        engine.output_processor.listeners.remove(listener)


def test_v1_routes_share_the_pages_engine(page, engine):
    demo, url = page
    assert mount_api(demo.server_app, engine, host="127.0.0.1") is None
    assert httpx.get(url).status_code == 200  # the page still answers at /
    client = openai.OpenAI(base_url=url.rstrip("/") + "/v1", api_key="x", max_retries=0)
    finished = engine.stats().finished
    r = client.chat.completions.create(model="smollm2-135m", max_tokens=5, temperature=0,
                                       messages=[{"role": "user", "content": "Say hi."}])
    ref = engine.generate([{"role": "user", "content": "Say hi."}],
                          SamplingParams(temperature=0, max_tokens=5))
    assert r.choices[0].message.content == ref.text
    assert r.usage.completion_tokens == len(ref.token_ids)
    assert engine.stats().finished >= finished + 2  # the API's request ran in the page's engine
    text = httpx.get(url.rstrip("/") + "/metrics").text
    assert "playground_generation_tokens_total" in text
    assert "playground_prefix_cache_hits_total" not in text  # per-session prefix caches: hidden
    health = httpx.get(url.rstrip("/") + "/health")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    demo.server_app.state.openai.closing = True
    try:
        assert httpx.get(url.rstrip("/") + "/health").status_code == 503
    finally:
        demo.server_app.state.openai.closing = False


def test_no_open_api_off_loopback(engine):
    class FakeApp:
        class router:
            routes = []

    assert "--allow-unauthenticated" in mount_api(FakeApp, engine, host="0.0.0.0", api_key="")
    assert FakeApp.router.routes == []
