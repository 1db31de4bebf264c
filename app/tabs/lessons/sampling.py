"""The sampling explorer lesson: one answer, then every step's candidates under the sliders.

Plain functions of plain data (the engine side is :mod:`engine.experiments.explorer`), then
the lesson's ``build``. No torch here.
"""

from __future__ import annotations

import html
import re

import gradio as gr
import plotly.graph_objects as go

from engine import QueueFullError, SamplingParams
from engine.experiments import explorer

from app.server import fields
from app.render.fmt import fmt_int
from app.tabs.lessons.common import layout

MAX_TOKENS = 64  # answer length: long enough for a sentence or a small function

TITLE = "Sampling explorer"
TEXT = ("At each step the model scores every token in its vocabulary; sampling turns those scores "
        "into a choice. Lower the temperature to sharpen the bars, raise it to flatten them; at "
        "temperature 0 (greedy) the top token gets all the probability. Top-k, top-p and min-p cut "
        "the tail (grey outlines are the model's own probabilities). The red bar is the token the "
        "answer actually took.")

PENALTY_RULE = (
    "**Repetition penalty r** (applied first, before temperature and the filters): every token "
    "already in the prompt or in the answer so far has its logit **divided by r when it is "
    "positive and multiplied by r when it is negative**, so for r > 1 a repeated token always "
    "loses score, whatever its sign; r = 1 changes nothing. Hatched bars are tokens it touched. "
    "End-of-text and the chat template's special tokens are exempt, or a reply could never end.")

USE_CASES = (
    "**Greedy or sampling?** Greedy decoding (temperature 0) always takes the most likely token: "
    "the same prompt gives the same answer every time, which is what **code and maths** want "
    "(one answer is right). Repeatable is not right, though: greedy repeats the model's likeliest "
    "answer, mistakes included, and a model this small often gets a sum wrong (the maths "
    "example's answer is checked). Sampling draws from the bars: the wording changes with the seed, "
    "which suits **stories and poems**, at the risk of a less likely, wrong token. "
    "(Beam search keeps k candidate answers at once, for translation or summaries. Held as k "
    "separate caches that would be k times the KV cache; with a paged cache the beams share the "
    "prompt's blocks and copy only the block they write, so it costs far less: the **Beams and "
    "samples** tab shows the block tables, logical against physical tokens.) Try an example of "
    "each below.")

# (label, prompt, temperature, top-k, top-p, min-p, repetition penalty)
EXAMPLES = (
    ("Maths: greedy", "What is 17 + 25? Answer with the number only.", 0.0, 0, 1.0, 0.0, 1.0),
    ("Code: greedy", "Write a Python function that returns the square of a number.", 0.0, 0, 1.0,
     0.0, 1.0),
    ("Story: sampling", "Write the opening of a story about a lighthouse keeper.", 0.9, 50, 0.95,
     0.0, 1.1),
    ("Poem: sampling", "Write a short poem about the sea.", 1.0, 0, 0.9, 0.0, 1.1),
)


EXPECTED = {"What is 17 + 25? Answer with the number only.": "42"}
"""The right answer of an example that has one (checked under the answer)."""


def check_html(prompt: str, text: str) -> str:
    """A line saying whether an answer to an example with one right answer (:data:`EXPECTED`)
    holds it: ``"The right answer is 42; this answer does not say it …"``; ``""`` for any other
    prompt."""
    expected = EXPECTED.get((prompt or "").strip())
    if expected is None:
        return ""
    if re.search(rf"(?<!\d){re.escape(expected)}(?!\d)", text or ""):
        verdict = "this answer says it."
    else:
        verdict = ("this answer does not: greedy made the model's likeliest answer, and "
                   "repeats it every time, wrong or not.")
    return f"<div class='ex-answer-check'>The right answer is <b>{expected}</b>; {verdict}</div>"


