"""What a loaded model is: the module and tokenizer with the facts the page and CLI show."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.model.model_spec import ModelSpec


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
