"""A run's two buttons (Generate or Run both, and Stop) switched in the browser, not by Gradio
events.

Switching them from the server took two events per run (a start step before the stream, an end
step after it), each about four messages of 4-14 ms of the browser's main thread: about 100 ms
of a page's CPU per run, measured on a 1-token answer (docs/performance.md, "A light page").
Here the run's own event switches them in its ``js`` (run in the browser at the click, before
the request leaves) and a browser-only step after the stream switches them back, whether the
stream ended or failed. Gradio never changes these two buttons' ``interactive`` (Stop is built
disabled), so this is the only switch and the two never disagree.
"""

from __future__ import annotations

_SWITCH = r"""((running) => {
  const button = (id) => { const el = document.getElementById(id);
                           return el && (el.tagName === 'BUTTON' ? el : el.querySelector('button')); };
  const run = button('__RUN__'), stop = button('__STOP__');
  if (run) run.disabled = running;
  if (stop) stop.disabled = !running;
})"""


def switch_js(run_id: str, stop_id: str) -> str:
    """A JS expression: a function of ``running`` that disables the button with element id
    ``run_id`` and enables ``stop_id`` while running, and the other way round after."""
    return _SWITCH.replace("__RUN__", run_id).replace("__STOP__", stop_id)


def start_js(run_id: str, stop_id: str) -> str:
    """The run event's ``js``: switches the buttons to running and hands Gradio the inputs
    unchanged (what an event's ``js`` returns is sent as its inputs)."""
    return f"(...inputs) => {{ {switch_js(run_id, stop_id)}(true); return inputs; }}"


def end_js(run_id: str, stop_id: str) -> str:
    """A browser-only step's ``js`` after the run's event: the buttons back to idle."""
    return f"() => {{ {switch_js(run_id, stop_id)}(false); }}"


def wire_run(event, run_id: str, stop_id: str) -> None:
    """Chain the browser-only step that switches the buttons back after ``event`` (the run's
    event listener's return value, wired with ``js=start_js(run_id, stop_id)``)."""
    event.then(None, None, None, js=end_js(run_id, stop_id), api_visibility="private", queue=False)
