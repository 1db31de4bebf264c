"""Incremental detokenization and stop strings: turning output ids into safe text deltas."""

from __future__ import annotations

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Decodes a growing list of output ids into text, one complete piece at a time.

    Uses a sliding pair of offsets (the scheme of Hugging Face TGI and vLLM): the text of the ids
    from ``prefix_offset`` on is compared with the text of ``prefix_offset:read_offset``; the
    difference is new text. When the new text ends in U+FFFD a multi-byte character (Chinese,
    emoji, byte-fallback pieces) is still incomplete, so nothing is emitted until the next token
    completes it. Special tokens are skipped.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""
        self._prefix_offset = 0
        self._read_offset = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def add(self, token_id: int) -> str:
        """Append one token; return the newly completed text (may be ``""``)."""
        self.ids.append(token_id)
        prefix = self._decode(self.ids[self._prefix_offset:self._read_offset])
        full = self._decode(self.ids[self._prefix_offset:])
        if len(full) > len(prefix) and not full.endswith(REPLACEMENT):
            delta = full[len(prefix):]
            self._prefix_offset = self._read_offset
            self._read_offset = len(self.ids)
            self.text += delta
            return delta
        return ""

    def finish(self) -> str:
        """Reconcile with a full decode at the end; return any text still owed.

        After this, ``self.text == tokenizer.decode(ids, skip_special_tokens=True)`` whenever the
        streamed text is a prefix of the full decode (it always is for byte-level BPE), except
        that an incomplete last character (generation stopped mid-character, which decodes to
        U+FFFD) is dropped, so no text ever carries U+FFFD.
        """
        full = self._decode(self.ids).rstrip(REPLACEMENT)  # a character cut off by the end
        if full.startswith(self.text) and len(full) > len(self.text):
            delta = full[len(self.text):]
            self.text = full
            return delta
        return ""


class StopStringMatcher:
    """Finds stop strings in the output text and holds back text that may start one.

    Args:
        stops: the request's stop strings (none is fine).
    """

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self._hold = max((len(s) for s in self.stops), default=1) - 1

    def find(self, text: str, start: int) -> tuple[int, str] | None:
        """Earliest stop string in ``text`` that ends after ``start``: (index, stop) or None."""
        best = None
        lo = max(0, start - self._hold)
        for s in self.stops:
            i = text.find(s, lo)
            if i != -1 and (best is None or i < best[0]):
                best = (i, s)
        return best

    def safe_end(self, text: str) -> int:
        """Length of ``text`` that can be shown: it cannot be the start of any stop string."""
        if not self.stops:
            return len(text)
        for k in range(min(self._hold, len(text)), 0, -1):
            tail = text[-k:]
            if any(s.startswith(tail) for s in self.stops):
                return len(text) - k
        return len(text)


class TokenTexts:
    """The text of single tokens (``tokenizer.decode([id])``), remembered once computed.

    Every step shows the chosen token and its top candidates for every running request; most
    of those ids repeat, and a dictionary lookup is far cheaper than a decode. At most one
    entry per vocabulary id.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._texts: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self.tokenizer.decode([token_id])
        return text
