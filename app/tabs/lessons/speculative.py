"""The Lessons tab's speculative decoding lesson: one prompt with and without drafting.

Two prompts run plain and with prompt-lookup speculation on the page's engine, in alternating
turns (``engine.experiments.speculative``: a warm-up pair, then :data:`PAIRS` measured pairs,
A B A B A B), the speed-up the median of the pairs' ratios with their spread: a summarising prompt that quotes its text, where
drafts copied from the prompt are often right, and an open question, where they seldom are.
The lesson shows the speed-up, the acceptance rate and the measured cost of a step that
verifies k drafts against a one-token step, the reason the trick works. No torch here.
"""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from engine.experiments import speculative
from engine.experiments.common import median

from app.render.figures import _hint
from app.server import fields
from app.server.errors import guard
from app.tabs.lessons.gate import gated

SUMMARY_PROMPT = (
    "Summarise this passage in two sentences, quoting its most important sentence exactly:\n\n"
    "\"The lighthouse on the northern cape was built in 1871 after three ships were lost on the "
    "rocks in one winter. Its lamp burned whale oil at first, then paraffin, and since 1952 "
    "electricity. The keeper's family lived in the small white house beside the tower, and the "
    "children rowed to the village school across the bay when the sea was calm.\"")
OPEN_PROMPT = "Why do people enjoy walking in the mountains? Give a few reasons."
PROMPTS = {"summarise with quotes": SUMMARY_PROMPT, "open question": OPEN_PROMPT}
PAIRS = 3  # measured pairs of turns (plain, speculative) per prompt, after a warm-up pair

TITLE = "Speculative decoding"
TEXT = """### Speculative decoding: check several guessed tokens in one pass

A decode step reads every weight of the model to produce one token, and a pass over five
tokens reads the same weights. **Prompt lookup** guesses the next tokens by finding the last
few tokens of the answer earlier in the prompt or the answer, and copying what followed; the
model then checks all the guesses in **one** forward pass, keeps the longest run it agrees
with, and adds one token of its own. Greedy answers stay exactly the same. Guesses pay off
where the answer copies its input (quotes, code edits), and drafting pauses itself where they
keep failing. In the Playground, chips with a dashed outline are accepted guesses, and the
latency plot marks each verification step with the tokens it produced.

Each prompt runs a warm-up pair, then **%d pairs of turns** (plain, speculative, plain,
speculative, ...); the speed-up is the **median** of the pairs' ratios, and the spread (lowest
to highest ratio) shows how much one pair alone could mislead on a busy machine.""" % PAIRS


def spread(ratios: list[float]) -> tuple[float, float]:
    """The lowest and highest of a prompt's per-pair speed-ups (``(0.0, 0.0)`` when none)."""
    return (min(ratios), max(ratios)) if ratios else (0.0, 0.0)


HINT = "Press “Run with and without speculation” to measure the speed-up on both prompts"


def spec_figure(res: dict | None) -> go.Figure:
    """Median speed-up per prompt, with the pairs' lowest and highest as an error bar, and the
    acceptance; the cost of a step by drafts verified. Before a run (``res`` is ``None``) both
    panels empty, the prompts on the left one's x axis, and a note on what to press."""
    if not res:
        res = {"rows": [{"name": name, "ratio_median": None, "acceptance_rate": None, "ratios": []}
                        for name in PROMPTS], "empty": True}
    rows = res.get("rows", [])
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "decode tokens/s, speculative ÷ plain" + (f" (median of {res['pairs']} pairs)"
                                                   if res.get("pairs") else ""),
        "step time ÷ one-token step"))
    lo = [r["ratio_median"] - spread(r["ratios"])[0] if r["ratios"] else 0 for r in rows]
    hi = [spread(r["ratios"])[1] - r["ratio_median"] if r["ratios"] else 0 for r in rows]
    fig.add_trace(go.Bar(x=[r["name"] for r in rows], y=[r["ratio_median"] for r in rows],
                         error_y={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo},
                         text=[f"{r['ratio_median']:.2f}× · accepted {r['acceptance_rate']:.0%}"
                               if r["ratio_median"] is not None else "" for r in rows],
                         marker_color="#6d28d9", showlegend=False),
                  row=1, col=1)
    cost = res.get("verify_cost", {})
    fig.add_trace(go.Bar(x=[f"{k} drafts" if k != "0" else "plain" for k in cost],
                         y=list(cost.values()), marker_color="#2E86AB", showlegend=False,
                         text=[f"{v:.2f}×" for v in cost.values()]), row=1, col=2)
    fig.update_layout(height=340, margin={"l": 50, "r": 20, "t": 60, "b": 40},
                      title="Speculative decoding on this machine")
    if res.get("empty"):  # no numbers before a run (Plotly's default axis reads -1..6)
        fig.update_yaxes(showticklabels=False)
        fig.update_xaxes(showticklabels=False, row=1, col=2)
        _hint(fig, HINT)
    return fig


