"""Memory estimator: weights, KV cache and activations of a model before loading it.

Works offline from the table in ``assets/model_configs.json``, from a local ``config.json`` or
model folder, and from the Hub's ``config.json`` when online. Formulas: docs/metrics.md, "The KV
cache" and "Memory breakdown"; the KV cache and parameter count come from :class:`engine.model.model_spec.ModelSpec`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from engine.model.model_spec import ModelSpec

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
_ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
            "float8": "fp8", "float": "fp32"}
TABLE_PATH = Path(__file__).resolve().parents[2] / "assets" / "model_configs.json"


def dtype_bytes(dtype) -> float:
    """Bytes per element of a dtype name (``"fp16"``, ``"bfloat16"``, ``"torch.float32"``...).

    Raises:
        ValueError: for a name not in :data:`DTYPE_BYTES` or its aliases.
    """
    if isinstance(dtype, (int, float)):
        return dtype
    key = str(dtype).lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


@lru_cache(maxsize=1)
def _table() -> dict:
    with open(TABLE_PATH, encoding="utf-8") as f:
        return json.load(f)["models"]


def known_models() -> list[str]:
    """Model ids in the shipped table, in table order."""
    return list(_table())


def _table_entry(name: str) -> tuple[str, dict] | None:
    """(id, entry) for an exact id, an alias, or the part after ``/`` (all case-insensitive)."""
    low = name.strip().lower()
    for mid, entry in _table().items():
        names = [mid, mid.split("/")[-1], *entry.get("aliases", [])]
        if low in (n.lower() for n in names):
            return mid, entry
    return None


def _hub_allowed() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() not in ("1", "true", "yes", "on")


def _hub_config_path(repo_id: str) -> str:
    """Download (or take from the local Hub cache) ``config.json`` of ``repo_id``."""
    from huggingface_hub import hf_hub_download

    from engine.model.hub import cached_on_disk, hub_reachable

    if not cached_on_disk(repo_id):
        ok, why = hub_reachable()
        if not ok:
            raise OSError(why)

    return hf_hub_download(repo_id, "config.json")


def load_spec(name_or_path: str, allow_hub: bool | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of a model id, alias, ``config.json`` file or model folder.

    Looks in order at: the shipped table; a local file or folder holding ``config.json``; the
    Hub (only when ``allow_hub`` is true, or when it is ``None`` and ``HF_HUB_OFFLINE`` is unset).

    Raises:
        LookupError: one line naming the model and the ways to fix it, when nothing matched.
        ValueError: a local file that is not a JSON object, or a config field out of range
            (the message names the file or the field).
    """
    hit = _table_entry(name_or_path)
    if hit:
        mid, entry = hit
        return ModelSpec.from_config(entry["config"], name=mid, source=entry["source"])
    path = Path(name_or_path).expanduser()
    cfg = path / "config.json" if path.is_dir() else path
    if cfg.is_file():
        try:
            with open(cfg, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"model: {cfg} is not a readable config.json ({exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"model: {cfg} holds no JSON object, so it is no config.json")
        name = path.name if path.is_dir() else path.parent.name or path.name
        return ModelSpec.from_config(data, name=name, source=f"local file {cfg}")
    hub = _hub_allowed() if allow_hub is None else allow_hub
    why = "the Hub is off (HF_HUB_OFFLINE is set)"
    if hub and "/" in name_or_path and not path.exists():
        try:
            with open(_hub_config_path(name_or_path), encoding="utf-8") as f:
                data = json.load(f)
            url = f"https://huggingface.co/{name_or_path}/blob/main/config.json"
            return ModelSpec.from_config(data, name=name_or_path, source=f"Hub config.json ({url})")
        except Exception as exc:  # network down, gated repo, no such repo
            why = f"the Hub lookup failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    elif hub:
        why = "it is not a Hub id of the form owner/name"
    raise LookupError(
        f"unknown model {name_or_path!r}: not in the shipped table, no config.json at that path, "
        f"and {why}; use a table id ({', '.join(known_models())}), a folder or config.json path, "
        "or an owner/name Hub id with HF_HUB_OFFLINE unset")


def activation_estimate(spec: ModelSpec, dtype_bytes: float, batch: int, tokens: int,
                        chunk_tokens: int | None = None) -> int:
    """Bytes of activations alive at the peak of one forward pass of ``batch`` × ``tokens``.

    docs/metrics.md: hidden states b·T·hidden plus the MLP's intermediate tensors 3·b·T·I (both in
    the model dtype), plus fp32 logits b·V·4 for the last position only.

    Args:
        chunk_tokens: with chunked prefill, at most this many tokens (of all sequences together)
            go through one forward pass, so b·T above becomes min(b·T, chunk_tokens); ``None``
            is one unchunked prefill of every sequence at once (the worst case). At Qwen2.5-7B,
            fp16, 8 × 8,192 tokens that is 7.9 GB; in chunks of 2,048 tokens, about 0.25 GB.
    """
    b, t = batch, tokens
    at_once = b * t if chunk_tokens is None else min(b * t, max(1, int(chunk_tokens)))
    per_elem = at_once * spec.hidden_size + 3 * at_once * spec.intermediate_size
    return int(round(per_elem * dtype_bytes)) + b * spec.vocab_size * 4


def kv_tokens_with_samples(seq_len: int, samples: int = 1, prompt_tokens: int = 0,
                           block_size: int | None = None) -> tuple[int, int]:
    """Tokens one request's KV cache holds when it decodes ``samples`` answers (beams or
    parallel samples) of one prompt.

    Without block sharing each answer keeps its own copy of the prompt: ``samples`` ×
    ``seq_len`` tokens. With PagedAttention's block sharing (Kwon et al. 2023, §4.4) the prompt's
    full blocks are stored once and referenced by every answer (copy-on-write: the last,
    partial block is copied), so only the rest is per answer.

    Args:
        seq_len: prompt + output tokens of one answer. samples: answers per request (>= 1).
        prompt_tokens: the shared prompt's length (clamped to ``seq_len``).
        block_size: tokens per KV block; ``None`` shares no block (no sharing).

    Returns:
        ``(shared_tokens, per_sample_tokens)``: stored once, and stored once per answer.
    """
    prompt = min(max(0, int(prompt_tokens)), seq_len)
    shared = prompt // block_size * block_size if block_size and samples > 1 else 0
    return shared, seq_len - shared


@dataclass
class MemoryEstimate:
    """Predicted memory of running a model (all sizes in bytes).

    Attributes:
        model: the spec's name; dtype: the dtype name asked for; dtype_bytes: bytes per element.
        batch, seq_len: sequences and tokens per sequence.
        weights_bytes: parameters × dtype bytes (as stored, for quantized weights). kv_bytes: the KV cache at ``seq_len`` tokens.
        kv_bytes_per_token: one token of one sequence in a full-attention cache.
        activation_bytes: :func:`activation_estimate` for a prefill of ``seq_len`` tokens.
        total_bytes: weights + KV + activations + overhead. spec: the numbers used.
        kv_dtype_bytes: bytes per KV element when the KV cache has its own dtype (0: ``dtype``).
        overhead_bytes: framework overhead added as given (CUDA context, allocator).
        samples: answers per request (beams or parallel samples); shared_tokens: prompt tokens
            per request stored once for all of them (block sharing), see
            :func:`kv_tokens_with_samples`.
    """

    model: str
    dtype: str
    dtype_bytes: float
    batch: int
    seq_len: int
    weights_bytes: int
    kv_bytes: int
    kv_bytes_per_token: int
    activation_bytes: int
    total_bytes: int
    spec: ModelSpec
    kv_dtype_bytes: float = 0
    overhead_bytes: int = 0
    samples: int = 1
    shared_tokens: int = 0

    def to_dict(self) -> dict:
        """A JSON-ready dict, the spec nested and the KV formula spelled out as ``kv_formula``."""
        d = asdict(self)
        d["kv_formula"] = self.spec.formula_text(self.kv_dtype_bytes or self.dtype_bytes,
                                                 self.seq_len, self.batch, self.samples,
                                                 self.shared_tokens)
        return d


def _spec_of(config) -> ModelSpec:
    if isinstance(config, ModelSpec):
        return config
    if isinstance(config, (str, os.PathLike)):
        return load_spec(str(config))
    return ModelSpec.from_config(config, source="config given by the caller")


def quantized_weight_parts(spec: ModelSpec, weights: str, compute_bytes: float) -> list[dict]:
    """The parts of :func:`quantized_weight_bytes`, so a page can say why int4 weights are more
    than 0.5 B × parameters.

    Returns:
        Dicts ``{"name", "params", "bytes", "how"}`` in this order: ``codes`` (the decoder
        matrices' packed codes: ``N·K/2`` bytes for int4, ``N·K`` for int8), ``scales`` (int4: a
        bf16 scale and zero per 32 inputs, ``N·K/32 × 4``; int8: a bf16 scale per output row,
        ``N × 2``; ``params`` is 0: they are not parameters), ``tables`` (the input embedding and
        the LM head, int8 with a bf16 scale per row, once when tied: ``V·h + V·2`` each) and
        ``floats`` (norms and biases in the compute dtype). The bytes sum to
        :func:`quantized_weight_bytes`; the params sum to ``spec.weight_count()``.
    """
    h, inter, v = spec.hidden_size, spec.intermediate_size, spec.vocab_size
    q, kv = spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim
    mats = [(q, h), (kv, h), (kv, h), (h, q)] + [(inter, h)] * (spec.mlp_matrices - 1) + [(h, inter)]
    dec = spec.layers * sum(n * k for n, k in mats)
    if weights == "int4":
        codes = spec.layers * sum(n * k // 2 for n, k in mats)
        scales = spec.layers * sum(n * k // 32 * 4 for n, k in mats)
        how_codes, how_scales = "4-bit codes (0.5 B each)", "bf16 scale and zero per 32 weights"
    else:
        codes = dec
        scales = spec.layers * sum(n * 2 for n, k in mats)
        how_codes, how_scales = "8-bit codes (1 B each)", "bf16 scale per output row"
    n_tables = 1 if spec.tie_word_embeddings else 2
    floats = spec.weight_count() - v * h * n_tables - dec
    tables_how = ("int8 embedding, tied with the LM head" if n_tables == 1 else "int8 embedding and LM head") + \
        f" ({v:,} × {h:,}{'' if n_tables == 1 else ' each'}, a bf16 scale per row)"
    return [
        {"name": "codes", "params": dec, "bytes": codes, "how": f"decoder matrices in {how_codes}"},
        {"name": "scales", "params": 0, "bytes": scales, "how": how_scales},
        {"name": "tables", "params": v * h * n_tables, "bytes": (v * h + v * 2) * n_tables, "how": tables_how},
        {"name": "floats", "params": floats, "bytes": int(round(floats * compute_bytes)),
         "how": f"norms and biases ({_fmt_bytes_per(compute_bytes)} B each)"},
    ]


def _fmt_bytes_per(x: float) -> str:
    return f"{int(x)}" if float(x).is_integer() else f"{x}"


def quantized_weight_bytes(spec: ModelSpec, weights: str, compute_bytes: float) -> int:
    """Bytes of the weights as :mod:`engine.model.quant` stores them (what ``weight_bytes``
    measures once loaded, less non-parameter buffers such as rotary tables).

    ``int4``: each decoder matrix ``N × K`` as packed codes (``N·K/2``) plus a bf16 scale and
    zero per 32 inputs (``N·K/32 × 4``); ``int8``: ``N·K`` codes plus a bf16 scale per output
    row (``N × 2``). In both, the LM head and the input embedding are int8 per row (once when
    tied); norms and biases stay in the compute dtype. The sum of
    :func:`quantized_weight_parts`.

    Args:
        spec: the model's numbers; weights: ``int4`` or ``int8``; compute_bytes: bytes per
            element of the compute dtype.
    """
    return sum(p["bytes"] for p in quantized_weight_parts(spec, weights, compute_bytes))


def estimate(config, dtype: str = "fp16", batch: int = 1, seq_len: int = 2048,
             weights: str | None = None, kv_dtype: str | None = None, *,
             chunk_tokens: int | None = None, overhead_bytes: int = 0, samples: int = 1,
             prompt_tokens: int = 0, block_size: int | None = None) -> MemoryEstimate:
    """Estimate weights, KV cache and activation bytes for ``batch`` sequences of ``seq_len``.

    Args:
        config: a :class:`ModelSpec`, a config dict or ``PretrainedConfig``, or a name/path for
            :func:`load_spec`.
        dtype: a name from :data:`DTYPE_BYTES` (weights, KV cache and activations all use it,
            unless ``weights``/``kv_dtype`` say otherwise).
        weights: ``int4`` or ``int8`` for quantized weights (:func:`quantized_weight_bytes`),
            another dtype name for plain weights in it, ``None`` for ``dtype``.
        kv_dtype: the KV cache's dtype name (``fp8``, ``bf16``...), ``None`` for ``dtype``.
        chunk_tokens: chunked prefill's tokens per forward pass (:func:`activation_estimate`);
            ``None`` for one unchunked prefill.
        overhead_bytes: framework overhead to add (CUDA context, allocator cache).
        samples, prompt_tokens, block_size: answers per request and their shared prompt
            (:func:`kv_tokens_with_samples`); the defaults are one answer.

    Raises:
        LookupError: unknown model name (see :func:`load_spec`). ValueError: unknown dtype.
    """
    spec = _spec_of(config)
    nbytes = dtype_bytes(dtype)
    if weights in ("int4", "int8"):
        weights_b = quantized_weight_bytes(spec, weights, nbytes)
    else:
        weights_b = int(round(spec.weight_count() * dtype_bytes(weights or dtype)))
    kv_b = dtype_bytes(kv_dtype) if kv_dtype else nbytes
    samples = max(1, int(samples))
    shared, own = kv_tokens_with_samples(seq_len, samples, prompt_tokens, block_size)
    if samples == 1:
        kv = spec.kv_cache_bytes(seq_len, kv_b, batch)
    else:  # a sliding window applies per answer; the split keeps the full-attention total exact
        kv = spec.kv_cache_bytes(shared, kv_b, batch) + spec.kv_cache_bytes(own, kv_b, batch * samples)
    act = activation_estimate(spec, nbytes, batch, seq_len, chunk_tokens)  # a prompt is prefilled once
    overhead = max(0, int(overhead_bytes))
    return MemoryEstimate(
        model=spec.name, dtype=str(dtype), dtype_bytes=nbytes, batch=batch, seq_len=seq_len,
        weights_bytes=weights_b, kv_bytes=kv, kv_bytes_per_token=spec.kv_bytes_per_token(kv_b),
        activation_bytes=act, total_bytes=weights_b + kv + act + overhead, spec=spec,
        kv_dtype_bytes=kv_b, overhead_bytes=overhead, samples=samples, shared_tokens=shared)
