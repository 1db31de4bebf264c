"""The ``/compare`` API endpoint (for ``gradio_client`` scripts).

Example::

    from gradio_client import Client
    out = Client("http://127.0.0.1:7860/").predict(
        prompt="Name three colours.", left={"temperature": 0}, right={"kv_cache_dtype": "fp8"},
        max_tokens=32, api_name="/compare")
    out["right"]["kv_cache_bytes"], out["left"]["first_diff"]
"""

from __future__ import annotations

import secrets

import gradio as gr

from app.tabs.compare import handlers


def make_compare(pg, engines):
    """Build the ``/compare`` function bound to a playground and its :class:`EngineSet`."""

    def compare(prompt: str, left: dict | None = None, right: dict | None = None,
                max_tokens: int = 64, request: gr.Request = None) -> dict:
        """Run one prompt with two settings at once on the page's engine(s).

        Args:
            prompt: the user message (through the chat template).
            left, right: JSON objects of settings: temperature, top_p, top_k, seed (-1 or null
                random), max_tokens, weights (auto, int4, bf16, fp32), speculative,
                use_kv_cache, kv_cache_dtype (auto, bf16, fp8), prefix_cache (cold, warm),
                json_schema (a JSON schema as text; empty for free text). Missing ones take
                their defaults (greedy, 64 tokens, the served model).
            max_tokens: for a side that sets none, in [1, 1024].

        Returns:
            ``{"left": {...}, "right": {...}}``, each with text, token_ids, token_times_s
            (seconds from submit to each token), ttft_s, tpot_s, tokens_per_s, kv_cache_bytes,
            weight_bytes, first_diff (0-based index where the answers part, or null), batch_size,
            acceptance (speculative decoding, else null), engine, settings and finish_reason. Bad settings
            are refused naming the side and field ("right.weights must be one of ...").
        """
        session = request.session_hash if request is not None and request.session_hash \
            else "call-" + secrets.token_hex(16)
        refusal = []
        last = None
        for frame in handlers.compare(pg, engines, session, prompt, left, right, max_tokens,
                                      notify=refusal.append):
            last = frame
        if refusal or last is None or "result" not in last:
            raise gr.Error(refusal[0] if refusal else "the comparison ended without a result",
                           print_exception=False)
        return last["result"]

    return compare
