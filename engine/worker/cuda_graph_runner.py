"""Decode steps replayed from CUDA graphs: one captured forward pass per batch-size bucket.

A decode step of a small model on a GPU is bound by kernel launches (about 1,300 small
operations), not by the GPU's arithmetic or memory. A CUDA graph records the step's kernels
once and replays them with one launch. A graph replays fixed shapes from fixed addresses, so
the runner owns static input buffers per bucket (as nano-vllm and vLLM do): ``B`` decode
sequences run in the smallest batch bucket (1, 2, 4, ..., 32) that holds them and the smallest
block bucket (a power of two) that holds the longest block table; the spare rows read and
write one scratch block of the pool that no sequence owns. A speculative verification pass of
``k`` drafts is ``k + 1`` decode rows of a bucket, each attending up to its own position.
Every other step (prefill chunks, mixed steps, larger batches) runs eagerly through
:class:`PagedModelRunner`.

Without CUDA (``use_graphs=False``) the same static-buffer path runs eagerly: that is how the
bucket and buffer handling is tested on a CPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from engine.core.scheduler_output import ScheduledSeq
from engine.worker.paged_attention import PagedContext
from engine.worker.paged_model_runner import PagedModelRunner

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32)
log = logging.getLogger("engine")


def bucket_for(n: int, buckets) -> int | None:
    """The smallest bucket that holds ``n`` (``None`` when none does)."""
    return next((b for b in buckets if b >= n), None)


def block_buckets(max_blocks: int, smallest: int = 4) -> tuple[int, ...]:
    """Powers of two from ``smallest`` up to the first that holds ``max_blocks`` blocks."""
    out, b = [], smallest
    while True:
        out.append(b)
        if b >= max_blocks:
            return tuple(out)
        b *= 2


@dataclass
class DecodeBuffers:
    """The static inputs and output of one captured decode step (``B`` rows, ``N`` blocks).

    Attributes:
        input_ids, position_ids: ``[1, B]`` int64: each row's last token and its position.
        slots: ``[B]`` int64 pool slot where each row's new K/V is written.
        blocks: ``[B, N]`` int64 block tables, padded with the scratch block.
        lens: ``[B]`` int64 tokens each row attends to (its new token included).
        rows: ``[B]`` int64 ``0..B-1`` (the packed positions of the queries and of the logits
            kept).
        logits: ``[B, V]`` the step's output, written by the replay.
        graph: the captured ``torch.cuda.CUDAGraph`` (``None`` when run eagerly).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    slots: torch.Tensor
    blocks: torch.Tensor
    lens: torch.Tensor
    rows: torch.Tensor
    logits: torch.Tensor | None = None
    graph: object = None


