"""What a web client can and cannot make the server do, tried over HTTP the way an attacker
would: ``POST /gradio_api/queue/join`` with any event's ``fn_index`` (the page's hidden events
too), ``/gradio_api/call/<name>``, and the queue's event stream.

The page runs in this process on 127.0.0.1 around a fake engine (``test_app_fakes``), so these
tests need no model.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import stat
from pathlib import Path

import httpx
import pytest

from app.service import Playground
from test_app_fakes import FakeEngine, launch, make_events, make_output, wait_until


# ---- helpers -------------------------------------------------------------------------------
def fn_index(demo, name: str, input_id: str | None = None) -> int:
    """The ``fn_index`` of the page event whose handler is called ``name`` (and, when given,
    that takes the component with elem_id ``input_id``)."""
    hits = [i for i, f in demo.fns.items() if getattr(f.fn, "__name__", None) == name
            and (input_id is None or any(getattr(c, "elem_id", None) == input_id for c in f.inputs))]
    assert hits, f"no event runs {name}"
    return hits[0]


def queue_call(url: str, index: int, data: list, session_hash: str | None = None,
               timeout: float = 60.0) -> list[dict]:
    """Join the queue with ``data`` for event ``index`` and read the queue's stream until that
    event completes; returns every message of the event (``process_generating``...)."""
    session_hash = session_hash or secrets.token_hex(8)
    r = httpx.post(url + "gradio_api/queue/join", timeout=timeout,
                   json={"data": data, "fn_index": index, "session_hash": session_hash,
                         "event_data": None, "trigger_id": None})
    assert r.status_code == 200, r.text
    event_id = r.json()["event_id"]
    msgs = []
    with httpx.stream("GET", url + "gradio_api/queue/data", params={"session_hash": session_hash},
                      timeout=timeout) as resp:
        for line in resp.iter_lines():
            if not line.startswith("data:"):
                continue
            msg = json.loads(line[5:])
            if msg.get("event_id") not in (None, event_id):
                continue
            msgs.append(msg)
            if msg.get("msg") == "process_completed":
                break
    return msgs


def final(msgs: list[dict]) -> dict:
    """The ``output`` of the event's ``process_completed`` message."""
    done = [m for m in msgs if m.get("msg") == "process_completed"]
    assert done, msgs
    return done[-1]["output"]


@pytest.fixture
def served(tmp_path):
    """``(demo, url, pg, engine)``: the whole page on a fake engine."""
    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path / "traces", monitor=False)
    demo, url = launch(pg)
    yield demo, url, pg, eng
    demo.close()
    pg.close()


# ---- 1. no server-side path from a client ----------------------------------------------------
def _calculator_payload(demo, index: int, path: str, file: bool = True) -> list:
    """The calculator event's inputs with ``path`` in every slot that takes text (and, with
    ``file``, in every file slot)."""
    import gradio as gr

    data = []
    for comp in demo.fns[index].inputs:
        if isinstance(comp, gr.File):
            data.append({"path": path, "orig_name": "config.json", "meta": {"_type": "gradio.FileData"}}
                        if file else None)
        elif isinstance(comp, (gr.Textbox, gr.Code)):
            data.append(path)
        else:
            data.append(comp.value)
    return data


def test_calculator_reads_no_server_file_through_the_queue_api(served, tmp_path):
    """The calculator's hidden event, called with server paths in every text or file input:
    the answer for an existing JSON file equals the answer for a missing one, and shows none
    of the file's fields."""
    demo, url, _, _ = served
    secret_dir = tmp_path / "secretmodelname"
    secret_dir.mkdir()
    cfg = secret_dir / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 77, "num_attention_heads": 8, "hidden_size": 512,
                               "intermediate_size": 1024, "vocab_size": 1000,
                               "max_position_embeddings": 4242}))
    index = fn_index(demo, "on_calc")
    outputs = {}
    for path in (str(cfg), str(secret_dir / "missing.json"), "/etc/passwd"):
        out = final(queue_call(url, index, _calculator_payload(demo, index, path)))
        if isinstance(out, dict):  # timings differ from call to call
            out = {k: v for k, v in out.items() if "duration" not in k}
        outputs[path] = json.dumps(out)
        assert "secretmodelname" not in outputs[path] and "4,242" not in outputs[path]
    first = outputs[str(cfg)]
    assert all(o == first for o in outputs.values()), outputs


