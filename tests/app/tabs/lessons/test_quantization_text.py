"""The Quantization lesson's words follow its own table (made-up rows, no model run): which
precision agrees best is computed from the rows, and bf16's extra bytes (a packed copy of the
tied LM head) are explained beside the figure that shows them."""

import re

from app.tabs.lessons import quantization as lesson


def _row(w, top1, kl, mb, lookup_mb=0.0):
    return {"label": f"{w} weights", "weights": w, "kv_cache_dtype": "auto", "perplexity": 15.6,
            "top1_agreement": top1, "kl_mean": kl, "weights_bytes": int(mb * 1e6),
            "lookup_only_bytes": int(lookup_mb * 1e6), "kv_bytes_per_token": 23_040,
            "decode_tokens_per_s": 30.0, "decode_tokens_per_s_vs_fp32": 1.2,
            "prefill_tokens_per_s": 700.0, "batch_tokens_per_s": 150.0}


# the student's run: fp16 agrees at 99.2 %, int4 at 96.9 %; bf16 stores 325.7 MB, fp16 269.0 MB
RES = {"rows": [_row("fp32", 1.0, 0.0, 538.1), _row("bf16", 0.972, 0.0014, 325.7, 56.7),
                _row("fp16", 0.992, 0.0001, 269.0), _row("int8", 0.938, 0.0072, 135.0),
                _row("int4", 0.969, 0.0036, 94.8)],
       "params": {"text_tokens_actual": 1328, "prefill_tokens_actual": 64, "batch": 4,
                  "batch_tokens": 4}}


def test_which_precision_agrees_best_follows_the_measured_top1():
    page = lesson.TEXT + lesson.quant_table(RES)
    assert "int4 agrees with it best" not in page
    assert "In this run fp16 weights agrees with fp32 best**: 99.2% top-1" in page
    assert "int4 96.9%" in page
    # and when int4 does agree best, the page says that instead
    rows = [dict(r) for r in RES["rows"]]
    rows[4]["top1_agreement"] = 0.995
    assert "In this run int4 weights agrees with fp32 best**: 99.5% top-1" in lesson.quant_table(
        {**RES, "rows": rows})


def test_bf16_and_fp16_weight_bytes_are_explained_in_the_table():
    """Both 2 bytes per parameter: the bytes a bf16 decode step reads equal fp16's weights, and
    the difference is named as the tied LM head's dense lookup table."""
    table = lesson.quant_table(RES)
    cells = {line.split("|")[1].strip(): line.split("|")[5].strip()
             for line in table.splitlines() if line.startswith("| ") and "weights" in line}
    bf16 = re.match(r"([\d.]+ MB) \(([\d.]+ MB) read per step\)", cells["bf16 weights"]).groups()
    assert bf16 == ("325.7 MB", cells["fp16 weights"]) == ("325.7 MB", "269.0 MB")
    assert "Why bf16 weights stores more than its bytes per parameter say" in table
    assert "dense (56.7 MB)" in table
    assert "read per step" not in cells["fp16 weights"]
