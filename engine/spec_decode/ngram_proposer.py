"""Prompt lookup: propose what followed the latest earlier occurrence of the recent n-gram.

Saxena, "Prompt Lookup Decoding" (2023), as vLLM's ``ngram`` proposer: take the last ``n``
tokens of the sequence (prompt and output so far), find the same ``n`` tokens earlier in it,
and propose the tokens that followed them there. Longer n-grams are tried first, so a long
quoted passage is followed rather than a common pair of words. No second model is needed; it
shines where the answer copies its input (summaries with quotes, code edits).
"""

from __future__ import annotations


class NgramProposer:
    """Drafts tokens by n-gram lookup in a sequence's own tokens.

    Args:
        min_n, max_n: shortest and longest n-gram tried, in tokens (longest first).
    """

    def __init__(self, min_n: int = 2, max_n: int = 4):
        self.min_n = min_n
        self.max_n = max_n

    def propose(self, token_ids: list[int], k: int) -> list[int]:
        """Up to ``k`` draft tokens to follow ``token_ids``.

        Args:
            token_ids: the sequence so far (prompt then output), ``[L]`` ids.
            k: most tokens to propose.

        Returns:
            The tokens that followed the most recent earlier occurrence of the longest
            matching suffix n-gram (``max_n`` down to ``min_n``), at most ``k`` of them; ``[]``
            when no suffix of at least ``min_n`` tokens occurs earlier, or ``k < 1``.
        """
        L = len(token_ids)
        if k < 1 or L <= self.min_n:
            return []
        last = token_ids[-1]
        # candidate ends: earlier positions holding the last token, most recent first
        ends = [j for j in range(L - 2, -1, -1) if token_ids[j] == last]
        for n in range(min(self.max_n, L - 1), self.min_n - 1, -1):
            suffix = token_ids[L - n:]
            for j in ends:
                start = j - n + 1
                if start >= 0 and token_ids[start:j + 1] == suffix:
                    return token_ids[j + 1:j + 1 + k]
        return []