def test_calculator_takes_a_pasted_config_and_uploads_are_off(served):
    """The calculator's own way in is pasted text; Gradio's upload route is refused (the page
    needs no upload, and Gradio would keep each one and answer with its server path)."""
    demo, url, _, _ = served
    config = {"num_hidden_layers": 3, "num_attention_heads": 4, "hidden_size": 64, "intermediate_size": 128,
              "vocab_size": 100, "max_position_embeddings": 512, "_name_or_path": "pasted-tiny"}
    r = httpx.post(url + "gradio_api/upload", files={"files": ("config.json", json.dumps(config).encode())})
    assert r.status_code == 403 and "paste" in r.json()["detail"]
    index = fn_index(demo, "on_calc")
    data = _calculator_payload(demo, index, "", file=False)
    slot = [i for i, c in enumerate(demo.fns[index].inputs) if getattr(c, "elem_id", "") == "lesson-calc-json"][0]
    data[slot] = json.dumps(config)
    out = json.dumps(final(queue_call(url, index, data)))
    assert "pasted-tiny" in out and "H200" in out


def _generate_payload(demo, index: int, history: list, **values) -> list:
    """The page's Generate inputs: its components' start values, ``history`` for the chat and
    ``values`` by component label prefix (``"Prompt"``, ``"temperature"``...)."""
    import gradio as gr

    data = []
    for comp in demo.fns[index].inputs:
        label = getattr(comp, "label", None) or ""
        hit = [v for k, v in values.items() if label.startswith(k)]
        if hit:
            data.append(hit[0])
        elif isinstance(comp, gr.Chatbot):
            data.append(history)
        elif isinstance(comp, gr.State):
            data.append(None)
        else:
            data.append(comp.value)
    return data


def test_chat_history_from_the_client_cannot_reach_server_files(served, tmp_path):
    """A forged chat history naming a server file (as a Chatbot file or component message)
    never makes the page serve that file, nor say whether it exists: the conversation is the
    session's own, kept on the server."""
    demo, url, _, eng = served
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    index = fn_index(demo, "on_generate", "prompt")
    forged = {"component": lambda p: {"type": "component", "component": "file", "value": {"path": p},
                                      "constructor_args": {}, "props": {}},
              "file": lambda p: {"type": "file", "file": {"path": p, "meta": {"_type": "gradio.FileData"}}}}
    for kind, make in forged.items():
        answers = []
        for path in (str(secret), str(tmp_path / "missing.txt"), "/etc/passwd"):
            history = [{"role": "user", "content": [make(path)]},
                       {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}]
            msgs = queue_call(url, index, _generate_payload(demo, index, history, Prompt="Hi"))
            text = json.dumps(msgs)
            assert "TOP-SECRET" not in text and os.getcwd() not in text
            for m in msgs:  # no file of the server is offered for download
                for f in _file_urls(m):
                    assert "TOP-SECRET" not in httpx.get(f if "://" in f else url.rstrip("/") + f).text
            done = [m for m in msgs if m.get("msg") == "process_completed"][-1]
            answers.append((done.get("success"), done["output"].get("error"), path in text))
        assert answers[0] == answers[1] == answers[2], (kind, answers)
    for prompt, *_ in eng.submitted:  # nothing of the forged history reached the engine
        assert prompt == [{"role": "user", "content": "Hi"}]


def test_the_conversation_is_kept_per_session_on_the_server(served):
    demo, url, _, eng = served
    index = fn_index(demo, "on_generate", "prompt")
    session = secrets.token_hex(8)
    queue_call(url, index, _generate_payload(demo, index, [], Prompt="First"), session)
    queue_call(url, index, _generate_payload(demo, index, [], Prompt="Second"), session)
    queue_call(url, index, _generate_payload(demo, index, [], Prompt="Elsewhere"))
    queue_call(url, fn_index(demo, "on_clear"), [], session)  # Clear starts a new conversation
    queue_call(url, index, _generate_payload(demo, index, [], Prompt="Third"), session)
    assert [p for p, *_ in eng.submitted] == [
        [{"role": "user", "content": "First"}],
        [{"role": "user", "content": "First"}, {"role": "assistant", "content": "Hello, world!"},
         {"role": "user", "content": "Second"}],
        [{"role": "user", "content": "Elsewhere"}],
        [{"role": "user", "content": "Third"}]]


