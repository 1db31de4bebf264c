"""Fixtures of the server tests: the whole page on a fake engine, and ``python -m app``'s
``main`` run on one."""

from __future__ import annotations

import pytest

from app.state.playground import Playground
from tests.support.fakes import FakeEngine
from tests.support.servers import launch


@pytest.fixture
def served(tmp_path):
    """``(demo, url, pg, engine)``: the whole page on a fake engine."""
    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path / "traces", monitor=False)
    demo, url = launch(pg)
    yield demo, url, pg, eng
    demo.close()
    pg.close()


@pytest.fixture
def run_cli(monkeypatch, tmp_path):
    """Run ``app.server.main.main(argv)`` on a fake engine; ``probe(demo, engine)`` runs while it serves
    (in place of waiting for SIGTERM). Returns ``(exit code, fake engine)``."""
    import tempfile

    import engine as engine_pkg
    from tests.support.servers import free_port

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the server's temp folders land here
    monkeypatch.delenv("GRADIO_TEMP_DIR", raising=False)
    fake = FakeEngine()
    monkeypatch.setattr(engine_pkg, "load_model", lambda *a, **k: object())
    monkeypatch.setattr(engine_pkg, "LLMEngine", lambda loaded, **kw: fake)

    def run(probe, *argv):
        from app.server import main as server_main

        def wait_for_stop(demo, stop):
            try:
                probe(demo, fake)
            finally:
                demo.close()

        monkeypatch.setattr(server_main, "wait_for_stop", wait_for_stop)
        return server_main.main(["--port", str(free_port()), *argv]), fake

    return run
