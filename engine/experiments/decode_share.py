"""Experiment ``decode-share``: how a request's time splits between prefill and decode.

One greedy request with a fixed prompt and a fixed number of new tokens (EOS ignored): for
500 new tokens decode is expected to take over 99% of the time. Result fields beyond
the common ones (see :mod:`.common`):

- ``prompt_tokens``, ``new_tokens``.
- ``queue_s``, ``prefill_s``, ``decode_s``, ``e2e_s``: the engine's metrics, s.
- ``other_s``: e2e − queue − prefill − decode (finishing, bookkeeping), s.
- ``decode_share``: decode / (prefill + decode); ``prefill_share`` = 1 − decode_share.
- ``ttft_s``, ``tpot_s``: time to first token and time per output token, s.
"""

from __future__ import annotations

from engine.experiments.common import STORY_PROMPT, report, result, row, warm_then_run

NAME = "decode-share"
TITLE = "Where the time goes: prefill vs decode"


def run(loaded, quick: bool = False, progress=None, engine=None, new_tokens: int | None = None,
        prompt: str | None = None) -> dict:
    """Time one request and split it into its phases.

    Args:
        loaded: the :class:`engine.model.model_info.LoadedModel`.
        quick: 48 new tokens instead of 500.
        progress: ``progress(fraction, message)`` callback or ``None``.
        engine: an ``LLMEngine`` to run through (a private one when ``None``).
        new_tokens, prompt: override the size or the chat prompt.
    """
    new_tokens = new_tokens or (48 if quick else 500)
    prompt = prompt or STORY_PROMPT
    config, out = warm_then_run(loaded, engine, prompt, new_tokens, progress, 0.0,
                                f"generating {new_tokens} tokens")
    report(progress, 1.0, "done")
    m = out.metrics
    busy = m.prefill_time_s + m.decode_time_s
    res = result(NAME, TITLE, quick, {"new_tokens": new_tokens, "prompt": prompt}, engine=config,
                 prompt_tokens=m.prompt_tokens, new_tokens=m.output_tokens,
                 queue_s=m.queue_time_s, prefill_s=m.prefill_time_s, decode_s=m.decode_time_s,
                 e2e_s=m.e2e_s,
                 other_s=max(0.0, m.e2e_s - m.queue_time_s - m.prefill_time_s - m.decode_time_s),
                 decode_share=m.decode_time_s / busy if busy > 0 else 0.0,
                 ttft_s=m.ttft_s, tpot_s=m.tpot_s)
    res["prefill_share"] = 1.0 - res["decode_share"] if busy > 0 else 0.0
    res["summary"] = [
        row("prefill", res["prefill_s"] * 1000, f"ms ({res['prompt_tokens']} prompt tokens)"),
        row("decode", res["decode_s"], f"s ({res['new_tokens']} new tokens)"),
        row("decode share of prefill + decode", res["decode_share"] * 100, "%"),
        row("TPOT", res["tpot_s"] * 1000, "ms"),
    ]
    return res


def plot(res: dict, path: str) -> str:
    """One horizontal stacked bar: prefill and decode, with their shares."""
    from engine.experiments.plotting import ENGINE, OTHER, figure, save

    fig, (ax,) = figure(res["title"], height=2.6)
    pre, dec = res["prefill_s"], res["decode_s"]
    ax.barh([0], [pre], color=OTHER, label=f"prefill {pre * 1000:.0f} ms "
                                            f"({res['prefill_share'] * 100:.2f}%)")
    ax.barh([0], [dec], left=[pre], color=ENGINE,
            label=f"decode {dec:.2f} s ({res['decode_share'] * 100:.2f}%)")
    ax.set_yticks([])
    ax.set_ylim(-0.5, 1.1)
    ax.set_xlabel("seconds")
    ax.legend(loc="upper center", ncol=2, fontsize=9, frameon=False)
    return save(fig, path, f"{res['prompt_tokens']}-token prompt, {res['new_tokens']} new tokens, "
                           f"greedy, batch 1")
