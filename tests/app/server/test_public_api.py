"""The page's public API is what README documents: ``/generate``, ``/stats``, ``/stop`` and
``/compare``; every other event of the page (lessons, timers, page loads) is private, so a
visitor's ``view_api()`` lists no ``/lambda_N`` that runs a lesson or reads the server's state."""

from __future__ import annotations

from app.page import build_demo
from app.state.playground import Playground
from tests.support.fakes import FakeEngine

PUBLIC = {"generate", "stats", "stop", "compare"}


def test_only_the_documented_endpoints_are_public(tmp_path):
    demo = build_demo(Playground(FakeEngine(), trace_dir=tmp_path, monitor=False))
    public = {f.api_name for f in demo.fns.values() if f.api_visibility == "public"}
    assert public == PUBLIC
    # the rest is private, or Gradio's own example loaders (listed nowhere)
    others = {f.api_visibility for f in demo.fns.values() if f.api_name not in PUBLIC}
    assert others <= {"private", "undocumented"}
