"""Which tokens end generation, and which tokens the sampler's penalties never touch."""

from __future__ import annotations

END_TOKEN_TEXTS = ("<|im_end|>", "<|eot_id|>", "<|end_of_turn|>", "<end_of_turn>", "<|end|>",
                   "<|endoftext|>", "</s>", "<|end_of_text|>")


def eos_token_ids(tokenizer, gen_cfg, config) -> set[int]:
    """Every id that ends generation.

    The union of the generation config's EOS (an int or a list), the model config's, the
    tokenizer's ``eos_token_id``, and each end-of-text / end-of-turn special token the
    tokenizer declares (:data:`END_TOKEN_TEXTS`, e.g. ``<|im_end|>`` and ``<|endoftext|>``):
    a model that emits any of them has ended its text, whatever the template uses.
    """
    ids: set[int] = set()
    for src in (getattr(gen_cfg, "eos_token_id", None), getattr(config, "eos_token_id", None),
                getattr(tokenizer, "eos_token_id", None)):
        if isinstance(src, int):
            ids.add(src)
        elif isinstance(src, (list, tuple)):
            ids.update(int(i) for i in src if i is not None)
    vocab = tokenizer.get_vocab()
    declared = set(getattr(tokenizer, "all_special_tokens", None) or [])
    for tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(tok, "special", False):
            declared.add(str(tok.content))
    for tok in END_TOKEN_TEXTS:
        if tok in vocab and tok in declared:
            ids.add(vocab[tok])
    return ids


def special_token_ids(tokenizer) -> set[int]:
    """Ids of the tokenizer's special tokens (BOS, EOS, the chat template's control tokens).

    The sampler never penalises these: a repetition penalty on ``<|im_end|>`` (which every
    earlier turn of a chat contains) would keep a reply from ending.
    """
    ids = set(getattr(tokenizer, "all_special_ids", None) or [])
    for tid, tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(tok, "special", False):
            ids.add(int(tid))
    return {int(i) for i in ids if i is not None}
