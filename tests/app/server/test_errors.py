"""No traceback and no server path reach a client: unexpected failures become an error id.

The page runs in this process on 127.0.0.1 around a fake engine (``tests.support.fakes``),
so these tests need no model.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from app.state.playground import Playground
from tests.support.fakes import FakeEngine
from tests.support.gradio_queue import (ERROR_ID, calculator_payload, final, fn_index, generate_payload, queue_call)
from tests.support.servers import launch


# ---- 3. no traceback, no server path in an error ---------------------------------------------


@pytest.mark.slow
def test_unexpected_errors_reach_clients_as_an_error_id_only(served, caplog):
    """A KeyError naming a server path, raised in the app's path of /generate, the page's
    Generate and a Lessons handler: the client gets a short message with an error id; the
    traceback is in the server log under that id."""
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from tests.support.fakes import SECRET_PATH

    demo, url, pg, eng = served
    eng.script = "crash"
    caplog.set_level(logging.ERROR, logger="app")
    client = Client(url, verbose=False)
    with pytest.raises(AppError) as info:
        client.predict(prompt="Hi", api_name="/generate")
    ids = [ERROR_ID.search(str(info.value))]

    index = fn_index(demo, "on_generate", "prompt")
    text = json.dumps(queue_call(url, index, generate_payload(demo, index, [], Prompt="Hi")))
    ids.append(ERROR_ID.search(text))

    import app.tabs.lessons.calculator

    def broken(*args, **kwargs):
        raise KeyError(SECRET_PATH)

    calc = fn_index(demo, "on_calc")
    app.tabs.lessons.calculator.calculator.calculate, saved = broken, app.tabs.lessons.calculator.calculator.calculate
    try:
        msgs = queue_call(url, calc, calculator_payload(demo, calc, "", file=False))
    finally:
        app.tabs.lessons.calculator.calculator.calculate = saved
    text += json.dumps(msgs)
    ids.append(ERROR_ID.search(json.dumps(final(msgs))))

    assert all(ids), (ids, str(info.value), text[-2000:])
    for leak in (SECRET_PATH, "Traceback", "KeyError", os.getcwd()):
        assert leak not in str(info.value) and leak not in text
    log = caplog.text
    for m in ids:
        assert m.group(1) in log
    assert "Traceback" in log and SECRET_PATH in log
    assert client.session_hash not in log  # the log names the error, never the session
    eng.script = "ok"  # the server is fine afterwards
    assert Client(url, verbose=False).predict(prompt="Hi", api_name="/generate") == "Hello, world!"


def test_every_event_handler_of_the_page_is_guarded(served):
    demo = served[0]
    ours = [f for f in demo.fns.values() if f.fn is not None
            and getattr(f.fn, "__module__", "").startswith("app.")]
    assert len(ours) > 15
    assert all(getattr(f.fn, "guarded", False) for f in ours), \
        [f.fn.__qualname__ for f in ours if not getattr(f.fn, "guarded", False)]


def test_python_m_app_sends_no_server_error_text_to_clients(run_cli, caplog):
    """``python -m app``'s own launch settings: an unexpected exception and an error inside
    Gradio reach the client without server paths, and no event takes a file from a client."""
    import gradio as gr
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from tests.support.fakes import SECRET_PATH

    seen, file_inputs = {}, []

    def probe(demo, eng):
        url = demo.local_url
        eng.script = "crash"
        with pytest.raises(AppError) as info:
            Client(url, verbose=False).predict(prompt="Hi", api_name="/generate")
        seen["crash"] = str(info.value)
        eng.script = "ok"
        calc = fn_index(demo, "on_calc")  # a server path where the calculator takes text
        seen["upload"] = json.dumps(queue_call(url, calc, calculator_payload(demo, calc, "/etc/passwd")))
        file_inputs.extend(c for c in demo.fns[calc].inputs if isinstance(c, gr.File))

    caplog.set_level(logging.ERROR, logger="app")
    code, _ = run_cli(probe)
    assert code == 0
    assert ERROR_ID.search(seen["crash"]), seen
    for text in seen.values():
        assert SECRET_PATH not in text and os.getcwd() not in text and "Traceback" not in text
    assert not file_inputs  # uploads are off: no event takes a file path from a client
    assert "root:" not in seen["upload"]  # /etc/passwd was not read


def test_page_generate_ends_with_an_error_id_and_restored_buttons(tmp_path, caplog):
    from app.tabs.playground import handlers

    pg = Playground(FakeEngine("crash"), trace_dir=tmp_path, monitor=False)
    notes = []
    frames = list(handlers.generate(pg, "sess", "chat", "Hi", [], "", 0.7, 1.0, 0, 0.0, 1.0, 16, -1, True,
                                    notify=notes.append))
    assert frames[-1]["busy"] is False and ERROR_ID.search(frames[-1]["status"])
    assert notes and ERROR_ID.search(notes[0]) and "weights.bin" not in notes[0]
    assert ERROR_ID.search(notes[0]).group(1) in caplog.text
