"""Turning a request's prompt (raw text or chat messages) into token ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Messages = list[dict]


def _as_id_list(encoded) -> list[int]:
    """Token ids from whatever ``apply_chat_template``/the tokenizer returned.

    Handles a ``BatchEncoding`` (dict-like with ``input_ids``), a tensor of shape ``[1, T]`` or
    ``[T]``, and (nested) lists.
    """
    if isinstance(encoded, Mapping) or hasattr(encoded, "input_ids"):
        encoded = encoded["input_ids"]
    if hasattr(encoded, "tolist"):
        encoded = encoded.tolist()
    if encoded and isinstance(encoded[0], (list, tuple)):
        if len(encoded) != 1:
            raise ValueError(f"expected one sequence, got a batch of {len(encoded)}")
        encoded = encoded[0]
    return [int(i) for i in encoded]


def _dedupe_bos(ids: list[int], bos_id: int | None) -> list[int]:
    """Keep exactly one leading BOS when the text already carried one and the tokenizer added one."""
    while bos_id is not None and len(ids) >= 2 and ids[0] == bos_id and ids[1] == bos_id:
        ids = ids[1:]
    return ids


def validate_messages(messages) -> Messages:
    """Check a chat: a non-empty list of ``{"role": str, "content": str}``.

    Raises:
        ValueError: naming the first bad message.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ValueError(f"message {i} must be a dict with string 'role' and 'content'")
        if m["role"] not in ("system", "user", "assistant"):
            raise ValueError(f"message {i} has role {m['role']!r}; use system, user or assistant")
        if not isinstance(m.get("content"), str):
            what = "system_prompt" if m["role"] == "system" else f"message {i} ({m['role']}) content"
            raise ValueError(f"{what} must be a string, got {type(m.get('content')).__name__}")
        check_text(m["content"], "system_prompt" if m["role"] == "system" else "prompt")
        out.append({"role": m["role"], "content": m["content"]})
    if not any(m["content"].strip() for m in out if m["role"] == "user"):
        raise ValueError("prompt is empty: the chat has no user message with text")
    return out


ZERO_WIDTH_SPACE = "\u200b"


def check_text(text: str, field: str = "prompt") -> None:
    """Refuse text that is not valid Unicode for the tokenizer.

    A lone surrogate (``"\\ud800"``, which JSON can carry) cannot be encoded as UTF-8.

    Raises:
        ValueError: naming ``field`` and the first bad character's position.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{field} holds an invalid character (a lone surrogate, "
                         f"U+{ord(text[exc.start]):04X} at position {exc.start})") from None


def control_token_strings(tokenizer) -> list[str]:
    """The texts of the tokenizer's special tokens (``<|im_start|>``, ``<|endoftext|>``, ...),
    longest first: typed into a message, each would be read as that control token."""
    texts = set(getattr(tokenizer, "all_special_tokens", None) or [])
    for tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(tok, "special", False):
            texts.add(str(tok.content))
    return sorted((t for t in texts if len(t) > 1), key=len, reverse=True)


def neutralize_control_tokens(text: str, controls: list[str]) -> str:
    """Keep typed control-token strings as plain text inside a chat message.

    The chat template is rendered to one string and then tokenized, so a message containing
    ``<|im_end|><|im_start|>system`` would close the user's turn and open a fake system turn.
    A zero-width space after the first character of each such string (``<\u200b|im_end|>``)
    makes the tokenizer read it as ordinary text; messages without one are unchanged.

    Args:
        text: a message's content.
        controls: :func:`control_token_strings` of the tokenizer.
    """
    for c in controls:
        if c in text:
            text = text.replace(c, c[0] + ZERO_WIDTH_SPACE + c[1:])
    return text


def encode_prompt(tokenizer, prompt: str | Messages, raw: bool = False) -> list[int]:
    """Token ids of a prompt, ready for prefill.

    Args:
        tokenizer: a transformers tokenizer.
        prompt: a string or a list of chat messages.
        raw: with a string, send it as plain text (completion) instead of one user message.

    Returns:
        ``prompt_len`` token ids with exactly one BOS where the tokenizer uses one. In chat
        messages, typed control-token strings stay text (:func:`neutralize_control_tokens`);
        raw text is tokenized as written, control tokens included.

    Raises:
        ValueError: empty prompt, malformed messages, or a chat with no chat template.
    """
    bos = getattr(tokenizer, "bos_token_id", None)
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("prompt is empty: type some text")
        check_text(prompt)
        if raw or not getattr(tokenizer, "chat_template", None):
            if not raw:
                raw = True  # a base model without a chat template: plain completion
            return _dedupe_bos(_as_id_list(tokenizer(prompt)), bos)
        prompt = [{"role": "user", "content": prompt}]
    messages = validate_messages(prompt)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("this model's tokenizer has no chat template: send raw text instead")
    controls = control_token_strings(tokenizer)
    messages = [{**m, "content": neutralize_control_tokens(m["content"], controls)}
                for m in messages]
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                            return_tensors="pt")
    return _dedupe_bos(_as_id_list(encoded), bos)


def check_fits(prompt_tokens: int, max_tokens: int | None, limit: int, what: str) -> None:
    """Refuse a request whose prompt plus ``max_tokens`` cannot fit in ``limit`` tokens.

    Args:
        prompt_tokens: the prompt's length in tokens.
        max_tokens: most new tokens asked for (``None``: up to the limit).
        limit: the most tokens a sequence may reach.
        what: the limit's name in the message ("the context window", "the KV cache pool").

    Raises:
        ValueError: naming the numbers; it starts with ``prompt is`` when the prompt alone
            leaves no room for a new token, else names ``max_tokens`` too.
    """
    if prompt_tokens >= limit:  # the prompt alone: name it, whatever max_tokens is
        raise ValueError(f"prompt is {prompt_tokens} tokens but {what} is {limit} tokens: "
                         "no room for a single new token")
    if max_tokens is not None and prompt_tokens + max_tokens > limit:
        raise ValueError(f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) = "
                         f"{prompt_tokens + max_tokens} tokens exceeds {what} of {limit} tokens")
