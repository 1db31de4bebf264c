"""The events one click of the page runs, for clients of the queue API (no tests here)."""

from __future__ import annotations

from tests.support.gradio_queue import generate_payload, queue_call


def generate_chain(demo) -> list[int]:
    """The ``fn_index`` of every event a Generate click runs, in order: the click's own event,
    then each ``.then`` after it."""
    button = [b for b in demo.blocks.values() if getattr(b, "value", None) == "Generate"
              and type(b).__name__ == "Button"][0]
    chain = [i for i, f in demo.fns.items()
             if any(t[0] == button._id and t[1] == "click" for t in f.targets)][:1]
    assert chain, "no event runs on a Generate click"
    while True:
        after = [i for i, f in demo.fns.items() if f.trigger_after == chain[-1]]
        if not after:
            return chain
        chain.append(after[0])


def run_generate(demo, url: str, session: str, **values) -> list[dict]:
    """Every queue message of one Generate click's events, run in order in ``session`` with
    :func:`tests.support.gradio_queue.generate_payload`'s inputs (``values`` by label)."""
    msgs = []
    for index in generate_chain(demo):
        msgs += queue_call(url, index, generate_payload(demo, index, [], **values), session)
    return msgs