def _file_urls(msg) -> list[str]:
    out = []

    def walk(x):
        if isinstance(x, dict):
            u = x.get("url")
            if isinstance(u, str) and "/file=" in u:
                out.append(u)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(msg)
    return out


# ---- 3. no traceback, no server path in an error ---------------------------------------------
ERROR_ID = re.compile(r"internal error \(request (err-[0-9a-f]{8})\); details are in the server log")


def test_unexpected_errors_reach_clients_as_an_error_id_only(served, caplog):
    """A KeyError naming a server path, raised in the app's path of /generate, the page's
    Generate and a Lessons handler: the client gets a short message with an error id; the
    traceback is in the server log under that id."""
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from test_app_fakes import SECRET_PATH

    demo, url, pg, eng = served
    eng.script = "crash"
    caplog.set_level(logging.ERROR, logger="app")
    client = Client(url, verbose=False)
    with pytest.raises(AppError) as info:
        client.predict(prompt="Hi", api_name="/generate")
    ids = [ERROR_ID.search(str(info.value))]

    index = fn_index(demo, "on_generate", "prompt")
    text = json.dumps(queue_call(url, index, _generate_payload(demo, index, [], Prompt="Hi")))
    ids.append(ERROR_ID.search(text))

    import app.lessons

    def broken(*args, **kwargs):
        raise KeyError(SECRET_PATH)

    calc = fn_index(demo, "on_calc")
    app.lessons.calculator.calculate, saved = broken, app.lessons.calculator.calculate
    try:
        msgs = queue_call(url, calc, _calculator_payload(demo, calc, "", file=False))
    finally:
        app.lessons.calculator.calculate = saved
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


@pytest.fixture
def run_cli(monkeypatch, tmp_path):
    """Run ``app.cli.main(argv)`` on a fake engine; ``probe(demo, engine)`` runs while it serves
    (in place of blocking). Returns ``(exit code, fake engine)``."""
    import tempfile

    import gradio as gr

    import engine as engine_pkg
    from test_app_fakes import free_port

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the server's temp folders land here
    monkeypatch.delenv("GRADIO_TEMP_DIR", raising=False)
    fake = FakeEngine()
    monkeypatch.setattr(engine_pkg, "load_model", lambda *a, **k: object())
    monkeypatch.setattr(engine_pkg, "LLMEngine", lambda loaded, **kw: fake)

    def run(probe, *argv):
        from app.cli import main

        def block_thread(demo):
            try:
                probe(demo, fake)
            finally:
                demo.close()

        monkeypatch.setattr(gr.Blocks, "block_thread", block_thread)
        return main(["--port", str(free_port()), *argv]), fake

    return run


def test_python_m_app_sends_no_server_error_text_to_clients(run_cli, caplog):
    """``python -m app``'s own launch settings: an unexpected exception and an error inside
    Gradio (a forged upload path) reach the client without server paths."""
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    import gradio as gr

    from test_app_fakes import SECRET_PATH

    seen, file_inputs = {}, []

    def probe(demo, eng):
        url = demo.local_url
        eng.script = "crash"
        with pytest.raises(AppError) as info:
            Client(url, verbose=False).predict(prompt="Hi", api_name="/generate")
        seen["crash"] = str(info.value)
        eng.script = "ok"
        calc = fn_index(demo, "on_calc")  # a server path where the calculator takes text
        seen["upload"] = json.dumps(queue_call(url, calc, _calculator_payload(demo, calc, "/etc/passwd")))
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
    from app import handlers

    pg = Playground(FakeEngine("crash"), trace_dir=tmp_path, monitor=False)
    notes = []
    frames = list(handlers.generate(pg, "sess", "chat", "Hi", [], "", 0.7, 1.0, 0, 0.0, 1.0, 16, -1, True,
                                    notify=notes.append))
    assert frames[-1]["busy"] is False and ERROR_ID.search(frames[-1]["status"])
    assert notes and ERROR_ID.search(notes[0]) and "weights.bin" not in notes[0]
    assert ERROR_ID.search(notes[0]).group(1) in caplog.text


