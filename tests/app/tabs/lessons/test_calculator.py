"""The KV cache calculator lesson against hand-worked figures: separate weights and KV
dtypes, a framework-overhead row, chunked or unchunked activations, sequence lengths down to 1,
MiB beside MB, answers per request with and without block sharing, and refused values that
never stay in their box beside an old chart."""

import ast
import re

import pytest

from app.tabs.lessons.calculator import (CHUNKED, DEFAULTS, NUMBERS, UNCHUNKED, calculator_update,
                                   calculator_table, calculator_view, fmt_both)
from app.render.fmt import fmt_bytes
from engine.experiments import calculator
from engine.telemetry.estimator import activation_estimate, estimate, load_spec, quantized_weight_bytes

QWEN, LLAMA = "Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-2-7b-hf"


def test_mib_beside_mb():
    assert fmt_both(469_762_048) == "469.8 MB (448.0 MiB)"  # "448 MB" in MiB
    assert fmt_both(2_621_440) == "2.6 MB (2.5 MiB)"
    assert fmt_both(512) == "512 B"


def test_llama_5_tokens_can_be_entered():
    _, md = calculator_view(LLAMA, "", None, 5, 1, "fp16", "fp16")
    assert "2,621,440 B" in md and "2.6 MB (2.5 MiB)" in md  # docs/metrics.md's Llama-2-7B check
    _, md = calculator_view(LLAMA, "", None, 1, 1, "fp16", "fp16")
    assert "⚠" not in md and "| KV cache | **524.3 KB (512.0 KiB)**" in md


def test_weights_and_kv_cache_have_their_own_dtype():
    spec = load_spec(QWEN)
    calc = calculator.calculate(QWEN, 8192, 1, "int4", weights="int4", kv_dtype="fp8")
    assert calc["weights_bytes"] == quantized_weight_bytes(spec, "int4", 2)  # activations in bf16
    assert calc["kv_bytes"] == 469_762_048 // 2 and calc["kv_dtype"] == "fp8" and calc["dtype"] == "bf16"
    fig, md = calculator_view(QWEN, "", None, 8192, 1, "int4", "fp8")
    assert "stored as int4" in md and "| KV cache | **234.9 MB (224.0 MiB)** | fp8" in md
    assert "weights int4, KV fp8" in fig.layout.title.text
    bf16_kv = calculator.calculate(QWEN, 8192, 1, "int8", weights="int8", kv_dtype="bf16")
    assert bf16_kv["kv_bytes"] == 469_762_048


def test_activation_assumption_unchunked_and_chunked():
    spec = load_spec(QWEN)
    unchunked = activation_estimate(spec, 2, 8, 8192)
    assert unchunked == pytest.approx(7.9e9, rel=0.01)  # the 7.9 GB for one unchunked prefill
    chunked = activation_estimate(spec, 2, 8, 8192, chunk_tokens=2048)
    assert chunked == activation_estimate(spec, 2, 1, 2048) + 7 * spec.vocab_size * 4 and chunked < unchunked / 30
    _, md = calculator_view(QWEN, "", None, 8192, 8, "fp16", "fp16", UNCHUNKED)
    assert "7.9 GB" in md and "one unchunked prefill of 8 × 8,192 tokens at once" in md
    _, md = calculator_view(QWEN, "", None, 8192, 8, "fp16", "fp16", CHUNKED, 2048)
    assert "at most 2,048 tokens per forward pass" in md and "7.9 GB" not in md


def test_framework_overhead_row_adds_to_the_total():
    base = calculator.calculate(QWEN, 4096, 1, "fp16")
    more = calculator.calculate(QWEN, 4096, 1, "fp16", overhead_bytes=2 * 10**9)
    assert more["total_bytes"] == base["total_bytes"] + 2 * 10**9 and more["overhead_bytes"] == 2 * 10**9
    fig, md = calculator_view(QWEN, "", None, 4096, 1, "fp16", "fp16", UNCHUNKED, 2048, 2.0)
    assert "| framework overhead | **2.0 GB (1.9 GiB)** | CUDA context and allocator" in md
    assert [t.name.split(" ")[0] for t in fig.data] == ["weights", "KV", "activations", "framework"]


