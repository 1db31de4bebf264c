"""The "Beams and samples" tab: sampling with n samples side by side, or beam search with a live beam view.

Layout first, then the one handler (a generator that streams HTML), then the wiring; the HTML
comes from :mod:`app.render.beams`.
"""

from __future__ import annotations

from typing import Iterator

import gradio as gr

from engine import QueueFullError, SamplingParams

from app.render import cards
from app.server import fields
from app.render.beams import LESSON, beam_html, finish_summary, samples_html
from app.server.errors import guard, log_internal

MODES = [("Sampling", "sampling"), ("Beam search", "beam")]
MAX_WIDTH = 8


def params_for(mode: str, width, temperature, max_tokens, length_penalty, early_stopping,
               seed) -> SamplingParams:
    """The request's settings from the tab's fields.

    Raises:
        ValueError: a bad value; the message names the field.
    """
    if mode not in ("sampling", "beam"):
        raise ValueError(f"mode must be sampling or beam, got {fields.shown(mode)}")
    width = fields.whole("width", width)
    if not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"width must be in [1, {MAX_WIDTH}], got {width}")
    max_tokens = fields.whole("max_tokens", max_tokens)
    seed = fields.whole("seed", seed)
    if mode == "beam":
        rule = fields.text("early_stopping", early_stopping)
        if rule not in ("true", "false", "never"):
            raise ValueError(f"early_stopping must be true, false or never, got {fields.shown(rule)}")
        return SamplingParams(temperature=0.0, num_beams=width, n=1, max_tokens=max_tokens,
                              length_penalty=fields.number("length_penalty", length_penalty),
                              early_stopping={"true": True, "false": False}.get(rule, rule))
    return SamplingParams(temperature=fields.number("temperature", temperature), n=width,
                          max_tokens=max_tokens, seed=None if seed < 0 else seed)


def run(pg, session_id: str, mode, prompt, width, temperature, max_tokens, length_penalty,
        early_stopping, seed) -> Iterator[tuple[str, str]]:
    """Stream ``(view html, status html)`` while the request runs."""
    try:
        prompt = fields.text("prompt", prompt)
        if not prompt.strip():
            yield gr.skip(), cards.status_html("The prompt is empty: type something first.", "error")
            return
        params = params_for(mode, width, temperature, max_tokens, length_penalty, early_stopping,
                            seed)
        handle = pg.submit(session_id, prompt, params)
    except QueueFullError as exc:
        yield gr.skip(), cards.status_html(f"The engine is busy: {exc}", "error")
        return
    except ValueError as exc:
        yield gr.skip(), cards.status_html(f"Request refused: {exc}", "error")
        return
    except Exception as exc:  # noqa: BLE001 - logged; the client gets an error id only
        yield gr.skip(), cards.status_html(log_internal("Decoding", exc), "error")
        return
    decode = pg.engine.detokenize
    block_size = pg.engine_stats().block_size or 16
    texts: dict[int, str] = {}
    view = last_live = None
    try:
        for batch in pg.follow(handle):
            for ev in batch:
                if ev.beams is not None:
                    view = ev.beams
                    if view.get("live"):
                        last_live = view
                else:
                    texts[ev.index] = texts.get(ev.index, "") + ev.text_delta
            if batch:
                html = (beam_html(view, decode, block_size) if mode == "beam"
                        else samples_html(texts))
                yield html, cards.status_html("Generating…", "busy")
        out = handle.output
        if mode == "beam":
            final = [{"text": o.text, "score": o.score or 0.0, "finish_reason": o.finish_reason}
                     for o in out.outputs]
            html = beam_html(view, decode, block_size, final, last_live)
        else:
            html = samples_html({o.index: o.text for o in out.outputs},
                                {o.index: {"finish_reason": o.finish_reason,
                                           "cumulative_logprob": o.cumulative_logprob}
                                 for o in out.outputs})
        kind = "ok" if out.finished_ok else "warn"
        line = finish_summary([o.finish_reason for o in out.outputs],
                              "answer" if mode == "beam" else "sample")
        yield html, cards.status_html(line, kind)
    except Exception as exc:  # noqa: BLE001
        yield gr.skip(), cards.status_html(log_internal("Decoding", exc), "error")
    finally:
        pg.release(session_id, handle)


def build(ctx) -> dict:
    """Build the tab's content inside an open ``gr.Tab`` (``ctx``: an
    :class:`app.tabs.context.TabContext`); returns its components by name."""
    c: dict = {}
    gr.Markdown(LESSON, elem_id="decoding-lesson")
    # the prompt and Run first, so Run is on the first screen at 1280x720; the settings follow
    with gr.Row():
        c["prompt"] = gr.Textbox("Translate into French: The cat sleeps on the warm windowsill.",
                                 label="Prompt", scale=4, elem_id="decoding-prompt")
        c["run"] = gr.Button("Run", variant="primary", scale=1, elem_id="decoding-run")
    with gr.Row():
        c["mode"] = gr.Radio(MODES, value="beam", label="Decoding", elem_id="decoding-mode")
        c["width"] = gr.Slider(1, MAX_WIDTH, value=4, step=1, label="beams / samples (n)",
                               elem_id="decoding-width")
        c["temperature"] = gr.Slider(0.05, 2.0, value=0.8, step=0.05, label="temperature (sampling)")
        c["seed"] = gr.Number(value=-1, precision=0, label="seed (sampling; -1 = random)")
    with gr.Row():
        c["length_penalty"] = gr.Slider(-2.0, 3.0, value=1.0, step=0.1, label="length penalty (beams)")
        c["early_stopping"] = gr.Radio(["false", "true", "never"], value="false",
                                       label="early stopping (beams)")
        c["max_tokens"] = gr.Slider(1, 128, value=32, step=1, label="max new tokens")
    c["status"] = gr.HTML("", elem_id="decoding-status")
    c["view"] = gr.HTML(beam_html(None, None, 16), elem_id="decoding-view")

    def on_run(mode, prompt, width, temperature, max_tokens, length_penalty, early_stopping, seed,
               request: gr.Request):
        yield from run(ctx.pg, request.session_hash, mode, prompt, width, temperature, max_tokens,
                       length_penalty, early_stopping, seed)

    c["run"].click(guard(on_run), [c["mode"], c["prompt"], c["width"], c["temperature"], c["max_tokens"],
                            c["length_penalty"], c["early_stopping"], c["seed"]],
                   [c["view"], c["status"]], show_progress="hidden", api_visibility="private",
                   concurrency_id="engine")
    return c
