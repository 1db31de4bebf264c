"""Trace files are private (0700 folders, 0600 files), deleted with their session, pruned,
and removed at shutdown.

The page runs in this process on 127.0.0.1 around a fake engine (``tests.support.fakes``),
so these tests need no model.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path

import httpx
import pytest

from app.state.playground import Playground
from tests.support.fakes import FakeEngine, make_events, make_output
from tests.support.gradio_queue import file_urls, urls_in
from tests.support.page_chain import run_generate
from tests.support.servers import wait_until


# ---- 8. trace files: private, deleted with their session and at shutdown ----------------------
def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_trace_files_are_private_and_deleted_with_their_session(tmp_path):
    from app.tabs.playground import handlers

    pg = Playground(FakeEngine(), trace_parent=tmp_path, monitor=False)
    assert pg.trace_dir.parent == tmp_path and _mode(pg.trace_dir) == 0o700

    def run(session):
        frames = list(handlers.generate(pg, session, "chat", "Hi", [], "", 0.7, 1.0, 0, 0.0, 1.0, 8, -1, True))
        return [Path(p) for p in frames[-1]["trace"]]

    mine, theirs = run("alice"), run("bob")
    assert mine[0].parent != theirs[0].parent  # one folder per session, named by a random token
    for path in mine + theirs:
        assert _mode(path) == 0o600 and _mode(path.parent) == 0o700
        assert len(path.parent.name) == 32 and "alice" not in str(path) and "bob" not in str(path)
    assert "Hello, world!" in mine[0].read_text()
    pg.end_session("alice")
    assert not any(p.exists() for p in mine) and not mine[0].parent.exists()
    assert all(p.exists() for p in theirs)
    pg.close()
    assert not pg.trace_dir.exists() and list(tmp_path.iterdir()) == []

    given = tmp_path / "given"
    pg = Playground(FakeEngine(), trace_dir=given, monitor=False)
    assert _mode(given) == 0o700
    events = make_events()
    path = Path(pg.write_trace(make_output(events), events, "carol")[0])
    assert _mode(path) == 0o600
    pg.close()  # a folder given by the caller stays; the traces in it go
    assert given.is_dir() and list(given.iterdir()) == []


@pytest.mark.slow
def test_python_m_app_keeps_its_files_private_and_removes_them(run_cli, tmp_path):
    """``python -m app`` on a fake engine: Gradio's temp folder (uploads, served files) and the
    traces inside it are private while it runs; a tab that closes takes its traces with it;
    SIGTERM shuts the server down and leaves nothing behind."""
    import signal

    seen = {}

    def probe(demo, eng):
        url = demo.local_url
        gradio_tmp = Path(os.environ["GRADIO_TEMP_DIR"])
        seen["gradio_tmp"] = gradio_tmp
        assert gradio_tmp.parent == tmp_path and _mode(gradio_tmp) == 0o700
        session = secrets.token_hex(8)
        with httpx.stream("GET", url + f"gradio_api/heartbeat/{session}", timeout=30) as beat:
            alive = beat.iter_lines()  # kept: dropping the iterator would close the stream
            assert next(alive) == "data: ALIVE"
            msgs = run_generate(demo, url, session, Prompt="Hi")
            assert not [u for m in msgs for u in file_urls(m)]  # no /file= link: no server path
            links = sorted({u for m in msgs for u in trace_links(m)})
            assert len(links) == 2, links
            files = [demo.trace_links.resolve(u) for u in links]
            for f in files:  # written inside the private folder
                assert f.is_relative_to(gradio_tmp) and _mode(f) == 0o600 and _mode(f.parent) == 0o700
            json_link = [u for u in links if u.endswith(".json")][0]
            assert "Hello, world!" in httpx.get(url.rstrip("/") + json_link).text
            other = run_generate(demo, url, secrets.token_hex(8), Prompt="Hi")
            other_files = [demo.trace_links.resolve(u) for m in other for u in trace_links(m)]
        # the heartbeat closed: Gradio runs demo.unload for the session
        assert wait_until(lambda: not any(f.exists() for f in files), 30), files
        assert all(httpx.get(url.rstrip("/") + u).status_code == 404 for u in links)
        assert all(f.exists() for f in other_files)  # another session's traces stay
        os.kill(os.getpid(), signal.SIGTERM)  # like docker stop

    before = signal.getsignal(signal.SIGTERM)
    code, eng = run_cli(probe)
    assert code == 0 and eng.stopped
    assert signal.getsignal(signal.SIGTERM) == before
    assert not seen["gradio_tmp"].exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("llm-playground")] == []
    assert "GRADIO_TEMP_DIR" not in os.environ


def trace_links(msg) -> list[str]:
    """Every trace download link (``/playground-traces/...``) anywhere in a queue message."""
    return urls_in(msg, lambda u: u.startswith("/playground-traces/"))


def test_old_traces_are_pruned_with_their_empty_session_folders(tmp_path, monkeypatch):
    import app.state.playground

    monkeypatch.setattr(app.state.playground, "KEEP_TRACES", 2)
    pg = Playground(FakeEngine(), trace_parent=tmp_path, monitor=False)
    events = make_events()
    for i, session in enumerate(("a", "b", "c")):
        for path in pg.write_trace(make_output(events), events, session):
            os.utime(path, (1000 + i, 1000 + i))  # oldest first, whatever the clock's resolution
    folders = [p for p in pg.trace_dir.iterdir()]
    assert len(list(pg.trace_dir.glob("*/trace_*"))) == 4 and len(folders) == 2
    assert set(pg._trace_dirs) == {"b", "c"}
    pg.close()
