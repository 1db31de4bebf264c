"""Calling the page's events the way any web client can: Gradio's queue API
(``/gradio_api/queue/join`` with an event's ``fn_index``) and REST route
(``/gradio_api/call/<name>``), plus payload builders for the page's events."""

from __future__ import annotations

import json
import re
import secrets

import httpx

ERROR_ID = re.compile(r"internal error \(request (err-[0-9a-f]{8})\); details are in the server log")
"""An unexpected failure as a client sees it (the id names the traceback in the server log)."""


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


def calculator_payload(demo, index: int, path: str, file: bool = True) -> list:
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


def generate_payload(demo, index: int, history: list, **values) -> list:
    """The page's Generate inputs: its components' start values, ``history`` for the chat and
    ``values`` by component label prefix (``"Prompt"``) or, for the sidebar's settings value, by
    setting name (``temperature=0``, :mod:`app.tabs.playground.settings`)."""
    import gradio as gr

    from app.tabs.playground import settings

    data = []
    for comp in demo.fns[index].inputs:
        label = getattr(comp, "label", None) or ""
        hit = [v for k, v in values.items() if label.startswith(k)]
        if getattr(comp, "elem_id", None) == "settings":
            data.append(settings.replaced(comp.value, **{k: v for k, v in values.items() if k in settings.NAMES}))
        elif hit:
            data.append(hit[0])
        elif isinstance(comp, gr.Chatbot):
            data.append(history)
        elif isinstance(comp, gr.State):
            data.append(None)
        else:
            data.append(comp.value)
    return data


def rest_call(url: str, data: list, name: str = "generate") -> tuple[str, str]:
    """POST ``/gradio_api/call/<name>`` with ``{"data": data}``, then read the result stream;
    returns (last event name, its data)."""
    r = httpx.post(url + f"gradio_api/call/{name}", content=json.dumps({"data": data}).encode(),
                   headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 200, r.text
    text = httpx.get(url + f"gradio_api/call/{name}/{r.json()['event_id']}", timeout=30).text
    events = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    datas = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    return events[-1], datas[-1]


def urls_in(msg, keep) -> list[str]:
    """Every ``url`` value anywhere in a queue message for which ``keep(url)`` is true."""
    out = []

    def walk(x):
        if isinstance(x, dict):
            u = x.get("url")
            if isinstance(u, str) and keep(u):
                out.append(u)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(msg)
    return out


def file_urls(msg) -> list[str]:
    """Every served-file URL (``/file=``) anywhere in a queue message."""
    return urls_in(msg, lambda u: "/file=" in u)