def show_token(text: str) -> str:
    """A token's text with visible whitespace: ␣ for a space, ↵ for a newline, ∅ for empty."""
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def explorer_generate(engine, prompt: str, temperature, top_k, top_p, min_p, seed,
                      submit_kwargs: dict | None = None, repetition_penalty=1.0) -> dict:
    """Generate a short answer (``MAX_TOKENS`` at most) with these sampling settings, as a lesson
    run (``submit_kwargs``, such as the session's ``cache_salt``, go to ``engine.generate``).

    Returns:
        ``{"prompt", "prompt_ids", "token_ids", "texts", "text", "finish_reason", "settings"}``:
        the prompt, the answer's ids, each token's text, the whole answer text, why it ended, and
        the settings it was generated with.

    Raises:
        gr.Error: a refused value (naming its field), a full queue, or a failed request.
    """
    try:
        prompt = fields.text("prompt", prompt)
        params = SamplingParams(temperature=fields.number("temperature", temperature),
                                top_k=fields.whole("top_k", top_k), top_p=fields.number("top_p", top_p),
                                min_p=fields.number("min_p", min_p),
                                repetition_penalty=fields.number("repetition_penalty", repetition_penalty),
                                max_tokens=MAX_TOKENS, seed=fields.whole("seed", seed))
        out = engine.generate(prompt, params, source="lesson", **(submit_kwargs or {}))
    except (ValueError, QueueFullError) as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    if not out.finished_ok:
        raise gr.Error(f"the request ended with {out.finish_reason}: {out.error}")
    return {"prompt": prompt, "prompt_ids": out.prompt_token_ids, "token_ids": out.token_ids,
            "texts": [engine.detokenize([i]) for i in out.token_ids], "text": out.text,
            "finish_reason": str(out.finish_reason),
            "settings": {"temperature": params.temperature, "top_k": params.top_k,
                         "top_p": params.top_p, "min_p": params.min_p,
                         "repetition_penalty": params.repetition_penalty, "seed": params.seed}}


def answer_html(answer: dict | None) -> str:
    """The whole answer, how it ended and the settings that made it (empty before the first)."""
    if not answer or "token_ids" not in answer:
        return "<div class='ex-answer ex-empty'>The answer will appear here.</div>"
    n = len(answer["token_ids"])
    why = ("it reached the limit of " f"{MAX_TOKENS} tokens" if answer.get("finish_reason") == "length"
           else "the model ended it")
    s = answer.get("settings") or {}
    how = (f"temperature {s.get('temperature', '?')} (greedy)" if s.get("temperature") == 0
           else f"temperature {s.get('temperature', '?')}, top-k {s.get('top_k', '?')}, "
                f"top-p {s.get('top_p', '?')}, min-p {s.get('min_p', '?')}, seed {s.get('seed', '?')}")
    return (f"<div class='ex-answer'><div class='ex-answer-text'>{html.escape(answer.get('text', ''))}</div>"
            f"<div class='ex-answer-foot'>{fmt_int(n)} tokens; {why} · {html.escape(how)}, repetition "
            f"penalty {s.get('repetition_penalty', 1.0)}</div>"
            f"{check_html(answer.get('prompt', ''), answer.get('text', ''))}</div>")


def step_choices(answer: dict) -> list[tuple[str, int]]:
    """Dropdown choices ``("3: ␣light", 3)`` for each step of the answer."""
    return [(f"{i}: {show_token(t)}", i) for i, t in enumerate(answer.get("texts", []))]


def explorer_figure(sl, temperature, top_k, top_p, min_p, repetition_penalty=1.0) -> go.Figure:
    """The top 20 candidates' probabilities after the sliders, the model's own as outlines.

    At temperature 0 one bar stands at 1.0, labelled greedy; tokens the repetition penalty
    touched are hatched.
    """
    if sl is None:
        return layout(go.Figure(), "Generate an answer, then pick a step", "", "probability")
    rep = float(repetition_penalty)
    v = explorer.view(sl, float(temperature), int(top_k), float(top_p), float(min_p), rep)
    idx = list(range(len(v["texts"])))
    colors = ["#C0392B" if i == sl.chosen_id else ("#2E86AB" if p > 0 else "#BBBBBB")
              for i, p in zip(v["token_ids"], v["probs"])]
    hatch = ["/" if s and rep != 1.0 else "" for s in v["seen"]]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=idx, y=v["raw_probs"], name="the model's own (temperature 1, nothing applied)",
                         marker={"color": "rgba(0,0,0,0)", "line": {"color": "#999", "width": 1}},
                         hovertemplate="%{y:.3f} (raw)<extra></extra>"))
    labels = ["greedy" if v["greedy"] and p == 1.0 else "" for p in v["probs"]]
    fig.add_trace(go.Bar(x=idx, y=v["probs"], name="after the sliders",
                         marker={"color": colors, "pattern": {"shape": hatch, "solidity": 0.35}},
                         text=labels, textposition="outside", textfont={"size": 13, "color": "#C0392B"},
                         customdata=[show_token(t) for t in v["texts"]],
                         hovertemplate="%{customdata}: %{y:.3f}<extra></extra>"))
    where = (f"chosen token {show_token(sl.chosen_text)!r} is the model's rank {sl.chosen_rank + 1}, "
             f"p = {v['chosen_prob']:.3f}")
    if v["greedy"]:
        title = f"Step {sl.step}: greedy (temperature 0): the top token gets probability 1; {where}"
    else:
        title = f"Step {sl.step}: {fmt_int(v['kept'])} tokens left; {where}"
    layout(fig, title, "", "probability")
    fig.update_layout(barmode="overlay", bargap=0.15)
    fig.update_xaxes(tickvals=idx, ticktext=[show_token(t) for t in v["texts"]], tickangle=-45)
    fig.update_yaxes(range=[0, 1.1])
    return fig



