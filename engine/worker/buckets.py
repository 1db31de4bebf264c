"""The one bucket rule of the static-buffer backends (CUDA graphs, compiled decode).

A static step runs fixed shapes from fixed addresses, so a step's rows are padded up to a
bucket: ``(rows, width)``, the smallest batch bucket that holds its rows and the smallest
table-width bucket (in blocks) that holds its longest block table. The CUDA-graph backend has
one width bucket per power of two; the compiled backend one, the whole context window (its
attention op is opaque to the compiler and reads only the blocks a step needs).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.scheduler_output import ScheduledSeq

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32)
"""Rows a static step may hold, smallest first (as nano-vllm's and vLLM's capture sizes)."""


def bucket_for(n: int, buckets) -> int | None:
    """The smallest of ``buckets`` (ascending) that holds ``n``; ``None`` when none does."""
    return next((b for b in buckets if b >= n), None)


def block_buckets(max_blocks: int, smallest: int = 4) -> tuple[int, ...]:
    """Powers of two from ``smallest`` up to the first that holds ``max_blocks`` blocks."""
    out, b = [], smallest
    while True:
        out.append(b)
        if b >= max_blocks:
            return tuple(out)
        b *= 2


def rows_of(e: ScheduledSeq) -> int:
    """Rows an entry fills in a static step (and logits it gets back): its new token and the
    ``k`` drafts it verifies, ``1 + k``."""
    return 1 + len(e.draft_ids)


def is_decode_step(e: ScheduledSeq) -> bool:
    """Whether ``e`` computes only its next token (and the drafts it verifies)."""
    return e.num_new == rows_of(e)


@dataclass(frozen=True)
class Buckets:
    """Which static shape holds a set of decode entries.

    Attributes:
        rows: batch buckets, ascending.
        widths: table-width buckets in blocks, ascending.
        block_size: tokens per block.
    """

    rows: tuple[int, ...]
    widths: tuple[int, ...]
    block_size: int

    def key(self, entries: list[ScheduledSeq], ready=None) -> tuple[int, int] | None:
        """``(rows, width)`` of the smallest bucket that holds ``entries`` (decode entries:
        ``sum(rows_of)`` rows, the longest table in blocks), ``None`` when none does.

        Args:
            entries: the step's entries; the caller checks they are decode entries.
            ready: the batch buckets usable now (default :attr:`rows`).
        """
        if not entries:
            return None
        rows = bucket_for(sum(map(rows_of, entries)), sorted(self.rows if ready is None else ready))
        bs = self.block_size
        width = bucket_for(max(-(-(e.num_computed + e.num_new) // bs) for e in entries),
                           self.widths)
        return None if rows is None or width is None else (rows, width)
