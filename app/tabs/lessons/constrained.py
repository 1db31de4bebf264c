"""The Lessons tab's "Constrained decoding" lesson: one prompt and seed free, under a JSON
schema with the whitespace the model likes, and under the same schema forced compact, side by
side, with the share of the probability each step's mask threw away and the token where the
free answer broke the schema. No torch here: the engine runs both answers
(as lesson requests, :mod:`app.tabs.lessons.runs`) and its grammar compiler checks the free one.
"""

from __future__ import annotations

import html

import gradio as gr
import plotly.graph_objects as go

from engine.params import SamplingParams
from engine.structured import StructuredOutputsParams

from app.render.structured import EXAMPLES
from app.server.errors import guard
from app.tabs.lessons.gate import gated
from app.tabs.lessons.common import layout
from app.tabs.lessons.runs import LessonEngine

PROMPTS = {"A person": "Describe a person as JSON, with their name and age.",
           "A list of cities": "List three cities and their countries as JSON.",
           "A mood (enum)": "How do you feel today? Answer in JSON."}

TITLE = "Constrained decoding"
TEXT = """### Constrained decoding: a grammar becomes a mask over the vocabulary

A JSON schema (or a regex, or a grammar) is compiled into a parser. At each step the parser
knows which bytes may come next, so the engine can tell, for each of the 49,152 tokens, whether
it keeps the answer valid: that is a **mask**, and every token outside it gets probability 0
before sampling. Where the grammar allows exactly one token (after `{` only `"name"` may
follow) the token is **forced**: there is nothing to choose, so the engine appends it without
running the model for it. Below, the same prompt and seed run free, under the schema, and under
the schema **forced compact** (no whitespace between JSON tokens, vLLM's
`disable_any_whitespace`); the bars show how much of the model's probability each step's mask
threw away. A small model has seen JSON mostly pretty-printed: forced off its habit it can lose
its way inside a value and run to the token limit."""


def _answers(engine, prompt: str, schema: dict, seed: int, max_tokens: int, submit_kwargs=None):
    """Submit the free, the constrained and the compact constrained answer together; wait for
    all three (300 s at most). Returns ``(constrained handle, free out, constrained out,
    compact out)``."""
    runs = LessonEngine(engine, "constrained", submit_kwargs)
    params = dict(temperature=0.8, seed=int(seed), max_tokens=int(max_tokens))
    free = runs.submit(prompt, SamplingParams(**params))
    held = runs.submit(prompt, SamplingParams(
        **params, structured_outputs={"json": schema, "explain": True}))
    compact = runs.submit(prompt, SamplingParams(
        **params, structured_outputs={"json": schema, "disable_any_whitespace": True}))
    return held, free.result(300), held.result(300), compact.result(300)


def mask_figure(events) -> go.Figure:
    """One bar per output token: the share of the probability its mask removed (forced tokens
    in another colour; jumped ones, which had no model pass, as a full bar of their own)."""
    xs, ys, colors, texts = [], [], [], []
    for i, ev in enumerate(events):
        d = ev.mask_detail or {}
        mass = d.get("removed_mass")
        xs.append(i + 1)
        ys.append(1.0 if ev.jumped else (mass or 0.0))
        colors.append("#0f766e" if ev.forced else "#2E86AB")
        texts.append(f"{ev.token_text!r}: " + ("forced, no forward pass" if ev.jumped else
                     f"{ev.allowed_tokens:,} allowed, {100 * (mass or 0):.1f}% removed"))
    fig = go.Figure(go.Bar(x=xs, y=ys, marker_color=colors, hovertext=texts,
                           hoverinfo="text"))
    layout(fig, "Probability the mask removed at each step (green: forced)", "output token",
           "share removed")
    fig.update_yaxes(range=[0, 1])
    return fig


def broken_at(engine, schema: dict, out) -> str:
    """Where the free answer leaves the schema, as Markdown."""
    so = StructuredOutputsParams(json=schema)
    ids = list(out.token_ids)
    n = engine.structured.compiler.valid_prefix(so, ids)
    if n >= len(ids):
        return "The free answer happens to follow the schema all the way."
    tok = engine.tokenizer.decode([ids[n]])
    before = engine.tokenizer.decode(ids[:n])
    return (f"The free answer breaks the schema at token {n + 1}, **{html.escape(repr(tok))}**, "
            f"after `{html.escape(before[-60:]) or '(nothing)'}`: the mask would have removed it.")