def spec_table(res: dict) -> str:
    """Markdown: per prompt the plain and speculative rates (medians of the turns), the speed-up
    (median of the pairs' ratios) and its spread, acceptance and tokens per pass; then each step
    kind's median time."""
    lines = ["| prompt | plain tok/s | speculative tok/s | speed-up (median) | spread of the pairs | "
             "acceptance | tokens per pass | same tokens |", "|" + " --- |" * 8]
    for r in res.get("rows", []):
        p, s = median(r["plain_tok_s"]), median(r["spec_tok_s"])
        lo, hi = spread(r["ratios"])
        each = " · ".join(f"{x:.2f}×" for x in r["ratios"])
        lines.append(f"| {r['name']} | {p:.1f} | {s:.1f} | {r['ratio_median']:.2f}× | "
                     f"{lo:.2f}× to {hi:.2f}× ({each}) | "
                     f"{r['acceptance_rate']:.0%} | {r['tokens_per_step']:.2f} | "
                     f"{'yes' if r['identical_tokens'] else 'no'} |")
    ms = res.get("verify_ms", {})
    if ms:
        parts = [f"{'plain' if k == '0' else k + ' drafts'}: {v:.1f} ms" for k, v in ms.items()]
        lines.append("\nMedian step time by drafts verified: " + ", ".join(parts) + ".")
    lines.append(f"\n{res.get('new_tokens')} greedy tokens; after a warm-up pair, {res.get('pairs')} "
                 "pairs of turns per prompt (plain, speculative, plain, speculative, ...). Each pair's "
                 "ratio compares two neighbouring turns, the speed-up is the median of those ratios and "
                 "the spread their lowest and highest; the tok/s columns are the turns' medians, so "
                 "their quotient need not equal the median ratio. Acceptance and tokens per pass are "
                 "the last speculative turn's. Speeds move with the machine's load.")
    return "\n".join(lines)


def run_spec_lesson(engine, new_tokens: int = 64, progress=None) -> tuple[go.Figure, str]:
    """Both prompts, plain and speculative, :data:`PAIRS` measured pairs each (after a warm-up
    pair) on the page's engine.

    Raises:
        ValueError: ``new_tokens`` not a whole number in [16, 192] (the message names it).
    """
    n = fields.whole("new tokens", new_tokens)
    if not 16 <= n <= 192:
        raise ValueError(f"new tokens must be in [16, 192], got {n}")
    cb = (lambda f, m: progress(f, desc=m)) if progress is not None else None
    res = speculative.run(engine.experiment_model(), quick=True, progress=cb, engine=engine,
                          new_tokens=n, pairs=PAIRS, prompts=PROMPTS)
    return spec_figure(res), spec_table(res)



def build(ctx) -> dict:
    """The lesson's components inside an open ``gr.Tab`` context, wired to ``ctx.engine``."""
    engine = ctx.engine
    c = {}
    gr.Markdown(TEXT)
    with gr.Row():
        c["spec_tokens"] = gr.Slider(32, 192, value=64, step=16, label="new tokens",
                                     elem_id="lesson-spec-tokens")
        c["spec_run"] = gr.Button("Run with and without speculation", variant="primary",
                                  elem_id="lesson-spec-run")
    c["spec_plot"] = gr.Plot(spec_figure(None), show_label=False, elem_id="lesson-spec-plot")
    c["spec_table"] = gr.Markdown("", elem_id="lesson-spec-table")

    def on_run(n, progress=gr.Progress()):
        try:
            return run_spec_lesson(engine, n, progress)
        except ValueError as exc:
            raise gr.Error(str(exc), print_exception=False) from None

    c["spec_run"].click(guard(gated(on_run, "speculative decoding")), c["spec_tokens"], [c["spec_plot"], c["spec_table"]],
                        concurrency_limit=None,
                        api_visibility="private")
    return c
