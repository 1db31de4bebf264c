"""The Compare tab's layout: the prompt and Run both, the presets, both sides' settings, then
the two answer columns, the overlaid plots and the table. Live panels take the channel's ops
under names of their own (``cmp-...``), apart from the Playground's."""

from __future__ import annotations

import gradio as gr

from app.render.live_js import REGISTRY_JS
from app.render.tokens import inspector_template, tooltip_js
from app.tabs.compare.presets import Preset
from app.tabs.compare.settings import DEFAULTS, KV_DTYPES, LOCAL_ONLY, PREFIX, WEIGHTS
from app.tabs.playground.live_channel import channel, html_panel
from app.tabs.playground.plot_panel import plot_panel, serve_plotly_js

CHANNEL = "compare"
LIVE = {"status": "cmp-status", "left": "cmp-left-tokens", "right": "cmp-right-tokens",
        "latency": "cmp-latency", "kv": "cmp-kv", "table": "cmp-table", "diff": "cmp-diff"}
"""Each live panel's name on the channel (frame key -> live name)."""
SIDE_FIELDS = ("weights", "temperature", "top_p", "top_k", "seed", "max_tokens", "speculative",
               "use_kv_cache", "kv_cache_dtype", "prefix_cache", "json_schema", "engine")
"""The settings each side's panel holds, in the order of its components."""
PROMPT = "Explain in three sentences why decoding one token at a time is slow."
INTRO = ("**One prompt, two settings, both answers streaming at once.** Pick a preset or set Left "
         "and Right, then **Run both**; the chip where the answers part is marked in both columns. "
         "Sides on the served model share the engine's batches (the table gives each side's batch "
         "size); other weights or another KV cache dtype run on a second engine of that variant, "
         "loaded once and kept (two at most), stepping in its own thread.")
REMOTE_INTRO = ("**One prompt, two sampling settings, both answers streaming at once** from the "
                "remote server: it compares what the server can change per request "
                "(temperature, top-p, top-k, seed, max tokens).")


DIFF_JS = REGISTRY_JS + r"""
// the run's last frame names the chip where the answers part: scroll both columns to it
live.register('__NAME__', (op) => {
  if (op.set === undefined || op.set === '') return;
  requestAnimationFrame(() => {
    for (const col of ['#cmp-left', '#cmp-right']) {
      const chip = document.querySelector(col + ' .tok-diff'), body = chip && chip.closest('.tok-body');
      if (body) body.scrollTop = Math.max(0, chip.offsetTop - body.offsetTop - 8);
    }
  });
});
"""


def top(remote: bool) -> dict:
    """The intro, the prompt with Run both and Stop, and the hidden live channel."""
    gr.Markdown(REMOTE_INTRO if remote else INTRO, elem_id="cmp-intro")
    c = {}
    with gr.Row(equal_height=True, elem_id="cmp-ask"):
        c["prompt"] = gr.Textbox(PROMPT, show_label=False, lines=1, max_lines=3, scale=6,
                                 container=False, elem_id="cmp-prompt")
        c["run"] = gr.Button("Run both", variant="primary", scale=1, min_width=100, elem_id="cmp-run")
        c["stop"] = gr.Button("Stop", variant="stop", scale=0, min_width=70, interactive=False,
                              elem_id="cmp-stop")
    c["live"] = channel("cmp-live-channel", CHANNEL)
    gr.HTML("", js_on_load=DIFF_JS.replace("__NAME__", LIVE["diff"]), elem_id="cmp-diff-scroll",
            elem_classes=["live-channel-block"], container=False, padding=False)
    return c


def preset_buttons(presets: tuple[Preset, ...]) -> dict:
    """One small button per preset and the sentence on what to watch."""
    c = {"preset_btns": []}
    with gr.Row(elem_id="cmp-presets"):
        for p in presets:
            c["preset_btns"].append(gr.Button(p.label, size="sm", min_width=60,
                                              elem_id=f"cmp-preset-{p.key.replace('_', '-')}"))
    c["watch"] = gr.Markdown("", elem_id="cmp-watch")
    return c