class CudaGraphRunner(PagedModelRunner):
    """:class:`PagedModelRunner` whose decode-only steps of up to 32 sequences replay graphs.

    Args:
        model, pool, block_size, sampler: as :class:`PagedModelRunner`.
        scratch_block: a pool block no sequence is given, for the spare rows of a bucket.
        max_blocks_per_seq: blocks of the longest sequence (the context window).
        use_graphs: capture and replay CUDA graphs (True only on a CUDA device); False runs
            the same static buffers eagerly.
    """

    def __init__(self, model, pool, block_size: int, sampler=None, *, scratch_block: int,
                 max_blocks_per_seq: int, use_graphs: bool = True):
        super().__init__(model, pool, block_size, sampler, weight_stationary=False)
        self.scratch_block = scratch_block
        self.block_buckets = block_buckets(max_blocks_per_seq)
        self.use_graphs = use_graphs and self.device.type == "cuda"
        self.buffers: dict[tuple[int, int], DecodeBuffers] = {}
        self._pool_mem = None

    @staticmethod
    def rows_of(e: ScheduledSeq) -> int:
        """Rows an entry fills in a bucket (and logits it gets back): ``1 + len(draft_ids)``."""
        return 1 + len(e.draft_ids)

    def bucket(self, entries: list[ScheduledSeq]) -> tuple[int, int] | None:
        """``(batch bucket, block bucket)`` for a decode-only step, ``None`` for any other.
        An entry verifying ``k`` speculative drafts counts ``k + 1`` rows (see :meth:`fill`)."""
        if not entries or any(e.num_new != self.rows_of(e) for e in entries):
            return None
        b = bucket_for(sum(map(self.rows_of, entries)), BATCH_BUCKETS)
        widest = max(-(-(e.num_computed + e.num_new) // self.block_size) for e in entries)
        n = bucket_for(widest, self.block_buckets)
        return None if b is None or n is None else (b, n)

    def forward(self, entries: list[ScheduledSeq]) -> torch.Tensor:
        """``[R, V]`` logits (one row per decode entry, ``k + 1`` for one verifying ``k``
        drafts): a graph replay for a decode-only step that fits a bucket, the eager packed
        pass for anything else."""
        key = self.bucket(entries)
        if key is None:
            return super().forward(entries)
        bufs = self.buffers.get(key) or self._capture(*key)
        used = self.fill(bufs, entries)
        if bufs.graph is not None:
            bufs.graph.replay()
        else:
            self._step(bufs)
        return bufs.logits[:used]

    def fill(self, bufs: DecodeBuffers, entries: list[ScheduledSeq]) -> int:
        """Copy one step's inputs into the bucket's static buffers (one host transfer).

        Each entry fills ``1 + len(entry.draft_ids)`` rows: its new token and, when it verifies
        drafts, one row per draft at the following positions, each attending to the keys up to
        and including its own (the attention op writes every row's key and value before any row
        attends, so this is the causal mask of a verification pass). Rows past the entries'
        attend to one token of the scratch block and write there.

        Returns:
            the number of rows filled (``≤ bufs.blocks.shape[0]``).
        """
        rows, width = bufs.blocks.shape
        bs, scratch = self.block_size, self.scratch_block
        ids, pos, slots, lens, tables = [], [], [], [], []
        for e in entries:
            first = e.num_computed  # the new token's position; the drafts follow it
            for j, token in enumerate([e.seq.all_ids[first], *e.draft_ids]):
                p = first + j
                table = e.seq.block_table[:p // bs + 1]
                ids.append(token)
                pos.append(p)
                slots.append(table[p // bs] * bs + p % bs)
                lens.append(p + 1)
                tables.extend(table + [scratch] * (width - len(table)))
        used = len(ids)
        pad = rows - used
        ids += [0] * pad
        pos += [0] * pad
        slots += [scratch * bs] * pad
        lens += [1] * pad
        tables += [scratch] * (width * pad)
        host = torch.tensor(ids + pos + slots + lens + tables, dtype=torch.long)
        if self.device.type == "cuda":
            host = host.pin_memory()
        src = host.to(self.device, non_blocking=True)
        n = rows
        bufs.input_ids.view(-1).copy_(src[:n])
        bufs.position_ids.view(-1).copy_(src[n:2 * n])
        bufs.slots.copy_(src[2 * n:3 * n])
        bufs.lens.copy_(src[3 * n:4 * n])
        bufs.blocks.view(-1).copy_(src[4 * n:])
        return used

    def _new_buffers(self, rows: int, width: int) -> DecodeBuffers:
        dev = self.device
        z = lambda *shape: torch.zeros(shape, dtype=torch.long, device=dev)  # noqa: E731
        return DecodeBuffers(input_ids=z(1, rows), position_ids=z(1, rows), slots=z(rows),
                             blocks=z(rows, width), lens=torch.ones(rows, dtype=torch.long,
                                                                     device=dev),
                             rows=torch.arange(rows, device=dev))

    def _step(self, bufs: DecodeBuffers) -> None:
        """The decode step on the static buffers (what a graph records)."""
        smax = bufs.blocks.shape[1] * self.block_size
        mask = (torch.arange(smax, device=self.device)[None, :] < bufs.lens[:, None])
        ctx = PagedContext(pool=self.pool, new_slots=bufs.slots, prefills=[],
                           decode_q=bufs.rows, decode_blocks=bufs.blocks,
                           decode_mask=mask[:, None, None, :], decode_lens=bufs.lens,
                           decode_max_len=smax)
        with torch.inference_mode():
            out = self.model(input_ids=bufs.input_ids, position_ids=bufs.position_ids,
                             use_cache=False, attention_mask=self._no_mask,
                             logits_to_keep=bufs.rows, paged=ctx)
        if bufs.logits is None:
            bufs.logits = out.logits[0].clone()
        else:
            bufs.logits.copy_(out.logits[0])

    def _capture(self, rows: int, width: int) -> DecodeBuffers:
        """Static buffers for a bucket, and its graph on CUDA (after warm-up runs)."""
        bufs = self._new_buffers(rows, width)
        bufs.slots.fill_(self.scratch_block * self.block_size)
        bufs.blocks.fill_(self.scratch_block)
        self._step(bufs)  # allocates the output; on CUDA also warms the kernels up
        if self.use_graphs:
            try:
                bufs.graph = self._record(bufs)
            except Exception:  # noqa: BLE001 - an uncapturable model still runs, eagerly
                log.warning("CUDA graph capture failed; decode steps run eagerly",
                            exc_info=True)
                self.use_graphs = False
        self.buffers[(rows, width)] = bufs
        return bufs

    def _record(self, bufs: DecodeBuffers):
        """Capture :meth:`_step` on the bucket's buffers into a ``torch.cuda.CUDAGraph``
        (after two runs on a side stream, as PyTorch's graph notes ask)."""
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._step(bufs)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool_mem):
            self._step(bufs)
        self._pool_mem = graph.pool()
        return graph
