"""Model loading: the embedded SmolLM2 GGUF (cached as safetensors), any Hub id, or a local folder.

Split by concern: :mod:`engine.model.embedded` (the packaged GGUF and its dequantized cache),
:mod:`engine.model.locate` (which of embedded, folder, Hub cache or Hub a name means),
:mod:`engine.model.model_info` (what a loaded model is); this module loads it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

import torch

from engine.errors import ModelLoadError
from engine.model.device import cuda_report, resolve_device, resolve_dtype
from engine.model.accounting import lookup_only_bytes, parameter_count, weight_bytes
from engine.model.embedded import _embedded_for, _embedded_meta, _gguf_path, _say
from engine.model.locate import _locate
from engine.model.model_info import LoadedModel
from engine.protocol import ModelInfo
from engine.model.model_spec import ModelSpec
from engine.model.special_tokens import eos_token_ids

DEFAULT_MODEL = "smollm2-135m"


def default_progress(msg: str) -> None:
    """Print a loading line to stderr (the default ``progress`` callback)."""
    print(f"[load] {msg}", file=sys.stderr, flush=True)


def load_model(name: str = DEFAULT_MODEL, device: str = "auto", dtype: str = "auto",
               trust_remote_code: bool = False,
               progress: Callable[[str], None] | None = default_progress,
               random_weights: bool = False, seed: int = 0, weights: str = "auto") -> LoadedModel:
    """Load a causal LM and its tokenizer for the engine.

    Args:
        name: ``smollm2-135m`` (embedded, the default), a local folder, or a Hub id.
        device: ``auto`` (cuda, then mps, then cpu), ``cpu``, ``cuda[:N]`` or ``mps``.
        dtype: ``auto`` (bf16 on GPUs that support it, else fp16 on GPU, fp32 on cpu) or a name.
        trust_remote_code: passed to transformers; off unless asked for.
        progress: called with one line of text per loading stage; ``None`` for silence.
        random_weights: build the model from its config with seeded random weights instead of
            loading them (the folder then needs only the config and tokenizer files): for
            timing and parity checks on a machine the weights can't be carried to.
        seed: the ``torch.manual_seed`` of those random weights.
        weights: how the matrices are stored: ``auto``, ``fp32``, ``bf16``, ``fp16``, ``int8``
            or ``int4`` (:mod:`engine.model.quant.options`). ``int4`` on the embedded model
            reads the GGUF's Q4_1 blocks directly; other models are quantized as they load.

    Returns:
        :class:`LoadedModel`.

    Raises:
        ModelLoadError: the model can't be found or loaded, or ``weights`` and ``dtype`` don't fit
            this model or device; the message names the model or the field and says why.
    """
    from engine.model.quant.options import resolve_weights

    t0 = time.perf_counter()
    dev = resolve_device(device)
    load_args = {"name": name, "device": dev, "dtype": dtype, "trust_remote_code": trust_remote_code,
                 "random_weights": random_weights, "seed": seed, "weights": weights}
    emb = _embedded_for(name)
    gguf = _gguf_path(emb) if emb is not None else None
    try:
        choice = resolve_weights(weights, dtype, resolve_dtype(dtype, dev), dev,
                                 embedded=emb is not None)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from exc
    torch_dtype = choice.dtype
    if dev == "cpu" and torch_dtype in (torch.bfloat16, torch.float16):
        # a first start compiles the engine's kernels (about 12 s of g++) while the model loads
        from engine.model.quant import int4_kernel
        from engine.worker.kernels import decode_attention

        decode_attention.prebuild()
        if choice.weights in ("int4", "int8"):
            int4_kernel.prebuild()
    direct_q4 = choice.weights == "int4" and gguf is not None and not random_weights
    if direct_q4 and dev != "cpu":   # no kernel on this GPU: the float path notes the fallback
        from engine.model.quant.apply import kernel_available

        direct_q4 = all(kernel_available(w, torch.device(dev))[0] for w in ("int4", "int8"))
    if direct_q4:
        where, source, extra = str(_embedded_meta(emb, gguf, progress)), f"embedded GGUF {gguf.name}", {}
    else:
        where, source, extra = _locate(name, progress)
    _say(progress, f"loading {name} ({source}) on {dev}, weights {choice.weights}, compute "
                   f"{str(torch_dtype).replace('torch.', '')}")
    if dev.startswith("cuda"):
        _say(progress, cuda_report(dev))
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    note = ""
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code, **extra)
        if direct_q4:
            from engine.model.quant.gguf_q4 import load_q4_model

            model = load_q4_model(str(gguf), where, torch_dtype, dev, progress)
            note = ("Q4_1 blocks of the GGUF as int4 groups of 32 (scale d, zero m + 8·d); "
                    "embedding and tied LM head int8 per row from the file's Q8_0 values")
        elif random_weights:
            from transformers import AutoConfig

            torch.manual_seed(seed)
            config = AutoConfig.from_pretrained(where, trust_remote_code=trust_remote_code, **extra)
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype,
                                                     trust_remote_code=trust_remote_code)
            source += f", random weights (seed {seed})"
        else:  # on CUDA straight onto the GPU: no full copy in host memory first
            load_dtype = torch.float32 if choice.quantized and dev == "cpu" else torch_dtype
            on_gpu = {"device_map": {"": dev}} if dev.startswith("cuda") else {}
            model = AutoModelForCausalLM.from_pretrained(
                where, dtype=load_dtype, trust_remote_code=trust_remote_code, **on_gpu, **extra)
    except Exception as exc:  # noqa: BLE001 - any loader failure becomes one clear message
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = " (offline: HF_HUB_OFFLINE=1 and not in the local cache)" if offline else ""
        raise ModelLoadError(f"model {name!r} could not be loaded from {source}{hint}: {why}") from exc
    model.to(dev)  # already there when loaded with device_map (CUDA); CPU and MPS move here
    model.eval()
    if choice.quantized and not direct_q4:
        from engine.model.quant.apply import quantize_model

        try:
            notes = quantize_model(model, choice.weights, torch_dtype)
        except ValueError as exc:
            raise ModelLoadError(f"model {name!r}: {exc}") from exc
        note = "; ".join([f"quantized as it loaded ({'int4 groups of 32, LM head int8' if choice.weights == 'int4' else 'int8 per output channel'})", *notes])
    if choice.weights == "bf16" and dev == "cpu" and torch_dtype == torch.bfloat16:
        from engine.model.quant.packed import pack_model

        note = "; ".join([note, *pack_model(model)]) if note else "; ".join(
            pack_model(model) or ["linear layers on oneDNN's pre-packed bf16 weights"])
    try:
        gen_cfg = GenerationConfig.from_pretrained(where)
    except Exception:  # noqa: BLE001 - many folders have no generation_config.json
        gen_cfg = model.generation_config
    spec = ModelSpec.from_config(model.config, name=name, source=source)
    eos = eos_token_ids(tokenizer, gen_cfg, model.config)
    dtype = str(torch_dtype).replace("torch.", "")
    dtype_bytes = torch.empty(0, dtype=torch_dtype).element_size()
    stored = weight_bytes(model)
    info = ModelInfo(
        name=name, source=source, architecture=type(model).__name__, device=dev,
        dtype=dtype, dtype_bytes=dtype_bytes,
        num_params=parameter_count(model), weights_bytes=stored,
        context_len=_context_len(model.config, tokenizer), spec=spec,
        load_seconds=time.perf_counter() - t0,
        eos_tokens=tuple((i, tokenizer.convert_ids_to_tokens(i)) for i in sorted(eos)),
        weights=choice.weights, weights_note=note,
        kv_dtype=dtype, kv_dtype_bytes=dtype_bytes,   # the KV cache as loaded: the compute dtype
        step_weights_bytes=stored - lookup_only_bytes(model),
    )
    _say(progress, f"ready: {info.num_params / 1e6:.1f} M parameters, "
                   f"{info.weights_bytes / 1e6:.1f} MB of {info.weights} weights, "
                   f"in {info.load_seconds:.1f} s")
    return LoadedModel(model=model, tokenizer=tokenizer, info=info, spec=spec, eos_token_ids=eos,
                       load_args=load_args)


def _context_len(config, tokenizer) -> int:
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        val = getattr(config, attr, None)
        if isinstance(val, int) and val > 0:
            return val
    val = getattr(tokenizer, "model_max_length", None)
    return int(val) if isinstance(val, int) and 0 < val < 10**7 else 2048
