"""The paged model runner: every sequence of a step packed into one forward pass over the KV pool."""

from __future__ import annotations

import contextlib
import time

import torch

from engine.core.scheduler_output import ScheduledSeq, SchedulerOutput
from engine.worker.model_runner import ModelRunner, after_error
from engine.worker.runner_output import ModelRunnerOutput
from engine.worker.group_sampling import sample_group_rows, split_group_rows
from engine.worker.sampler import Sampler
from engine.worker.weight_stationary import WeightStationaryLinear, use_weight_stationary
from engine.structured.masking import apply_structured_masks, drop_masked_candidates, jump_forward

FEW_ROWS = 8
"""Steps of at most this many rows (tokens) run on ``decode_threads`` (1 on CPU for int4/int8, see
:func:`engine.wiring.decode_threads`); larger ones on all the engine thread's threads. A one-row
int4 product takes 20-60 µs, about what waking a second thread costs; from a few rows the int4
and int8 kernels are compute-bound and a second core helps them, but beside the engine's own
Python threads on 2 cores whole decode steps gained only from 16 rows: compiled int4 steps, 2
threads against 1 (separate processes in turns, 48 tokens): batch 8 68.7 against 71.1 tok/s
(0.97×), batch 32 103 against 75 tok/s (1.37×) (``scripts/bench_decode_ab.py``,
docs/performance.md). Measured again with the engine's own int4 kernel (AVX-512-bf16 EPYC,
compiled steps, 64 tokens, medians of 3, two rounds, tok/s): the line at 8 rows gave batch 1
133.1 / 133.2, batch 4 422.5 / 420.7, batch 8 459.1 / 459.7; at 4 rows 123.8 / 129.7, 369.5 /
403.3, 377.4 / 457.8; every step on both threads 97.9 / 107.0, 268.6 / 302.5, 411.9 / 443.5."""

FEW_ROWS_FLOAT = 4
""":data:`FEW_ROWS` for bf16/fp16 weights. On a CPU without native bf16 (AVX2, where PyTorch's
bf16 product is a generic loop) one-thread decode steps were faster up to 4 rows and slower at
8 (compiled bf16 steps, separate processes, 48 tokens, medians of 3-4 turns, tok/s, 1 thread
against 2: batch 1 21.4 against 16.4, batch 2 24.4 against 14.4, batch 4 27.5 against 21.1,
batch 8 27.8 against 34.6; docs/compiled-decode.md)."""

FEW_ROWS_FLOAT_NATIVE = 8
""":data:`FEW_ROWS_FLOAT` on a CPU whose oneDNN has native bf16 products (AVX-512-bf16): the
products are fast there and a second thread paid only from 16 rows (compiled bf16 steps, the
graph's own loops on one thread, 3 turns each, tok/s: batch 8 280 on one thread against 233 on
two, batch 16 407 against 437, batch 32 467 against 607; docs/compiled-decode.md)."""