def run_lesson(engine, example: str, prompt: str, seed: int, max_tokens: int, submit_kwargs=None):
    """Both answers, the mask figure and the break point.

    Args:
        engine: the page's engine; example: a name of :data:`EXAMPLES` (an unknown one: the
            first); prompt: the prompt (empty: the example's own); seed, max_tokens: both runs'.
        submit_kwargs: extra ``engine.submit`` arguments (the session's ``cache_salt``).

    Returns:
        ``(free answer Markdown, constrained answer Markdown, compact constrained answer
        Markdown, mask figure, note Markdown)``.
    """
    schema = EXAMPLES.get(example) or next(iter(EXAMPLES.values()))
    prompt = prompt or PROMPTS.get(example, "")
    held, free_out, held_out, compact_out = _answers(engine, prompt, schema, seed, max_tokens,
                                                     submit_kwargs)
    s = held_out.structured or {}
    note = (f"{broken_at(engine, schema, free_out)}\n\nUnder the schema: "
            f"{len(held_out.token_ids)} tokens, {s.get('forced_tokens', 0)} forced, of which "
            f"{s.get('jump_forward_tokens', 0)} needed no forward pass; {_ending(held_out)}. "
            f"Forced compact: {len(compact_out.token_ids)} tokens; {_ending(compact_out)}.")
    return (f"```\n{free_out.text}\n```", f"```json\n{held_out.text}\n```",
            f"```json\n{compact_out.text}\n```", mask_figure(list(held.events)), note)


def _ending(out) -> str:
    """How a constrained answer ended, in words: complete, or cut by the token limit."""
    if out.finish_reason == "length":
        return "**cut by the token limit** before the JSON closed"
    return "complete"


def build(ctx) -> dict:
    """The lesson's components inside an open ``gr.Tab`` context, wired to ``ctx.engine`` (a
    user's prompt runs with ``ctx.session_kwargs``). Returns the components by name."""
    engine, session_kwargs = ctx.engine, ctx.session_kwargs
    c = {}
    gr.Markdown(TEXT)
    with gr.Row():
        c["cd_example"] = gr.Dropdown(list(EXAMPLES), value="A person", label="schema",
                                      elem_id="lesson-cd-example")
        c["cd_seed"] = gr.Number(value=0, precision=0, label="seed", elem_id="lesson-cd-seed")
        c["cd_tokens"] = gr.Slider(16, 160, value=64, step=8, label="max new tokens")
    c["cd_prompt"] = gr.Textbox(PROMPTS["A person"], label="prompt", elem_id="lesson-cd-prompt")
    c["cd_run"] = gr.Button("Run free and under the schema", variant="primary",
                            elem_id="lesson-cd-run")
    with gr.Row():
        with gr.Column():
            gr.Markdown("**Free**")
            c["cd_free"] = gr.Markdown("", elem_id="lesson-cd-free")
        with gr.Column():
            gr.Markdown("**Under the schema** (whitespace free)")
            c["cd_held"] = gr.Markdown("", elem_id="lesson-cd-held")
        with gr.Column():
            gr.Markdown("**Under the schema, forced compact**")
            c["cd_compact"] = gr.Markdown("", elem_id="lesson-cd-compact")
    c["cd_plot"] = gr.Plot(show_label=False, elem_id="lesson-cd-plot")
    c["cd_note"] = gr.Markdown("", elem_id="lesson-cd-note")

    def on_example(example):  # the example's own prompt
        return PROMPTS.get(example, "")

    c["cd_example"].change(guard(on_example), c["cd_example"], c["cd_prompt"],
                           show_progress="hidden", api_visibility="private")

    def on_run(example, prompt, seed, n, request: gr.Request):
        kwargs = session_kwargs(request.session_hash) if request is not None else {}
        return run_lesson(engine, example, prompt, seed or 0, n, kwargs)

    c["cd_run"].click(guard(gated(on_run, "constrained decoding")), [c["cd_example"], c["cd_prompt"], c["cd_seed"], c["cd_tokens"]],
                      [c["cd_free"], c["cd_held"], c["cd_compact"], c["cd_plot"], c["cd_note"]],
                      concurrency_limit=None, api_visibility="private")
    return c
