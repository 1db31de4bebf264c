"""The one input builder of a step: packed inputs for the paged forward, static buffers for a
bucket's fixed-shape forward.

Both read the same things from each :class:`engine.core.scheduler_output.ScheduledSeq`
(:func:`step_tokens`, :func:`slot_of`) and send every integer of the step to the device in one
transfer (:func:`upload_ints`: pinned and non-blocking on CUDA), so the cost per sequence stays
a few microseconds and a GPU step waits for no upload.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.scheduler_output import ScheduledSeq
from engine.worker.paged_attention import PagedContext, SeqSlice


def slot_of(table: list[int], position: int, block_size: int) -> int:
    """The pool slot of token ``position`` of a sequence whose block table is ``table``:
    ``table[position // block_size] * block_size + position % block_size``."""
    return table[position // block_size] * block_size + position % block_size


def step_tokens(e: ScheduledSeq) -> list[int]:
    """The ``e.num_new`` token ids ``e`` feeds this step: its known tokens from
    ``e.num_computed`` on, then the drafts it verifies (counted in ``num_new``)."""
    return [*e.seq.all_ids[e.num_computed:e.num_computed + e.num_new], *e.draft_ids]


def upload_ints(parts: list[list[int]], device) -> list[torch.Tensor]:
    """Lists of ints as int64 tensors on ``device``, in one host-to-device transfer.

    Returns:
        One 1-D view per list, in order, of a single buffer (pinned and copied with
        ``non_blocking=True`` on CUDA).
    """
    flat = [v for part in parts for v in part]
    host = torch.tensor(flat, dtype=torch.long)
    if torch.device(device).type == "cuda":
        buf = host.pin_memory().to(device, non_blocking=True)
    else:
        buf = host.to(device)
    return list(torch.split(buf, [len(p) for p in parts]))


@dataclass
class PackedInput:
    """A step's sequences packed into one row of ``T`` tokens for the paged forward.

    Attributes:
        input_ids, position_ids: ``[1, T]`` int64.
        keep: ``[N]`` int64 packed indices whose logits are kept: the last known token of each
            entry that samples this step, and the ``k`` drafts after it when it verifies ``k``
            (``k + 1`` rows); empty for a step of prefill chunks only.
        paged: the :class:`engine.worker.paged_attention.PagedContext` of the step.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    keep: torch.Tensor
    paged: PagedContext

    @property
    def num_tokens(self) -> int:
        """``T``, the tokens of the packed row."""
        return self.input_ids.shape[1]


@dataclass
class StaticBuffers:
    """The fixed inputs and output of one bucket's static step (``B`` rows, ``N`` blocks).

    Attributes:
        input_ids, position_ids: ``[1, B]`` int64: each row's token and its position.
        slots: ``[B]`` int64 pool slot where each row's new K/V is written.
        blocks: ``[B, N]`` int64 block tables, padded with the scratch block.
        lens: ``[B]`` int64 tokens each row attends to (its own token included).
        rows: ``[B]`` int64 ``0..B-1`` (the packed positions of the queries and logits kept).
        logits: ``[B, V]`` the step's output, written by the backend.
        graph: the captured ``torch.cuda.CUDAGraph`` (``None`` when run eagerly or compiled).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    slots: torch.Tensor
    blocks: torch.Tensor
    lens: torch.Tensor
    rows: torch.Tensor
    logits: torch.Tensor | None = None
    graph: object = None

    @property
    def key(self) -> tuple[int, int]:
        """``(rows, width)``: the bucket these buffers serve."""
        return tuple(self.blocks.shape)


@dataclass
class GraphRows:
    """Prefill chunks as rows of the compiled graph: every prompt token a row of its own, with
    its sequence's block table (the decode buckets' row layout, at any number of rows).

    Attributes:
        input_ids, positions, slots, lens: ``[R]`` int64: each row's token, its position, its
            pool slot and the tokens it attends to (its own included).
        blocks: ``[R, W]`` int64 block tables (the entry's table, padded with the scratch
            block, repeated for each of its rows).
        keep: ``[K]`` int64 rows whose logits are wanted: the last row of each entry that
            samples this step (empty for chunks that do not reach a prompt's end).
        used: the rows that are the entries' tokens; ``R`` is ``max(used, 2)``, the spare row
            writing and reading the scratch block (the graph's rows are a symbol from 2 on).
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    blocks: torch.Tensor
    lens: torch.Tensor
    keep: torch.Tensor
    used: int

    @property
    def args(self) -> tuple:
        """The graph's arguments: ``(input_ids, positions, slots, blocks, lens)``."""
        return self.input_ids, self.positions, self.slots, self.blocks, self.lens


class InputBuilder:
    """Builds each step's device inputs from scheduled entries.

    Args:
        pool: the :class:`engine.worker.kv_pool.KVPool`.
        block_size: tokens per block.
        device: the model's device.
        scratch_block: a pool block no sequence is given; the spare rows of a static bucket
            read and write it (``None`` without static buckets).
    """

    def __init__(self, pool, block_size: int, device, scratch_block: int | None = None):
        self.pool = pool
        self.block_size = block_size
        self.device = torch.device(device)
        self.scratch_block = scratch_block

    def packed(self, entries: list[ScheduledSeq]) -> PackedInput:
        """Pack ``entries`` into one row and describe where their K/V live: prefill chunks
        (and verification passes) as :class:`SeqSlice` items, one-token decodes as padded block
        tables with a length mask (``None`` when all have the same length)."""
        bs, device = self.block_size, self.device
        ids, pos, new_slots, keep, prefill_tables, prefill_meta = [], [], [], [], [], []
        decode_q, decode_tables, decode_lens = [], [], []
        q_start = 0
        for e in entries:
            n, ctx = e.num_new, e.num_computed
            total = ctx + n
            table = e.seq.block_table[:-(-total // bs)]
            ids.extend(step_tokens(e))
            pos.extend(range(ctx, total))
            new_slots.extend(slot_of(table, p, bs) for p in range(ctx, total))
            if n == 1:
                decode_q.append(q_start)
                decode_tables.append(table)
                decode_lens.append(total)
            else:
                prefill_tables.append(table)
                prefill_meta.append((q_start, n, ctx, bool(e.draft_ids)))
            if e.samples:  # the last known token, and each draft when verifying
                keep.extend(range(q_start + n - 1 - len(e.draft_ids), q_start + n))
            q_start += n
        width = max((len(t) for t in decode_tables), default=0)
        parts = [ids, pos, new_slots, keep, decode_q, decode_lens,
                 [b for t in decode_tables for b in t + [0] * (width - len(t))], *prefill_tables]
        views = upload_ints(parts, device)
        input_ids, position_ids, slots, keep_t, dq, dl, db = views[:7]
        dm = None
        smax = 0
        if decode_q:
            db = db.view(len(decode_q), width)
            smax = max(decode_lens)
            if min(decode_lens) != smax:
                dm = (torch.arange(smax, device=device)[None, :] < dl[:, None])[:, None, None, :]
        else:
            dq = db = dl = None
        prefills = [SeqSlice(q, n, c, blocks, verify)
                    for (q, n, c, verify), blocks in zip(prefill_meta, views[7:])]
        ctx = PagedContext(pool=self.pool, new_slots=slots, prefills=prefills, decode_q=dq,
                           decode_blocks=db, decode_mask=dm, decode_lens=dl,
                           decode_max_len=smax, decode_lens_host=tuple(decode_lens))
        return PackedInput(input_ids[None], position_ids[None], keep_t, ctx)

    def new_static(self, rows: int, width: int) -> StaticBuffers:
        """Buffers for a ``(rows, width)`` bucket, every row pointing at the scratch block."""
        dev, scratch = self.device, self.scratch_block
        z = lambda *shape: torch.zeros(shape, dtype=torch.long, device=dev)  # noqa: E731
        return StaticBuffers(input_ids=z(1, rows), position_ids=z(1, rows),
                             slots=z(rows).fill_(scratch * self.block_size),
                             blocks=z(rows, width).fill_(scratch),
                             lens=torch.ones(rows, dtype=torch.long, device=dev),
                             rows=torch.arange(rows, device=dev))

    def fill(self, bufs: StaticBuffers, entries: list[ScheduledSeq]) -> int:
        """Copy one step's decode entries into a bucket's buffers (one host transfer).

        Each entry fills ``1 + len(entry.draft_ids)`` rows: its new token and, when it verifies
        drafts, one row per draft at the following positions, each attending to the keys up to
        and including its own (the attention op writes every row's key and value before any row
        attends, so this is the causal mask of a verification pass). Rows past the entries'
        attend to one token of the scratch block and write there.

        Returns:
            the number of rows filled (``≤ bufs.blocks.shape[0]``).

        Raises:
            IndexError: the entries need more rows or a wider table than ``bufs`` has.
        """
        rows, width = bufs.blocks.shape
        bs, scratch = self.block_size, self.scratch_block
        ids, pos, slots, lens, tables = [], [], [], [], []
        for e in entries:
            first = e.num_computed  # the new token's position; the drafts follow it
            for j, token in enumerate(step_tokens(e)):
                p = first + j
                table = e.seq.block_table[:p // bs + 1]
                ids.append(token)
                pos.append(p)
                slots.append(slot_of(table, p, bs))
                lens.append(p + 1)
                tables.extend(table + [scratch] * (width - len(table)))
        used = len(ids)
        if used > rows or len(tables) > used * width:
            raise IndexError(f"{used} rows do not fit a bucket of {rows} rows x {width} blocks")
        pad = rows - used
        ids += [0] * pad
        pos += [0] * pad
        slots += [scratch * bs] * pad
        lens += [1] * pad
        tables += [scratch] * (width * pad)
        src = upload_ints([ids, pos, slots, lens, tables], self.device)
        for dst, part in zip((bufs.input_ids, bufs.position_ids, bufs.slots, bufs.lens,
                              bufs.blocks), src):
            dst.view(-1).copy_(part)
        return used

    def rows(self, entries: list[ScheduledSeq], width: int) -> GraphRows:
        """Prefill entries as :class:`GraphRows` of a ``width``-block table (each entry's table
        sent once and repeated for its rows).

        Raises:
            IndexError: an entry's table is wider than ``width``.
        """
        bs, scratch = self.block_size, self.scratch_block
        ids, pos, slots, lens, keep, tables, counts = [], [], [], [], [], [], []
        for e in entries:
            first, n = e.num_computed, e.num_new
            table = e.seq.block_table[:-(-(first + n) // bs)]
            if len(table) > width:
                raise IndexError(f"a table of {len(table)} blocks is wider than {width}")
            ids.extend(step_tokens(e))
            pos.extend(range(first, first + n))
            slots.extend(slot_of(table, p, bs) for p in range(first, first + n))
            lens.extend(range(first + 1, first + n + 1))
            if e.samples:
                keep.append(len(ids) - 1)
            tables.extend(table + [scratch] * (width - len(table)))
            counts.append(n)
        used = len(ids)
        if used < 2:                                   # a spare row on the scratch block
            ids.append(0)
            pos.append(0)
            slots.append(scratch * bs)
            lens.append(1)
            tables.extend([scratch] * width)
            counts.append(1)
        # each tensor as a bucket's buffer is made (ids and positions views of [1, R], the rest
        # tensors of their own): Dynamo's guards read a view's base, so another layout would
        # not pass the graph's guards
        new = lambda values: torch.tensor(values, dtype=torch.long, device=self.device)  # noqa: E731
        blocks = new(tables).view(len(counts), width).repeat_interleave(new(counts), dim=0)
        return GraphRows(new([ids]).view(-1), new([pos]).view(-1), new(slots), blocks, new(lens),
                         new(keep), used)

    def static_input(self, bufs: StaticBuffers) -> PackedInput:
        """The :class:`PackedInput` that runs a bucket's buffers through the paged forward:
        every row a decode query over its own table, masked to its own length."""
        smax = bufs.blocks.shape[1] * self.block_size
        mask = torch.arange(smax, device=self.device)[None, :] < bufs.lens[:, None]
        ctx = PagedContext(pool=self.pool, new_slots=bufs.slots, prefills=[],
                           decode_q=bufs.rows, decode_blocks=bufs.blocks,
                           decode_mask=mask[:, None, None, :], decode_lens=bufs.lens,
                           decode_max_len=smax)
        return PackedInput(bufs.input_ids, bufs.position_ids, bufs.rows, ctx)
