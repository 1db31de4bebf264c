"""Per-layer fp8 KV scales from one short forward pass (vLLM's ``calculate_kv_scales`` idea).

e4m3 holds magnitudes up to 448 with 3 mantissa bits; a per-layer scale maps each layer's
largest key (and value) into that range. The scales come from the largest |K| and |V| of each
layer over :data:`CALIBRATION_TEXT` (English, Chinese and code, apart from the quality text
the ``quantization`` experiment scores), with 2× headroom for longer or unusual inputs; a
larger value is clipped to ±448 × scale.
"""

from __future__ import annotations

import torch

CALIBRATION_TEXT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "Summarise the following notes, then translate the first line into Chinese.\n"
    "1. The train leaves at 7:45 from platform 3 and arrives at noon.\n"
    "2. 天气预报说明天下午有雨，请记得带伞。\n"
    "3. for i in range(10):\n       total += prices[i] * counts[i]\n"
    "<|im_end|>\n<|im_start|>assistant\nThe notes list a train time, a weather warning and a "
    "short loop that adds up prices. 火车七点四十五分从三号站台出发。"
)


def calibrate_kv_scales(model, tokenizer, pool, headroom: float = 2.0) -> tuple[list, list]:
    """Run :data:`CALIBRATION_TEXT` through ``model`` and set ``pool``'s fp8 scales.

    The model's attention must be the paged function (its ``kv_probe`` keyword records the
    largest |K| and |V| of each layer; no KV is written anywhere).

    Returns:
        ``(k_amax, v_amax)``: per-layer largest magnitudes seen.
    """
    ids = tokenizer(CALIBRATION_TEXT, return_tensors="pt")["input_ids"].to(pool.k[0].device)
    probe: dict[int, list[float]] = {}
    with torch.inference_mode():
        model(input_ids=ids, use_cache=False, kv_probe=probe, logits_to_keep=1)
    layers = len(pool.k)
    k_amax = [probe.get(i, [1.0, 1.0])[0] for i in range(layers)]
    v_amax = [probe.get(i, [1.0, 1.0])[1] for i in range(layers)]
    pool.set_scales(k_amax, v_amax, headroom)
    return k_amax, v_amax