def build_paged_context(entries, pool, block_size: int, device):
    """Pack a step's sequences into one row and describe where their K/V live.

    Everything is assembled in Python lists, then every integer the step needs (token ids,
    positions, slots, kept rows, block tables, lengths) goes to the device in one transfer
    (pinned and non-blocking on CUDA) and is cut into views there, so the cost per sequence
    stays a few microseconds and a GPU step waits for no upload.

    Args:
        entries: :class:`engine.core.scheduler_output.ScheduledSeq` items.
        pool: the :class:`engine.worker.kv_pool.KVPool`.
        block_size: tokens per block.
        device: the model's device.

    Returns:
        ``(input_ids [1, T], position_ids [1, T], keep [N], PagedContext)`` where ``keep`` holds
        the packed index of the last new token of each sequence that samples this step (and
        of its ``k`` draft tokens before it when it verifies ``k`` drafts: ``k + 1`` rows).
    """
    from engine.worker.paged_attention import PagedContext, SeqSlice

    ids, pos, new_slots, keep, prefill_tables, prefill_meta = [], [], [], [], [], []
    decode_q, decode_tables, decode_lens = [], [], []
    q_start = 0
    for e in entries:
        seq, n = e.seq, e.num_new
        ctx = e.num_computed
        total = ctx + n
        table = seq.block_table[:-(-total // block_size)]
        ids.extend(seq.all_ids[ctx:total])
        ids.extend(e.draft_ids)  # verified drafts follow the known tokens (counted in n)
        pos.extend(range(ctx, total))
        new_slots.extend(table[p // block_size] * block_size + p % block_size
                         for p in range(ctx, total))
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
    ctx = PagedContext(pool=pool, new_slots=slots, prefills=prefills, decode_q=dq,
                       decode_blocks=db, decode_mask=dm, decode_lens=dl, decode_max_len=smax,
                       decode_lens_host=tuple(decode_lens))
    return input_ids[None], position_ids[None], keep_t, ctx


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


class PagedModelRunner(ModelRunner):
    """Runs packed steps of many sequences over the paged KV pool (continuous batching).

    Every sequence with a KV cache goes into one forward pass (:meth:`forward`): prefill
    chunks and decode tokens side by side in one row; sequences without a cache run alone
    (:meth:`ModelRunner.run_alone`). Decode-only steps of 2 to 4 sequences on CPU run their
    linear layers in the weight-stationary layout (:mod:`engine.worker.weight_stationary`).
    A runner that replays CUDA graphs for decode steps would subclass this one and override
    :meth:`forward`, owning its input buffers; the scheduler and the output processor would
    not change.

    Args:
        model: a transformers ``*ForCausalLM`` whose attention goes through transformers'
            attention interface (Llama, Qwen2, Mistral families).
        pool: the :class:`engine.worker.kv_pool.KVPool`.
        block_size: tokens per block.
        sampler: the :class:`engine.worker.sampler.Sampler`.
        weight_stationary: allow that layout (False keeps ``F.linear`` for every step).
        decode_threads: intra-op threads on CPU for steps of at most ``few_rows`` tokens
            (0: PyTorch's setting); other steps run with the setting the engine thread
            started with.
        few_rows: that bound in tokens (:data:`FEW_ROWS` or :data:`FEW_ROWS_FLOAT`, see
            :func:`engine.wiring.few_rows`).
    """

    def __init__(self, model, pool, block_size: int, sampler: Sampler | None = None,
                 weight_stationary: bool = True, decode_threads: int = 0,
                 few_rows: int = FEW_ROWS):
        super().__init__(model, sampler)
        from engine.worker.paged_attention import register

        self.pool = pool
        self.block_size = block_size
        self.weight_stationary = weight_stationary
        self.decode_threads = decode_threads if self.device.type == "cpu" else 0
        self.few_rows = few_rows
        self._threads: tuple[int, int] | None = None  # (the thread's own setting, the current)
        model.set_attn_implementation(register())
        # a ready 4-D mask makes transformers skip building a causal mask that the paged
        # function ignores (and its packed-sequence check, a host-device wait on a GPU)
        self._no_mask = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=self.device)

    def execute(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        """Run a step: sequences without a cache alone, then one packed forward pass of the
        others and their sampling. When the packed pass fails, each of its sequences is run
        alone, so only the sequence at fault fails."""
        out = ModelRunnerOutput(start_s=time.perf_counter(), end_s=0.0)
        self.pool.copy_blocks(scheduler_output.blocks_to_copy)  # copy-on-write of forked blocks
        for e in scheduler_output.recompute:
            self.run_alone(e, out)
        entries = scheduler_output.entries
        if entries:
            try:
                self.run_packed(entries, out)
            except Exception as exc:  # noqa: BLE001 - isolate the failing request: rerun each alone
                after_error(exc)
                for e in entries:
                    try:
                        self.run_packed([e], out)
                    except Exception as exc:  # noqa: BLE001
                        after_error(exc)
                        out.errors[e.seq.request_id] = exc
        out.end_s = time.perf_counter()
        return out

    def run_packed(self, entries: list[ScheduledSeq], out: ModelRunnerOutput) -> None:
        """One forward pass for ``entries``, then sampling for each that reached its end."""
        start = time.perf_counter()
        logits = self.forward(entries)
        if any(e.draft_ids for e in entries):
            from engine.spec_decode.verify import verify_drafts

            logits = verify_drafts([e for e in entries if e.samples], logits, out)
        sampling = [e.seq for e in entries if e.samples and not e.draft_ids]
        logits = apply_structured_masks(logits, sampling, out.errors)  # grammar masks, if any
        plain, own = split_group_rows(sampling)
        if own:  # samples before their fork, and beams: the group takes the logits
            sample_group_rows(self.sampler, logits[own], [sampling[i] for i in own], out)
            drop_masked_candidates([sampling[i] for i in own], out.beam_candidates)
            logits, sampling = logits[plain], [sampling[i] for i in plain]
        if sampling:
            choices = self.sampler.sample_many(
                logits, [q.params for q in sampling], [q.generator for q in sampling],
                lambda i: (sampling[i].all_ids, sampling[i].output_ids))
            for seq, choice in zip(sampling, choices):
                if isinstance(choice, Exception):  # e.g. NaN logits of this request only
                    out.errors[seq.request_id] = choice
                else:
                    out.sampled[seq.request_id] = choice
            jump_forward(sampling, out.sampled, out.errors)
        end = time.perf_counter()
        out.batch_size = max(out.batch_size, len(entries))
        for e in entries:
            rid = e.seq.request_id
            # a verification step keeps the accepted drafts' keys and values, not the rejected
            rejected = len(e.draft_ids) - len(out.spec_accepted.get(rid, e.draft_ids))
            out.kv_tokens[rid] = e.num_computed + e.num_new - rejected
            out.kv_bytes[rid] = self.kv_bytes(rid, out.kv_tokens[rid])
            out.spans[rid] = (start, end)

    def _set_threads(self, few: bool) -> None:
        """Switch the engine thread's intra-op threads between steps of few rows
        (``decode_threads``, up to ``few_rows`` tokens) and the rest (the thread's own setting),
        only when it changes."""
        if not self.decode_threads:
            return
        if self._threads is None:
            own = torch.get_num_threads()
            self._threads = (own, own)
        own = self._threads[0]
        want = self.decode_threads if few else own
        if want != torch.get_num_threads():  # read back: another thread may have changed it
            torch.set_num_threads(want)
            self._threads = (own, want)

    def kv_bytes(self, request_id: str, num_tokens: int) -> int:
        """Bytes of ``num_tokens`` tokens' keys and values in the pool (its tensors' bytes per
        token slot; a block shared by several requests counts for each)."""
        return self.pool.bytes_per_token * num_tokens

    def kv_cache_bytes(self) -> int:
        """Bytes of the whole pool (allocated once, whatever is in use)."""
        return self.pool.nbytes

    def forward(self, entries: list[ScheduledSeq]) -> torch.Tensor:
        """One forward pass over every scheduled sequence.

        Returns:
            ``[N, V]`` logits: one row per sequence whose step ends at its last known token
            (in ``entries`` order), ``N`` may be 0 for a step of prefill chunks only.
        """
        input_ids, position_ids, keep, ctx = build_paged_context(
            entries, self.pool, self.block_size, self.device)
        if keep.numel() == 0:
            keep = torch.tensor([input_ids.shape[1] - 1], device=self.device)
            drop = True
        else:
            drop = False
        self._set_threads(input_ids.shape[1] <= self.few_rows)
        layout = contextlib.nullcontext()
        if self.weight_stationary and use_weight_stationary(self.device, input_ids.shape[1],
                                                            ctx.decode_only):
            layout = WeightStationaryLinear()
        with torch.inference_mode(), layout:
            out = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=False,
                             attention_mask=self._no_mask, logits_to_keep=keep, paged=ctx)
        return out.logits[0, :0] if drop else out.logits[0]
