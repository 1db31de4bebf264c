"""Hugging Face ``generate`` as the reference: greedy, a fixed token count, timed per step."""

from __future__ import annotations

import time

import torch


class _StepClock:
    """A ``generate`` streamer that records when each new token (or batch of tokens) arrived.

    ``generate`` first hands the streamer the prompt, then each step's new tokens; the first
    call is skipped, so ``times`` holds one ``perf_counter()`` reading per generated step.
    """

    def __init__(self) -> None:
        self.times: list[float] = []
        self._seen_prompt = False

    def put(self, value) -> None:  # noqa: D401 - transformers streamer hook
        if not self._seen_prompt:
            self._seen_prompt = True
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:  # noqa: D401 - transformers streamer hook
        pass


def pad_id(loaded) -> int:
    """The id ``generate`` pads with: the tokenizer's pad token, else an EOS id, else 0."""
    tok = loaded.tokenizer
    if getattr(tok, "pad_token_id", None) is not None:
        return int(tok.pad_token_id)
    return min(loaded.eos_token_ids) if loaded.eos_token_ids else 0


def hf_generate(loaded, batch_ids: list[list[int]], new_tokens: int) -> dict:
    """Greedy ``model.generate`` on a batch of prompts, left-padded, exactly ``new_tokens`` each.

    EOS is disabled (``eos_token_id=None``), so every sequence runs the full count, as the
    engine does with ``ignore_eos=True``.

    Args:
        loaded: the :class:`engine.model.model_info.LoadedModel`.
        batch_ids: one list of prompt token ids per sequence (lengths may differ).
        new_tokens: tokens to generate per sequence (``>= 1``).

    Returns:
        ``token_ids`` (new ids per sequence), ``padded_len`` (prompt tokens after padding),
        ``ttft_s`` (start to first step's tokens), ``decode_time_s`` (first to last step),
        ``e2e_s``, ``decode_tokens_per_s`` (per sequence: (new − 1) / decode time),
        ``step_times_s`` (per step, seconds since start).
    """
    model = loaded.model
    device = next(model.parameters()).device
    pad = pad_id(loaded)
    width = max(len(ids) for ids in batch_ids)
    rows = [[pad] * (width - len(ids)) + list(ids) for ids in batch_ids]
    mask = [[0] * (width - len(ids)) + [1] * len(ids) for ids in batch_ids]
    x = torch.tensor(rows, dtype=torch.long, device=device)
    m = torch.tensor(mask, dtype=torch.long, device=device)
    clock = _StepClock()
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(x, attention_mask=m, do_sample=False, max_new_tokens=new_tokens,
                             eos_token_id=None, pad_token_id=pad, streamer=clock)
    end = time.perf_counter()
    times = clock.times or [end]
    decode = times[-1] - times[0]
    n = len(times)
    return {
        "token_ids": out[:, width:].tolist(),
        "padded_len": width,
        "ttft_s": times[0] - start,
        "decode_time_s": decode,
        "e2e_s": end - start,
        "decode_tokens_per_s": (n - 1) / decode if n > 1 and decode > 0 else 0.0,
        "step_times_s": [t - start for t in times],
    }
