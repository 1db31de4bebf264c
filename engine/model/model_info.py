"""What a loaded model is: the module and tokenizer with the facts the page and CLI show.

The facts are :class:`engine.protocol.ModelInfo`, the one type every engine fills in (the page
imports it without torch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.model.model_spec import ModelSpec
from engine.protocol import ModelInfo


@dataclass
class LoadedModel:
    """A model ready for the engine: the module, its tokenizer, and facts about both.

    Attributes:
        model: a transformers ``*ForCausalLM`` in eval mode on ``info.device``.
        tokenizer: its tokenizer.
        info: :class:`engine.protocol.ModelInfo`.
        spec: :class:`engine.model.model_spec.ModelSpec` from the model's config (KV formula).
        eos_token_ids: every id that ends generation (generation config, tokenizer EOS, the
            chat template's end-of-turn token).
        load_args: the :func:`engine.model.loader.load_model` arguments that made it (name,
            device, dtype, weights...), so another process can load the same model (the
            compiled step's compile process, :mod:`engine.worker.compiled.compile_process`);
            empty when it was made otherwise.
    """

    model: torch.nn.Module
    tokenizer: object
    info: ModelInfo
    spec: ModelSpec
    eos_token_ids: set[int] = field(default_factory=set)
    load_args: dict = field(default_factory=dict)