# ---- 7. every field checked up front, the REST route fills in defaults ---------------------
@pytest.mark.parametrize("kwargs,message", [
    ({"prompt": "Hi \ud800 there"}, r"prompt contains a lone surrogate \(U\+D800\) at character 3"),
    ({"prompt": "Hi", "system_prompt": "Be \udfff"}, r"system_prompt contains a lone surrogate"),
    ({"prompt": "Hi", "temperature": 10**400}, r"temperature must be a number of a sensible size, "
                                               r"got a 401-digit integer"),
    ({"prompt": "Hi", "seed": 10**400}, r"seed must be an integer in \[-2\*\*63, 2\*\*63\)"),
    ({"prompt": "Hi", "max_tokens": "12"}, r"max_tokens must be an integer, got '12'"),
    ({"prompt": "Hi", "system_prompt": 5}, r"system_prompt must be a string, got int"),
    ({"prompt": "Hi", "system_prompt": {"role": "system"}}, r"system_prompt must be a string, got dict"),
    ({"prompt": ["Hi"]}, r"prompt must be a string, got list"),
    ({"prompt": "Hi", "raw": "no"}, r"raw must be true or false, got 'no'"),
    ({"prompt": "Hi", "raw": 1}, r"raw must be true or false, got 1"),
    ({"prompt": "Hi", "use_kv_cache": "off"}, r"use_kv_cache must be true or false, got 'off'"),
    ({"prompt": "Hi", "use_kv_cache": None}, r"use_kv_cache must be true or false, got None"),
])
def test_api_refuses_bad_fields_up_front_naming_them(served, kwargs, message):
    """Sent as raw JSON (``"\\ud800"`` escapes included) to ``/gradio_api/call/generate``."""
    from app.server import api_defaults

    demo, url, _, eng = served
    names = ["prompt", "temperature", "top_p", "top_k", "repetition_penalty", "max_tokens", "seed", "min_p",
             "system_prompt", "raw", "use_kv_cache"]
    data = [kwargs.get(n, d) for n, d in zip(names, api_defaults(demo)["generate"])]
    event, text = _rest(url, data)
    assert event == "error" and re.search(message, json.loads(text)["error"]), text
    assert "TextEncodeInput" not in text and "int too large" not in text and len(text) < 300
    assert not eng.submitted  # refused before the engine


def test_api_takes_true_and_false_strictly(served):
    from gradio_client import Client

    _, url, _, eng = served
    client = Client(url, verbose=False)
    client.predict(prompt="Hi", raw="false", use_kv_cache="false", api_name="/generate")
    client.predict(prompt="Hi", raw="TRUE", use_kv_cache=True, api_name="/generate")
    assert [(raw, kv) for _, _, raw, kv in eng.submitted] == [(False, False), (True, True)]
    assert eng.submitted[0][0] == [{"role": "user", "content": "Hi"}]  # "false" is not raw


@pytest.mark.parametrize("over,message", [
    ({"message": "\ud800"}, "prompt contains a lone surrogate"),
    ({"system_prompt": ["x"]}, "system_prompt must be a string"),
    ({"use_kv_cache": "maybe"}, "use_kv_cache must be true or false"),
    ({"temperature": 10**400}, "temperature must be a number of a sensible size"),
    ({"mode": "other"}, "mode must be chat or raw"),
])
def test_page_generate_refuses_bad_fields_naming_them(tmp_path, over, message):
    from app import handlers

    eng = FakeEngine()
    pg = Playground(eng, trace_dir=tmp_path, monitor=False)
    args = dict(mode="chat", message="Hi", history=[], system_prompt="", temperature=0.7, top_p=1.0,
                top_k=0, min_p=0.0, repetition_penalty=1.0, max_tokens=8, seed=-1, use_kv_cache=True)
    args.update(over)
    notes = []
    frames = list(handlers.generate(pg, "sess", notify=notes.append, **args))
    assert len(frames) == 1 and frames[0]["busy"] is False
    assert notes and message in notes[0] and len(notes[0]) < 300
    assert not eng.submitted


