"""Trace downloads by opaque link: no Generate result names a server path (Gradio's ``path``
and ``/gradio_api/file=`` URL used to carry the trace's absolute path in the temporary folder);
the link serves the file while it exists and 404s after. The page runs in this process around a
fake engine."""

from __future__ import annotations

import json
import secrets
import tempfile

import httpx

from app.state.playground import Playground
from app.state.trace_links import TraceLinks
from tests.support.fakes import FakeEngine
from tests.support.page_chain import run_generate
from tests.support.servers import launch


def test_no_generate_result_names_a_server_path(tmp_path):
    parent = tmp_path / "server-private"
    parent.mkdir()
    pg = Playground(FakeEngine(), trace_parent=parent, monitor=False)
    demo, url = launch(pg)
    try:
        session = secrets.token_hex(8)
        msgs = run_generate(demo, url, session, Prompt="Hi")
        text = json.dumps(msgs)
        assert str(parent) not in text and str(pg.trace_dir) not in text
        assert tempfile.gettempdir() + "/" not in text and "/file=" not in text
        links = sorted(set(u for u in _urls(msgs) if u.startswith("/playground-traces/")),
                       key=lambda u: u.rsplit(".", 1)[1])
        assert [u.rsplit(".", 1)[1] for u in links] == ["csv", "json"], links
        base = url.rstrip("/")
        r = httpx.get(base + links[1], timeout=30)
        assert r.status_code == 200 and "Hello, world!" in r.text
        assert "attachment" in r.headers.get("content-disposition", "")
        for bad in (links[1].replace(links[1].split("/")[2], "x" * 24), links[1] + "x",
                    "/playground-traces/../../etc/passwd", "/playground-traces/"):
            assert httpx.get(base + bad, timeout=30).status_code == 404, bad
        pg.end_session(session)  # the tab closed: its traces and their links are gone
        assert httpx.get(base + links[1], timeout=30).status_code == 404
    finally:
        demo.close()
        pg.close()


def _urls(x) -> list[str]:
    if isinstance(x, dict):
        return ([x["url"]] if isinstance(x.get("url"), str) else []) + \
            [u for v in x.values() for u in _urls(v)]
    if isinstance(x, list):
        return [u for v in x for u in _urls(v)]
    return []


def test_links_name_no_folder_and_die_with_their_file(tmp_path):
    links = TraceLinks()
    f = tmp_path / "secret-folder" / "trace_req-3.json"
    f.parent.mkdir()
    f.write_text("{}")
    value = links.file_data(str(f))
    assert "secret-folder" not in json.dumps(value) and value["orig_name"] == "trace_req-3.json"
    assert "path" not in value and "meta" not in value  # Gradio neither copies nor rewrites it
    assert links.resolve(value["url"]) == f
    assert links.resolve(value["url"].replace("trace_req-3", "trace_req-4")) is None
    assert links.file_data(None) is None
    f.unlink()
    assert links.resolve(value["url"]) is None