def build(ctx) -> dict:
    """The lesson inside an open ``gr.Tab``: the prompt, the sliders and use cases, the answer,
    its steps and the candidates figure, wired to ``ctx.engine`` (with the session's
    ``ctx.session_kwargs``). Returns the components by name."""
    from app.tabs.lessons.common import elem

    c: dict = {}
    gr.Markdown(TEXT + "\n\n" + USE_CASES)
    with gr.Row():
        c["ex_prompt"] = gr.Textbox("Name a colour and say why you like it.", label="Prompt",
                                    scale=4, **elem("ex_prompt"))
        c["ex_seed"] = gr.Number(0, precision=0, label="seed", scale=1, **elem("ex_seed"))
        c["ex_run"] = gr.Button("Generate an answer", variant="primary", scale=1, **elem("ex_run"))
    with gr.Row():
        c["ex_temp"] = gr.Slider(0, 2, value=0.8, step=0.05, label="temperature (0 = greedy)",
                                 **elem("ex_temp"))
        c["ex_topk"] = gr.Slider(0, 50, value=0, step=1, label="top-k (0 = off)", **elem("ex_topk"))
        c["ex_topp"] = gr.Slider(0.05, 1, value=1.0, step=0.01, label="top-p (1 = off)", **elem("ex_topp"))
        c["ex_minp"] = gr.Slider(0, 0.5, value=0.0, step=0.01, label="min-p (0 = off)", **elem("ex_minp"))
        c["ex_rep"] = gr.Slider(0.8, 2.0, value=1.0, step=0.05, label="repetition penalty (1 = off)",
                                **elem("ex_rep"))
    sliders = [c["ex_temp"], c["ex_topk"], c["ex_topp"], c["ex_minp"], c["ex_rep"]]
    gr.Examples([list(ex[1:]) for ex in EXAMPLES], [c["ex_prompt"], *sliders],
                example_labels=[ex[0] for ex in EXAMPLES], label="Use cases: greedy or sampling")
    gr.Markdown(PENALTY_RULE, elem_classes=["penalty-rule"])
    c["ex_answer"] = gr.HTML(answer_html(None), **elem("ex_answer"))
    c["ex_step"] = gr.Dropdown([], label="step of the answer (index: token)", interactive=True,
                               **elem("ex_step"))
    c["ex_plot"] = gr.Plot(explorer_figure(None, 1, 0, 1, 0), show_label=False, **elem("ex_plot"))
    c["ex_answer_state"], c["ex_logits"] = gr.State({}), gr.State(None)
    _wire(ctx, c, sliders)
    return c


def _wire(ctx, c: dict, sliders: list) -> None:
    """Generate an answer, pick a step, move a slider: each redraws the candidates figure."""
    from app.server.errors import guard
    from app.tabs.lessons.gate import gated

    engine, session_kwargs = ctx.engine, ctx.session_kwargs
    answer, logits, quiet = c["ex_answer_state"], c["ex_logits"], {"api_visibility": "private"}

    def on_generate(prompt, seed, t, k, p, m, r, request: gr.Request):
        ans = explorer_generate(engine, prompt, t, k, p, m, seed, session_kwargs(request.session_hash), r)
        sl = explorer.step_logits(engine, ans["prompt_ids"], ans["token_ids"], 0)
        return (ans, sl, gr.Dropdown(choices=step_choices(ans), value=0), answer_html(ans),
                explorer_figure(sl, t, k, p, m, r))

    def on_step(ans, step, t, k, p, m, r):
        if not ans or step is None:
            return None, explorer_figure(None, t, k, p, m, r)
        sl = explorer.step_logits(engine, ans["prompt_ids"], ans["token_ids"], int(step))
        return sl, explorer_figure(sl, t, k, p, m, r)

    c["ex_run"].click(guard(gated(on_generate, "sampling explorer")), [c["ex_prompt"], c["ex_seed"], *sliders],
                      [answer, logits, c["ex_step"], c["ex_answer"], c["ex_plot"]], concurrency_limit=None,
                      **quiet)
    c["ex_step"].input(guard(on_step), [answer, c["ex_step"], *sliders], [logits, c["ex_plot"]],
                       concurrency_limit=1, concurrency_id="lesson-step", **quiet)
    for s in sliders:
        s.change(guard(explorer_figure), [logits, *sliders], c["ex_plot"], show_progress="hidden",
                 trigger_mode="always_last", **quiet)