def _rest(url: str, data: list, name: str = "generate") -> tuple[str, str]:
    """POST ``/gradio_api/call/<name>`` with ``{"data": data}``, then read the result stream;
    returns (last event name, its data)."""
    r = httpx.post(url + f"gradio_api/call/{name}", content=json.dumps({"data": data}).encode(),
                   headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 200, r.text
    text = httpx.get(url + f"gradio_api/call/{name}/{r.json()['event_id']}", timeout=30).text
    events = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    datas = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    return events[-1], datas[-1]


def test_rest_call_fills_in_the_optional_arguments_left_out(served):
    _, url, _, eng = served
    event, data = _rest(url, ["Hi"])
    assert event == "complete" and json.loads(data) == ["Hello, world!"]
    event, data = _rest(url, ["Hi", 0, 1.0, 0, 1.0, 7])  # prompt .. max_tokens, the rest defaults
    assert event == "complete"
    (_, p1, raw1, kv1), (_, p2, raw2, kv2) = eng.submitted
    assert (p1.temperature, p1.top_p, p1.top_k, p1.max_tokens, p1.seed) == (0.7, 1.0, 0, 256, None)
    assert (p2.temperature, p2.max_tokens) == (0.0, 7) and raw1 is raw2 is False and kv1 is kv2 is True
    event, data = _rest(url, [])  # nothing at all: the missing prompt is named
    assert event == "error" and json.loads(data)["error"] == "prompt is required"
    assert _rest(url, [], "stats")[0] == "complete"


# ---- 8. trace files: private, deleted with their session and at shutdown ----------------------
def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_trace_files_are_private_and_deleted_with_their_session(tmp_path):
    from app import handlers

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
        index = fn_index(demo, "on_generate", "prompt")
        session = secrets.token_hex(8)
        with httpx.stream("GET", url + f"gradio_api/heartbeat/{session}", timeout=30) as beat:
            alive = beat.iter_lines()  # kept: dropping the iterator would close the stream
            assert next(alive) == "data: ALIVE"
            msgs = queue_call(url, index, _generate_payload(demo, index, [], Prompt="Hi"), session)
            links = sorted({u for m in msgs for u in _file_urls(m)})
            assert len(links) == 2, links
            files = [Path(u.split("/file=", 1)[1]) for u in links]
            for f in files:  # served where they are: inside the private folder, no second copy
                assert f.is_relative_to(gradio_tmp) and _mode(f) == 0o600 and _mode(f.parent) == 0o700
            assert "Hello, world!" in httpx.get([u for u in links if u.endswith(".json")][0]).text
            other = queue_call(url, index, _generate_payload(demo, index, [], Prompt="Hi"))
            other_files = [Path(u.split("/file=", 1)[1]) for m in other for u in _file_urls(m)]
        # the heartbeat closed: Gradio runs demo.unload for the session
        assert wait_until(lambda: not any(f.exists() for f in files), 30), files
        assert all(httpx.get(u).status_code in (403, 404) for u in links)
        assert all(f.exists() for f in other_files)  # another session's traces stay
        os.kill(os.getpid(), signal.SIGTERM)  # like docker stop

    before = signal.getsignal(signal.SIGTERM)
    code, eng = run_cli(probe)
    assert code == 0 and eng.stopped
    assert signal.getsignal(signal.SIGTERM) == before
    assert not seen["gradio_tmp"].exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("llm-playground")] == []
    assert "GRADIO_TEMP_DIR" not in os.environ


# ---- 2. prefix cache: a secret salt per session unless shared ----------------------------------
class PrefixFake(FakeEngine):
    def stats(self):
        return {**super().stats(), "batching": True, "blocks_total": 64, "blocks_used": 0, "blocks_free": 64,
                "blocks_cached": 8, "block_size": 16, "preemptions": 0, "prefix_hit_rate": 0.42}


