"""The engine thread's intra-op thread count per step: the one place it is set.

On CPU a step of few rows (tokens) runs on ``decode_threads`` (1 for int4/int8/bf16 weights by
default, :func:`engine.wiring.decode_threads`): a one-row product takes tens of µs, about what
waking a second thread costs. Larger steps run on the thread count the engine thread started
with. The bounds below were measured on 2-core machines (docs/performance.md#threads-per-step,
docs/compiled-decode.md).
"""

from __future__ import annotations

import torch

FEW_ROWS = 8
"""Steps of at most this many rows run on ``decode_threads`` with int4/int8 weights: from a few
rows their kernels are compute-bound and a second core helps, but beside the engine's own
Python threads on 2 cores whole decode steps gained only from 16 rows."""

FEW_ROWS_FLOAT = 4
""":data:`FEW_ROWS` for bf16/fp16 weights on a CPU without native bf16 (AVX2, where PyTorch's
bf16 product is a generic loop): one-thread steps were faster up to 4 rows and slower at 8."""

FEW_ROWS_FLOAT_NATIVE = 8
""":data:`FEW_ROWS_FLOAT` on a CPU whose oneDNN has native bf16 products (AVX-512-bf16): the
products are fast there and a second thread paid only from 16 rows."""


class StepThreads:
    """Switches the calling thread's ``torch.set_num_threads`` between steps of few rows and
    the rest, only when it changes.

    Args:
        decode_threads: threads for steps of at most ``few_rows`` rows; 0 leaves PyTorch's
            setting alone (and always on a GPU: pass 0 there).
        few_rows: that bound in rows (tokens of a packed step, or a static bucket's rows).
    """

    def __init__(self, decode_threads: int = 0, few_rows: int = FEW_ROWS):
        self.decode_threads = decode_threads
        self.few_rows = few_rows
        self._own: int | None = None  # the thread's own setting, read on first use

    def use(self, rows: int) -> None:
        """Set the thread count for a step of ``rows`` rows (``decode_threads`` up to
        :attr:`few_rows`, the thread's own setting above); nothing when ``decode_threads`` is
        0."""
        if not self.decode_threads:
            return
        if self._own is None:
            self._own = torch.get_num_threads()
        want = self.decode_threads if rows <= self.few_rows else self._own
        if want != torch.get_num_threads():  # read back: another thread may have changed it
            torch.set_num_threads(want)
