"""Loading the draft model of ``speculative="draft"`` and checking it shares the tokenizer.

The draft is loaded with transformers (``AutoModelForCausalLM.from_pretrained``) from an
embedded name, a local folder or a Hub id (the same lookup as the target,
:func:`engine.model.loader.load_model`), on the target's device and in its compute dtype,
unquantized. Its drafts are token ids the target verifies, so both must use one vocabulary:
the configs' ``vocab_size`` must be equal and, when the draft's folder has a tokenizer, it must
give the target tokenizer's ids for a few test strings (English, Chinese, code, emoji).
"""

from __future__ import annotations

import torch

from engine.errors import ModelLoadError
from engine.spec_decode.draft_proposer import DraftModelProposer

TEST_STRINGS = ("Hello, world! The quick brown fox jumps over the lazy dog.",
                "写一首关于程序员加班的短诗。",
                "def add(a, b):\n    return a + b  # sum\n",
                "naïve café 🙂 1234567")
"""Strings both tokenizers must split into the same ids."""


def check_same_vocabulary(name: str, draft_vocab: int, target_vocab: int,
                          draft_tokenizer=None, target_tokenizer=None) -> None:
    """Refuse a draft whose vocabulary differs from the target's.

    Args:
        name: the draft model as the user named it.
        draft_vocab, target_vocab: the configs' ``vocab_size`` (rows of the LM head).
        draft_tokenizer, target_tokenizer: both tokenizers, or ``None`` to skip the id check
            (the draft's folder has no tokenizer).

    Raises:
        ValueError: the sizes differ or a test string gets different ids; the message names
            the draft model and what differs.
    """
    if draft_vocab != target_vocab:
        raise ValueError(f"draft model {name!r} has a different vocabulary from the target: "
                         f"vocab_size {draft_vocab} vs {target_vocab}; speculative='draft' "
                         f"needs a model with the same tokenizer (a smaller model of the "
                         f"same family)")
    if draft_tokenizer is None or target_tokenizer is None:
        return
    for text in TEST_STRINGS:
        a = draft_tokenizer.encode(text, add_special_tokens=False)
        b = target_tokenizer.encode(text, add_special_tokens=False)
        if list(a) != list(b):
            raise ValueError(f"draft model {name!r} has a different tokenizer from the target: "
                             f"{text!r} becomes {list(a)[:8]}... in the draft and "
                             f"{list(b)[:8]}... in the target; speculative='draft' needs the "
                             f"same tokenizer")


def _tokenizer_or_none(where: str, extra: dict):
    """The tokenizer in ``where``, or ``None`` when it has none (weights-only folder)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(where, **extra)
    except Exception:  # noqa: BLE001 - no tokenizer files: only the sizes are compared
        return None


def load_draft_model(name: str, target, progress=None) -> DraftModelProposer:
    """Load ``name`` as the draft model of ``target``.

    Args:
        name: an embedded name, a local folder or a Hub id.
        target: the target's :class:`engine.model.model_info.LoadedModel` (device, compute dtype,
            vocabulary and tokenizer to match).
        progress: called with a line of text per stage, or ``None``.

    Returns:
        A :class:`DraftModelProposer` (its caches live outside the paged KV pool; see
        :mod:`engine.spec_decode.draft_proposer`).

    Raises:
        ModelLoadError: the model can't be found or loaded.
        ValueError: its vocabulary or tokenizer differs from the target's.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    from engine.model.locate import _locate

    where, source, extra = _locate(name, progress)
    try:
        config = AutoConfig.from_pretrained(where, **extra)
    except Exception as exc:  # noqa: BLE001 - one clear message
        raise ModelLoadError(f"draft model {name!r} could not be read from {source}: "
                             f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
                             ) from exc
    target_vocab = int(target.model.config.vocab_size)
    check_same_vocabulary(name, int(getattr(config, "vocab_size", -1)), target_vocab)
    check_same_vocabulary(name, target_vocab, target_vocab, _tokenizer_or_none(where, extra),
                          target.tokenizer)
    dtype = getattr(torch, target.info.dtype)
    if progress is not None:
        progress(f"loading draft model {name} ({source}) on {target.info.device}, "
                 f"{target.info.dtype}")
    dev = target.info.device
    kwargs = dict(dtype=dtype, **extra)
    if dev.startswith("cuda"):   # straight onto the GPU, no full copy in host memory first
        kwargs["device_map"] = {"": dev}
    try:
        try:
            model = AutoModelForCausalLM.from_pretrained(where, attn_implementation="sdpa",
                                                         **kwargs)
        except (ValueError, ImportError):  # an architecture without SDPA
            model = AutoModelForCausalLM.from_pretrained(where, **kwargs)
    except Exception as exc:  # noqa: BLE001 - one clear message
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"draft model {name!r} could not be loaded from {source}: "
                             f"{why}") from exc
    model.to(dev)
    model.eval()
    max_pos = int(getattr(model.config, "max_position_embeddings", 0) or target.info.context_len)
    return DraftModelProposer(model, name, max_pos)