def test_each_session_gets_its_own_secret_salt(tmp_path):
    import inspect

    from app import handlers

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

    from app.lessons import kv_live

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
        def submit(self, prompt, params, raw=False, use_kv_cache=True):
            return super().submit(prompt, params, raw, use_kv_cache)

    caplog.set_level(logging.WARNING, logger="app")
    pg = Playground(OldEngine(), trace_dir=tmp_path, monitor=False)
    assert pg.prefix_cache_shared and "every user shares its prefix cache" in caplog.text
    assert pg.engine_kwargs("alice") == {}
    pg.submit("alice", "Hi", handlers_params())


def handlers_params():
    from app.handlers import make_params

    return make_params(0.7, 1.0, 0, 0.0, 1.0, 8, -1)


@pytest.mark.parametrize("shared", [False, True])
def test_stats_show_the_prefix_hit_rate_only_when_the_cache_is_shared(tmp_path, shared):
    from gradio_client import Client

    from app import handlers

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
    html = handlers.batch_frame(pg, "alice")["batch_stats"]
    assert ("prefix-cache hits" in html) is shared and ("42%" in html) is shared
    assert ("shared by every user" in page) is shared
    assert ("Your prefix cache is your own" in page) is not shared


@pytest.mark.parametrize("argv,salted", [((), True), (("--shared-prefix-cache",), False)])
def test_python_m_app_salts_by_default_and_shares_on_request(run_cli, argv, salted):
    from gradio_client import Client

    def probe(demo, eng):
        Client(demo.local_url, verbose=False).predict(prompt="Hi", api_name="/generate")
        stats = Client(demo.local_url, verbose=False).predict(api_name="/stats")
        assert stats["engine"]["prefix_cache_shared"] is not salted

    _, eng = run_cli(probe, *argv)
    assert len(eng.salts) == 1 and isinstance(eng.salts[0], str) is salted


# ---- 9. session ids are never logged -----------------------------------------------------------
def test_app_code_never_logs_or_prints_a_session_id():
    """No print or logging call in app/ is given a session id (``session_hash``, ``session_id``,
    ``session``): a logged id would let anyone who reads the log act as that session."""
    import ast

    root = Path(__file__).resolve().parents[1] / "app"
    names = {"session_hash", "session_id", "session"}
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if called not in ("print", "debug", "info", "warning", "error", "exception", "critical", "log"):
                continue
            used = {n.id for a in node.args + [k.value for k in node.keywords] for n in ast.walk(a)
                    if isinstance(n, ast.Name)}
            used |= {n.attr for a in node.args + [k.value for k in node.keywords] for n in ast.walk(a)
                     if isinstance(n, ast.Attribute)}
            assert not used & names, f"{path.name}:{node.lineno} logs a session id"


def test_old_traces_are_pruned_with_their_empty_session_folders(tmp_path, monkeypatch):
    import app.service

    monkeypatch.setattr(app.service, "KEEP_TRACES", 2)
    pg = Playground(FakeEngine(), trace_parent=tmp_path, monitor=False)
    events = make_events()
    for i, session in enumerate(("a", "b", "c")):
        for path in pg.write_trace(make_output(events), events, session):
            os.utime(path, (1000 + i, 1000 + i))  # oldest first, whatever the clock's resolution
    folders = [p for p in pg.trace_dir.iterdir()]
    assert len(list(pg.trace_dir.glob("*/trace_*"))) == 4 and len(folders) == 2
    assert set(pg._trace_dirs) == {"b", "c"}
    pg.close()


@pytest.mark.parametrize("over,message", [
    ({"prompt": "\ud800"}, "prompt contains a lone surrogate"),
    ({"temperature": 10**400}, "temperature must be a number of a sensible size"),
    ({"seed": "7"}, "seed must be an integer"),
    ({"top_k": 2.5}, "top_k must be an integer"),
])
def test_sampling_explorer_refuses_bad_fields_naming_them(over, message):
    import gradio as gr

    from app.lessons import explorer_generate

    eng = FakeEngine()
    args = dict(prompt="Hi", temperature=0.8, top_k=0, top_p=1.0, min_p=0.0, seed=0)
    args.update(over)
    with pytest.raises(gr.Error, match=message):
        explorer_generate(eng, **args)
    assert not eng.submitted
