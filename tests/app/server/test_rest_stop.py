"""``/stop`` works over plain REST and from ``gradio_client``, as the README shows, and a
``GET`` of an event id the queue does not hold gets a whole 404 instead of a dropped
connection. The page runs as ``python -m app`` in a child process."""

from __future__ import annotations

import secrets
import threading
import time

import httpx
import pytest

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

from tests.support.pages import page_server  # noqa: E402

COUNT = ["1, 2, 3, 4, 5,", 0, 1.0, 0, 1.0, 300, -1, 0.0, "", True]  # raw, greedy, 300 tokens


@pytest.fixture(scope="module")
def page():
    with page_server() as served:
        yield served


def sse(url: str, path: str, lines: list, timeout: float = 180) -> None:
    """Read the event stream at ``path`` into ``lines`` (raises if the connection drops)."""
    with httpx.stream("GET", url + path, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            lines.append(line)


def rest_stop(url: str, session: str) -> list[str]:
    r = httpx.post(url + "/gradio_api/call/stop", json={"data": [], "session_hash": session},
                   timeout=60)
    assert r.status_code == 200, r.text
    lines: list[str] = []
    sse(url, f"/gradio_api/call/stop/{r.json()['event_id']}", lines, timeout=60)
    return lines


@pytest.mark.slow
def test_rest_stop_ends_a_rest_generation_of_its_session(page):
    url, _, log = page
    session = secrets.token_hex(8)
    r = httpx.post(url + "/gradio_api/call/generate", json={"data": COUNT, "session_hash": session},
                   timeout=60)
    gen: list[str] = []
    errors: list[BaseException] = []

    def follow():
        try:
            sse(url, f"/gradio_api/call/generate/{r.json()['event_id']}", gen)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    end = time.time() + 180
    while sum(x.startswith("event: generating") for x in gen) < 3 and time.time() < end:
        time.sleep(0.05)
    assert [x for x in rest_stop(url, session) if x] == ["event: complete", "data: [true]"]
    t.join(120)
    assert not errors and "event: complete" in gen, (errors, gen[-4:])
    assert len(gen[gen.index("event: complete") + 1]) < 600  # far fewer than 300 tokens
    assert "Traceback" not in open(log).read()


@pytest.mark.slow
def test_rest_stop_ends_a_gradio_client_job_which_then_completes(page):
    url, _, log = page
    client = Client(url + "/", verbose=False)
    job = client.submit(*COUNT[:6], api_name="/generate")  # chat, greedy, 300 tokens
    end = time.time() + 180
    while len(job.outputs()) < 3 and time.time() < end:
        time.sleep(0.05)
    assert [x for x in rest_stop(url, client.session_hash) if x] == ["event: complete",
                                                                     "data: [true]"]
    text = job.result(timeout=60)  # the job completes: its messages were left to it
    assert 0 < len(text) < 600
    assert client.predict(api_name="/stop") is False  # the README's call: nothing left to stop
    assert "Traceback" not in open(log).read()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["generate", "stop", "stats"])
def test_unknown_event_id_gets_a_whole_404(page, name):
    url, _, _ = page
    r = httpx.get(url + f"/gradio_api/call/{name}/{secrets.token_hex(16)}", timeout=30)
    assert r.status_code == 404 and "unknown" in r.json()["detail"]
