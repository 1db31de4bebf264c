"""Refusing a prompt that cannot fit before tokenizing it.

Tokenizing costs time in proportion to the text (a 5 MB prompt takes seconds), so a prompt
that could never fit the context window is refused by its size alone. One token covers at
most the bytes of the vocabulary's longest token, so a text of more than
``context tokens x longest token bytes`` UTF-8 bytes needs more tokens than the context holds,
whatever it says. The bound is loose (real text averages 3-5 bytes a token, the longest token
is tens of bytes) and never refuses a prompt that fits: a prompt under it is tokenized and
checked by its token count as before.

A prompt under that bound can still take long to tokenize and be far too long (100,000 words
is 500 kB and 100,000 tokens), so a long text is first measured by its beginning alone
(:func:`check_prompt_prefix`): when the first ``PREFIX_CHARS_PER_TOKEN x context`` characters
already make more tokens than the context holds, the whole cannot fit either, and the rest is
never tokenized.
"""

from __future__ import annotations

PREFIX_CHARS_PER_TOKEN = 8
"""Characters of a long prompt measured first, per token of context: text averages 3-5
characters a token, so this prefix of a prompt that is too long usually proves it."""
BOUNDARY_TOKENS = 4
"""Tokens a cut can add at its end (a word split in two), taken off the prefix's count."""
NORMALIZER_SLACK = 4
"""Factor on the bound when the tokenizer normalizes text before splitting it: Unicode
compatibility forms (NFKC) can turn a 3-byte character into a 1-byte one, so one token may
cover more input bytes than its own text."""


def longest_token_bytes(tokenizer) -> int | None:
    """The most UTF-8 bytes of input text one token can stand for, or ``None`` when the
    tokenizer does not list its vocabulary.

    With a byte-level BPE vocabulary (GPT-2, Llama 3, Qwen, SmolLM: the fast tokenizer's
    decoder is ``ByteLevel``) each character of a vocabulary entry is one byte. Otherwise the
    UTF-8 length of the entry is an upper bound (SentencePiece's ``▁`` is 3 bytes for one
    space, ``<0x41>`` 6 for one byte). A tokenizer with a normalizer gets
    :data:`NORMALIZER_SLACK` times that.

    Args:
        tokenizer: a transformers tokenizer.
    """
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # noqa: BLE001 - a tokenizer without a listable vocabulary
        return None
    if not vocab:
        return None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = type(getattr(backend, "decoder", None)).__name__
    if decoder == "ByteLevel":
        longest = max(len(piece) for piece in vocab)
    else:
        longest = max(len(piece.encode("utf-8", "surrogatepass")) for piece in vocab)
    if backend is None or getattr(backend, "normalizer", None) is not None:
        longest *= NORMALIZER_SLACK
    return max(1, longest)


def _texts(prompt) -> list[str]:
    """The text of a prompt: the string, or the string ``content`` of each chat message."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, (list, tuple)):
        texts = [m.get("content") for m in prompt if isinstance(m, dict)]
        return [t for t in texts if isinstance(t, str)]
    return []


def prompt_text_bytes(prompt, limit: int) -> int:
    """UTF-8 bytes of a prompt's text (a string, or the ``content`` strings of chat messages),
    counted only as far as needed: any count above ``limit`` is returned as soon as it is known
    (a character is at least one byte, so a text longer than ``limit`` characters is not
    encoded at all). Anything that is not text counts 0 (the prompt's own checks refuse it)."""
    total = 0
    for text in _texts(prompt):
        if total + len(text) > limit:
            return total + len(text)
        total += len(text.encode("utf-8", "surrogatepass"))
        if total > limit:
            return total
    return total


def check_prompt_bytes(prompt, context_tokens: int, longest: int | None, what: str) -> None:
    """Refuse a prompt whose text alone is too large for ``context_tokens`` tokens.

    Args:
        prompt: a string or a list of chat messages.
        context_tokens: the most tokens a sequence may reach.
        longest: :func:`longest_token_bytes` of the tokenizer (``None``: no check).
        what: the limit's name in the message ("the context window", "the KV cache pool").

    Raises:
        ValueError: starting with ``prompt`` and naming both numbers.
    """
    if longest is None:
        return
    limit = context_tokens * longest
    size = prompt_text_bytes(prompt, limit)
    if size > limit:
        raise ValueError(
            f"prompt is at least {size} bytes of text but {what} of {context_tokens} tokens "
            f"holds at most {limit} bytes ({longest} bytes per token at most): it cannot fit")


def check_prompt_prefix(tokenizer, prompt, context_tokens: int, what: str) -> None:
    """Refuse a long prompt whose beginning alone makes more tokens than ``context_tokens``.

    Only a prompt of more than ``PREFIX_CHARS_PER_TOKEN x context_tokens`` characters is
    measured, by tokenizing that many characters of it (message by message for a chat). A
    cut text has at least the tokens of its beginning, less :data:`BOUNDARY_TOKENS` for the
    word cut in two, so a count above the context proves the whole cannot fit; otherwise the
    prompt is tokenized whole as usual. Text that is not valid is left to the prompt's own
    checks.

    Raises:
        ValueError: starting with ``prompt``, naming both numbers.
    """
    budget = PREFIX_CHARS_PER_TOKEN * context_tokens
    texts = _texts(prompt)
    if sum(len(t) for t in texts) <= budget:
        return
    counted, chars = 0, 0
    for text in texts:
        piece = text[:budget - chars]
        if not piece:
            break
        try:
            ids = tokenizer(piece, add_special_tokens=False)["input_ids"]
        except Exception:  # noqa: BLE001 - a lone surrogate: refused later, naming its place
            return
        counted += max(0, len(ids) - BOUNDARY_TOKENS)
        chars += len(piece)
    if counted > context_tokens - 1:
        raise ValueError(f"prompt is at least {counted} tokens (its first {chars} characters "
                         f"alone) but {what} is {context_tokens} tokens: it cannot fit")
