"""What a web client can and cannot make the server do, tried over HTTP the way an attacker
would: ``POST /gradio_api/queue/join`` with any event's ``fn_index`` (the page's hidden events
too), ``/gradio_api/call/<name>``, and the queue's event stream. This file: no server-side
path from a client, and no session id in the log; the errors, fields, traces and prefix-cache
salts have their own files beside it.

The page runs in this process on 127.0.0.1 around a fake engine (``tests.support.fakes``),
so these tests need no model.
"""

from __future__ import annotations

import json
import logging
import os
import secrets

import httpx
import pytest

from tests.support.gradio_queue import (calculator_payload, file_urls, final, fn_index, generate_payload, queue_call)
from tests.support.paths import REPO


# ---- 1. no server-side path from a client ----------------------------------------------------
@pytest.mark.slow
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
        out = final(queue_call(url, index, calculator_payload(demo, index, path)))
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
    data = calculator_payload(demo, index, "", file=False)
    slot = [i for i, c in enumerate(demo.fns[index].inputs) if getattr(c, "elem_id", "") == "lesson-calc-json"][0]
    data[slot] = json.dumps(config)
    out = json.dumps(final(queue_call(url, index, data)))
    assert "pasted-tiny" in out and "H200" in out


@pytest.mark.slow
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
            msgs = queue_call(url, index, generate_payload(demo, index, history, Prompt="Hi"))
            text = json.dumps(msgs)
            assert "TOP-SECRET" not in text and os.getcwd() not in text
            for m in msgs:  # no file of the server is offered for download
                for f in file_urls(m):
                    assert "TOP-SECRET" not in httpx.get(f if "://" in f else url.rstrip("/") + f).text
            done = [m for m in msgs if m.get("msg") == "process_completed"][-1]
            answers.append((done.get("success"), done["output"].get("error"), path in text))
        assert answers[0] == answers[1] == answers[2], (kind, answers)
    for prompt, *_ in eng.submitted:  # nothing of the forged history reached the engine
        assert prompt == [{"role": "user", "content": "Hi"}]


@pytest.mark.slow
def test_the_conversation_is_kept_per_session_on_the_server(served):
    demo, url, _, eng = served
    index = fn_index(demo, "on_generate", "prompt")  # its last frame keeps the turn in the session's state
    session = secrets.token_hex(8)

    def turn(prompt, sess=None):
        sess = sess or secrets.token_hex(8)
        queue_call(url, index, generate_payload(demo, index, [], Prompt=prompt), sess)

    turn("First", session)
    turn("Second", session)
    turn("Elsewhere")
    queue_call(url, fn_index(demo, "on_clear"), [], session)  # Clear starts a new conversation
    turn("Third", session)
    assert [p for p, *_ in eng.submitted] == [
        [{"role": "user", "content": "First"}],
        [{"role": "user", "content": "First"}, {"role": "assistant", "content": "Hello, world!"},
         {"role": "user", "content": "Second"}],
        [{"role": "user", "content": "Elsewhere"}],
        [{"role": "user", "content": "Third"}]]


# ---- 9. session ids are never logged -----------------------------------------------------------
def test_app_code_never_logs_or_prints_a_session_id():
    """No print or logging call in app/ is given a session id (``session_hash``, ``session_id``,
    ``session``): a logged id would let anyone who reads the log act as that session."""
    import ast

    root = REPO / "app"
    names = {"session_hash", "session_id", "session"}
    for path in root.rglob("*.py"):
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
