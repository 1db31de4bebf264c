"""What the Lessons' figures and messages share: colours, the figure layout, the error line.

No torch, no Gradio.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

ON, OFF, PREFILL, DECODE = "#2E86AB", "#E4572E", "#E4572E", "#2E86AB"
HEIGHT = 340


def layout(fig: go.Figure, title: str, x: str, y: str) -> go.Figure:
    """Title, size, margins and legend of a lesson figure; axis titles ``x`` and ``y``."""
    fig.update_layout(title={"text": title, "font": {"size": 15}, "x": 0.01}, template="plotly_white",
                      height=HEIGHT, margin={"l": 60, "r": 20, "t": 50, "b": 50},
                      legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"})
    fig.update_xaxes(title_text=x)
    fig.update_yaxes(title_text=y)
    return fig


def elem(key: str) -> dict:
    """``elem_id`` of a lesson component: ``"lesson-"`` + ``key`` with ``-`` for ``_``."""
    return {"elem_id": "lesson-" + key.replace("_", "-")}


def running_html(what: str) -> str:
    """The status line while a run goes (replacing the last run's conclusion)."""
    return f"<i>Running the {what}…</i>"


def keep(value):
    """A handler's ``None`` ("unchanged") as ``gr.skip()``, anything else as it is."""
    import gradio as gr

    return gr.skip() if value is None else value


def error_html(message: str) -> str:
    """A red warning line for a lesson's status (the message escaped)."""
    return f"<span style='color:#b00'>⚠ {html.escape(message)}</span>"


def progress_adapter(progress):
    """``gr.Progress`` as the experiments' ``progress(fraction, message)`` callback (or None)."""
    return (lambda f, m: progress(f, desc=m)) if progress is not None else None


def choice_input(name: str, value, choices) -> int:
    """A lesson's dropdown or slider value sent by a client: an integer among ``choices`` (a
    tuple, or a ``range``).

    Raises:
        gradio.Error: anything else (``None``, text, another number), naming the field and the
            choices, so a bad call is refused with a clear line, not an internal error.
    """
    import gradio as gr

    from app.server.fields import shown, whole

    allowed = (f"from {choices.start} to {choices[-1]}" if isinstance(choices, range)
               else "one of " + ", ".join(map(str, choices)))
    try:
        number = whole(name, value)
    except ValueError as exc:
        raise gr.Error(f"{exc}; it must be {allowed}", print_exception=False) from None
    if number not in choices:
        raise gr.Error(f"{name} must be {allowed}, got {shown(value)}", print_exception=False)
    return number