def test_answers_per_request_multiply_the_kv_cache_with_and_without_sharing():
    one = calculator.calculate(QWEN, 8192, 1, "fp16")["kv_bytes"]
    unshared = calculator.calculate(QWEN, 8192, 1, "fp16", samples=4, prompt_tokens=4096, block_sharing=False)
    shared = calculator.calculate(QWEN, 8192, 1, "fp16", samples=4, prompt_tokens=4096)
    assert unshared["kv_bytes"] == 4 * one  # each beam keeps its own copy of the prompt
    assert shared["kv_bytes"] == one // 2 + 4 * one // 2  # the prompt's blocks once, the rest per beam
    assert shared["kv_bytes_unshared"] == unshared["kv_bytes"] and shared["shared_tokens"] == 4096
    odd = calculator.calculate(QWEN, 100, 1, "fp16", samples=2, prompt_tokens=40)
    assert odd["shared_tokens"] == 32  # only full 16-token blocks are shared
    _, md = calculator_view(QWEN, "", None, 8192, 1, "fp16", "fp16", UNCHUNKED, 2048, 0.0, 4, 4096, True)
    assert "4 answers per request" in md and "1.9 GB</b> if each keeps its own" in md
    assert "1.2 GB</b> with block sharing" in md and "counted with block sharing" in md
    _, md = calculator_view(QWEN, "", None, 8192, 1, "fp16", "fp16", UNCHUNKED, 2048, 0.0, 4, 4096, False)
    assert "counted without block sharing: <b>1.9 GB</b>" in md and "would be the figure with sharing on" in md
    assert estimate(QWEN, "fp16", 1, 8192, samples=1).kv_bytes == one


def test_a_refused_value_goes_back_to_the_last_accepted_one():
    last = {**DEFAULTS, "seq_len": 2048, "batch": 4}
    ok = [2048, 4, 1, 1024, 2048, 0.5]
    fig, md, status, accepted, *boxes = calculator_update(QWEN, "", None, "fp16", "fp16", UNCHUNKED, True,
                                                          last, *ok)
    assert fig is not None and "| T4 16 GB |" in md and status is None and boxes == [None] * 6
    assert accepted == dict(zip(NUMBERS, ok))
    bad = [0, 4, 1, 1024, 2048, 0.5]  # a sequence length of 0 is refused
    fig, md, status, kept, *boxes = calculator_update(QWEN, "", None, "fp16", "fp16", UNCHUNKED, True,
                                                      accepted, *bad)
    assert fig is None and md is None  # figure and table stay as they were ...
    assert boxes == [accepted[k] for k in NUMBERS] and boxes[0] == 2048  # ... and so does the box
    assert "sequence length must be a whole number in [1," in status and "sequence length 2048" in status
    _, _, status, _, *boxes = calculator_update(QWEN, "", None, "fp16", "fp16", UNCHUNKED, True, None,
                                                4096, 1, 1, 0, 2048, -1.0)
    assert "framework overhead must be" in status and boxes[-1] == DEFAULTS["overhead_gb"]
    # the boxes put back fire a change of their own: the message stays, the chart is redrawn
    fig, _, status, _, *boxes = calculator_update(QWEN, "", None, "fp16", "fp16", UNCHUNKED, True, accepted,
                                                  *[accepted[k] for k in NUMBERS])
    assert fig is not None and status is None and boxes == [None] * 6
    _, _, status, _, *_ = calculator_update(QWEN, "", None, "fp16", "fp16", UNCHUNKED, True, accepted,
                                            4096, 4, 1, 1024, 2048, 0.5)
    assert status == ""  # a new accepted value clears it
    fig, md, status, kept, *boxes = calculator_update(QWEN, "", None, "fp16", "fp16", UNCHUNKED, True, accepted,
                                                      None, 4, 1, 1024, 2048, 0.5)
    assert fig is None and md is None and boxes == [None] * 6 and kept == accepted  # an emptied box
    assert "Type a value for sequence length" in status


def _printed_equation(md: str) -> tuple[str, int, int]:
    """The calculator's KV equation line: (the equation, the value of its left side computed from
    the printed numbers, the printed result)."""
    line = next(ln.strip("`") for ln in md.splitlines() if ln.startswith("`") and " = " in ln)
    left, right = line.rsplit(" = ", 1)
    arithmetic = re.sub(r"[A-Za-z_]+", "", left).replace(",", "").replace("×", "*")
    value = eval(compile(ast.parse(arithmetic, mode="eval"), "<equation>", "eval"), {"__builtins__": {}})
    return line, round(value), int(right.split()[0].replace(",", ""))


