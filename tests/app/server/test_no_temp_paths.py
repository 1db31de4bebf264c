"""No server path reaches a client from the page's config, its HTML or its file routes: the
page's static file has a fixed route, and uploads are off (the calculator takes pasted text).
The page runs as ``python -m app`` in a child process."""

from __future__ import annotations

import re
import tempfile

import httpx
import pytest

from tests.support.pages import page_server

ABSOLUTE_FILE = re.compile(r"/gradio_api/file=/")


@pytest.fixture(scope="module")
def page():
    with page_server() as served:
        yield served


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/", "/config", "/gradio_api/info"])
def test_config_and_page_name_no_temporary_folder(page, path):
    url, _, _ = page
    r = httpx.get(url + path, timeout=60)
    assert r.status_code == 200
    text = r.text
    assert "llm-playground-static" not in text and "llm-playground-gradio" not in text
    assert not ABSOLUTE_FILE.search(text), ABSOLUTE_FILE.search(text)
    assert tempfile.gettempdir() + "/" not in text


@pytest.mark.slow
def test_plotly_comes_from_the_pages_own_route(page):
    url, _, _ = page
    assert "/playground-static/plotly.min.js" in httpx.get(url + "/config", timeout=60).text
    r = httpx.get(url + "/playground-static/plotly.min.js", timeout=60)
    assert r.status_code == 200 and "plotly" in r.text[:2000].lower() and len(r.content) > 1e6
    for other in ("/playground-static/../../etc/passwd", "/playground-static/app.py",
                  "/playground-static/"):
        assert httpx.get(url + other, timeout=60).status_code == 404


@pytest.mark.slow
def test_uploads_are_off(page):
    url, _, _ = page
    for i in range(30):
        r = httpx.post(url + "/gradio_api/upload", timeout=60,
                       files={"files": (f"config{i}.json", b"{}" + b" " * (1 << 19))})
        assert r.status_code == 403, r.text
        assert "/" + tempfile.gettempdir().strip("/") not in r.text and "paste" in r.json()["detail"]
    r = httpx.post(url + "/gradio_api/upload?upload_id=x", timeout=60, files={"files": ("a", b"1")})
    assert r.status_code == 403