def side_panel(side: str, remote: bool, peer: bool) -> list:
    """One side's settings components, in :data:`SIDE_FIELDS` order (the ones a remote server
    can't honour hidden in remote mode; the engine choice only with a peer server)."""
    d = DEFAULTS
    local = not remote
    sid = f"cmp-{side}"
    comps = [
        gr.Dropdown(list(WEIGHTS), value=d.weights, label="weights", visible=local, elem_id=f"{sid}-weights",
                    info="auto: the served model's"),
        gr.Slider(0, 2, value=d.temperature, step=0.05, label="temperature", elem_id=f"{sid}-temperature"),
        gr.Slider(0.05, 1, value=d.top_p, step=0.01, label="top-p", elem_id=f"{sid}-top-p"),
        gr.Slider(0, 200, value=d.top_k, step=1, label="top-k (0 = off)", elem_id=f"{sid}-top-k"),
        gr.Number(value=-1, precision=0, label="seed (-1 = random)", elem_id=f"{sid}-seed"),
        gr.Slider(1, 512, value=d.max_tokens, step=1, label="max tokens", elem_id=f"{sid}-max-tokens"),
        gr.Checkbox(value=d.speculative, label="speculative (prompt lookup)", visible=local,
                    elem_id=f"{sid}-speculative"),
        gr.Checkbox(value=d.use_kv_cache, label="KV cache", visible=local, elem_id=f"{sid}-use-kv"),
        gr.Dropdown(list(KV_DTYPES), value=d.kv_cache_dtype, label="KV cache dtype", visible=local,
                    elem_id=f"{sid}-kv-dtype", info="auto: the served engine's"),
        gr.Radio(list(PREFIX), value=d.prefix_cache, label="prefix cache", visible=local,
                 elem_id=f"{sid}-prefix", info="warm: the prompt ran once before"),
        gr.Textbox(value=d.json_schema, label="JSON schema (empty = free text)", lines=2, max_lines=6,
                   visible=local, elem_id=f"{sid}-schema"),
        gr.Radio(["local", "remote"], value=d.engine, label="engine", visible=peer and local,
                 elem_id=f"{sid}-engine"),
    ]
    assert len(comps) == len(SIDE_FIELDS) and set(LOCAL_ONLY) <= set(SIDE_FIELDS)
    return comps


def settings(remote: bool, peer: bool) -> dict:
    """Left's and Right's panels side by side, in a closed accordion below the presets
    (``left_settings``, ``right_settings``: lists in :data:`SIDE_FIELDS` order)."""
    c = {}
    with gr.Accordion("Settings: Left and Right", open=False, elem_id="cmp-settings"):
        with gr.Row():
            for side in ("left", "right"):
                with gr.Column(min_width=280):
                    gr.Markdown(f"**{side.capitalize()}**", elem_classes=[f"cmp-head-{side}"])
                    c[f"{side}_settings"] = side_panel(side, remote, peer)
    return c


def answers(empty: dict) -> dict:
    """The status line and the two answer columns of token chips."""
    c = {"status": html_panel(empty["status"], "cmp-status", LIVE["status"])}
    with gr.Row(equal_height=False, elem_id="cmp-answers"):
        for side in ("left", "right"):
            with gr.Column(min_width=300, elem_classes=[f"cmp-col-{side}"]):
                gr.Markdown(f"**{side.capitalize()}**", elem_classes=[f"cmp-head-{side}"])
                c[side] = gr.HTML(empty[side], html_template=inspector_template(),
                                  js_on_load=tooltip_js(LIVE[side]), elem_id=f"cmp-{side}")
    return c


def panels(empty: dict) -> dict:
    """The overlaid latency plot, both KV cache curves and the table."""
    head = serve_plotly_js()
    c = {}
    with gr.Row(elem_id="cmp-plots"):
        c["latency"] = plot_panel(empty["latency"], "cmp-latency-plot", head, min_height=260,
                                  live_name=LIVE["latency"])
        c["kv"] = plot_panel(empty["kv"], "cmp-kv-plot", head, min_height=260, live_name=LIVE["kv"])
    c["table"] = html_panel(empty["table"], "cmp-table", LIVE["table"])
    gr.Markdown("<div class='footnote'>Script it with <code>gradio_client</code>: endpoint "
                "<code>/compare</code> (prompt, left, right, max_tokens; see “Use via API”).</div>")
    return c