@pytest.mark.parametrize("model, seq, batch, samples, prompt, sharing", [
    ("google/gemma-2-2b", 8192, 1, 1, 0, True),      # 13 sliding layers at 4,096, 13 full at 8,192
    ("mistralai/Mistral-7B-v0.1", 8192, 2, 1, 0, True),  # every layer slides
    ("microsoft/Phi-3-mini-4k-instruct", 4096, 3, 1, 0, True),
    (QWEN, 2048, 1, 4, 1024, True),                   # 4 beams sharing the prompt's blocks
    (QWEN, 2048, 1, 4, 1024, False),                  # 4 beams, each its own copy
    ("google/gemma-2-2b", 8192, 2, 4, 4096, True),   # beams and a window together
])
def test_printed_kv_equation_equals_its_result_and_the_kv_row(model, seq, batch, samples, prompt, sharing):
    calc = calculator.calculate(model, seq, batch, "fp16", samples=samples, prompt_tokens=prompt,
                                block_sharing=sharing)
    _, md = calculator_view(model, "", None, seq, batch, "fp16", "fp16", UNCHUNKED, 2048, 0.0, samples,
                            prompt, sharing)
    line, value, printed = _printed_equation(md)
    assert value == printed == calc["kv_bytes"], line
    assert f"**{fmt_both(calc['kv_bytes'])}**" in md  # the KV row shows that same result
    if samples > 1:
        assert f"({batch} batch × {samples} answers)" in line
        assert ("tokens × 1 batch +" in line) is (sharing and batch == 1)


def test_gemma_equation_is_the_one_the_result_comes_from():
    calc = calculator.calculate("google/gemma-2-2b", 8192, 1, "fp16")
    assert calc["kv_formula"] == ("2 × 4 KV heads × 256 head_dim × 2 B × 1 batch × (13 full layers × 8,192 "
                                  "tokens + 13 sliding layers × 4,096 tokens) = 654,311,424 B")


@pytest.mark.parametrize("weights", ["int4", "int8"])
def test_quantized_weights_row_says_what_is_beyond_bits_times_parameters(weights):
    """Qwen2.5-7B in int4 is 5.2 GB, not 0.5 B × 7.6 B = 3.8 GB: the row adds up the codes, the
    scales and zeros, the int8 embedding and LM head and the norms, and those parts are the estimate."""
    calc = calculator.calculate(QWEN, 2048, 1, "fp16", weights=weights)
    parts = {p["name"]: p for p in calc["weights_parts"]}
    spec = load_spec(QWEN)
    assert sum(p["bytes"] for p in parts.values()) == calc["weights_bytes"] == \
        quantized_weight_bytes(spec, weights, 2)
    assert sum(p["params"] for p in parts.values()) == calc["params"] == spec.weight_count()
    v, h = spec.vocab_size, spec.hidden_size
    assert parts["tables"]["bytes"] == 2 * (v * h + 2 * v)  # untied: embedding and LM head, int8 + scales
    per = 0.5 if weights == "int4" else 1
    assert parts["codes"]["bytes"] == per * parts["codes"]["params"]
    if weights == "int4":  # a bf16 scale and a bf16 zero per 32 weights: 4 B per 32
        assert parts["scales"]["bytes"] == parts["codes"]["params"] // 32 * 4
    row = next(ln for ln in calculator_table(calc).splitlines() if ln.startswith("| weights"))
    assert f"{per:g} B × {calc['params']:,} parameters alone would be {fmt_bytes(per * calc['params'])}" in row
    for p in parts.values():
        assert f"{fmt_bytes(p['bytes'])} {p['how']}" in row
    assert "scales and zeros" in row and "int8 embedding and LM head" in row
    if weights == "int4":
        assert "5.2 GB" in row and "3.8 GB" in row
    assert calculator.calculate(QWEN, 2048, 1, "fp16")["weights_parts"] == []


def test_the_default_unchunked_activations_are_called_the_worst_case_beside_the_chunked_total():
    """The article's example (Qwen2.5-7B, batch 8, 8,192 tokens, fp16): 27.4 GB with the default
    unchunked prefill against the article's ~18 GB; the total row says the default is the worst
    case and gives the chunked total, the same figure the chunked choice prints."""
    import re

    _, worst = calculator_view(QWEN, "", None, 8192, 8, "fp16", "fp16", UNCHUNKED, 2048)
    _, chunked = calculator_view(QWEN, "", None, 8192, 8, "fp16", "fp16", CHUNKED, 2048)
    row = next(line for line in worst.splitlines() if line.startswith("| **total**"))
    assert "**worst case**" in row
    said = re.search(r"the total is ([^|]+?) \|", row).group(1)
    theirs = re.search(r"\| \*\*total\*\* \| \*\*([^*]+)\*\* \|", chunked).group(1)
    assert said == theirs
    assert "worst case" not in next(line for line in chunked.splitlines() if line.startswith("| **total**"))
