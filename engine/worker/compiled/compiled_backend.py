"""Decode rows through ``torch.compile``: one static graph per batch bucket, compiled in the
background while the eager backend serves.

The decode rows of a step (``B`` ≤ 32 at a time) are padded up to the smallest ready bucket of
:data:`engine.worker.buckets.BATCH_BUCKETS` (1, 2, 4, 8, 16, 32) that holds them and run by that
bucket's compiled :class:`engine.worker.compiled.llama_decode.LlamaDecodeForward` on static
buffers (:class:`engine.worker.input_builder.StaticBuffers`, filled by the runner's one input
builder, as the CUDA-graph backend's). The spare rows read and write one scratch block that no
sequence owns, and their logits are dropped, so padding never reaches an output or the KV
accounting. Block tables have the full context's width in every bucket: the attention op is
opaque to the compiler and reads only the blocks a step needs, so one graph serves every length.

Start-up does not wait: a background thread compiles bucket 1's graph, then one whose rows are
a symbol, which every larger bucket runs (:data:`DYNAMIC_ROWS`); until a bucket is ready its
steps run eagerly (transformers' model code). On a start that never compiled these graphs, a
child process compiles each one first, filling inductor's cache, and the thread waits for it and
then loads the kernels from the cache (:mod:`.compile_process`): the serving process's
interpreter is held for seconds instead of minutes. Once every graph is ready, prompt tokens
run through the shared one too, each token a row (:data:`PREFILL_ROWS`, :meth:`CompiledBackend.run_rows`);
the decode rows of a step that also prefills go through the graph, and so does a speculative
verification pass, as ``k + 1`` rows of a bucket (see :meth:`CompiledBackend.plan`). The graph
ends at the final norm; the LM head runs after it, on the rows that sample.
Inductor's caches live in ``~/.cache/llm-playground/inductor`` (or
``$LLM_PLAYGROUND_CACHE/inductor``), so a second start loads the compiled kernels instead of
generating them. If compiling fails, the backend stays eager and :attr:`CompiledBackend.state`
says why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field

import torch

from engine.core.scheduler_output import ScheduledSeq
from engine.heap import freeze_long_lived
from engine.native_build import import_setuptools
import engine.worker.compiled.attention_op  # noqa: F401 - registers the attention op
from engine.worker.backends import StepPlan
from engine.worker.backends.eager import EagerBackend
from engine.worker.buckets import BATCH_BUCKETS, Buckets, is_decode_step, rows_of
from engine.worker.compiled import compile_process, direct_call
from engine.worker.compiled.llama_decode import LlamaDecodeForward
from engine.worker.input_builder import GraphRows, PackedInput, StaticBuffers
from engine.worker.runner_info import RunnerInfo

log = logging.getLogger("engine")

INDUCTOR_THREADS = 1
"""Threads of the graph's own fused loops (norms, rotary, SiLU, residual adds: a few thousand
elements a row). Above ``few_rows`` the products and the attention kernel run on all the engine
thread's threads, but splitting these small loops over two threads cost more than it saved
(docs/performance.md#threads-per-step)."""

SIZE_ASSERTS = False
"""Inductor's check of every input's and custom op result's sizes and strides on every call
(``assert_size_stride``): about 400 checks a step of the embedded model, a few percent of a
batch-1 int4 step. The buffers are the backend's own, allocated once per bucket, and the custom
ops' shapes are declared by their fake implementations; a wrong size would fail in the op
itself."""

SKIP_GUARDS = True
"""Once every bucket is compiled, run the graphs with Dynamo evaluating only the guards that
tell the buckets apart (``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``): the full
set checks every weight the forward reads, about 1 ms of a batch-1 step on CPU. Safe here
because nothing the other guards check changes after compiling: the weights are the same
tensors, each bucket always runs under the thread count it was compiled with (:meth:`_run`),
and no other shape reaches the compiled function."""

DYNAMIC_ROWS = os.environ.get("LLM_PLAYGROUND_DYNAMIC_ROWS", "1") != "0"
"""Compile two graphs, not one per bucket: bucket 1's, then one whose rows are a symbol that
every larger bucket runs (their buffers keep their sizes; only the graph is shared). On this
2-core CPU every bucket was ready at 101 s from an empty cache instead of 209 s, and the shared
graph's steps took 1.03-1.10× the per-bucket graphs' time (docs/performance.md, "Time to full
speed"). ``LLM_PLAYGROUND_DYNAMIC_ROWS=0``
compiles one graph per bucket (for the before/after benchmark)."""

PREFILL_ROWS = os.environ.get("LLM_PLAYGROUND_PREFILL_ROWS", "1") == "1"
"""Run prompt tokens through the shared graph too, once it is compiled: each prompt token a row
of its own (:meth:`CompiledBackend.run_rows`), so norms, rotary and SiLU run fused instead of as
transformers' hundreds of small operations per chunk, and every position of a request, prompt
or output, is computed by the same graph. Needs :data:`DYNAMIC_ROWS`.
On by default; ``LLM_PLAYGROUND_PREFILL_ROWS=0`` keeps prompts on transformers' code. A row's
bits do not depend on the other rows of the call: the attention kernel, which computes two rows
of one sequence together, is built without contraction or reassociation so that a row paired or
alone sums in one order (it once did not: docs/compiled-decode.md, "Prompts as rows of the
graph")."""

DIRECT_CALL = True
"""Once a bucket is compiled, call the function Dynamo made for it directly, not through
Dynamo's frame hook (:mod:`.direct_call`): its cache lookup (the guards of :data:`SKIP_GUARDS`
included) is a noticeable part of a batch-1 step (docs/performance.md). The function is checked
against the backend's own Dynamo call, bit for bit, before it is used. Safe for the reasons of
:data:`SKIP_GUARDS`."""


@dataclass
class CompileState:
    """What the compiled path is doing, for the badge, ``stats()`` and the benches.

    Attributes:
        status: ``"compiling"``, ``"ready"`` (every bucket), ``"failed"`` or ``"off"``.
        ready: batch buckets whose compiled graph is in use.
        compile_s: seconds spent compiling each ready bucket (tracing included).
        cache_hits: inductor FX-graph cache hits while compiling (a second start: > 0).
        error: why compiling failed (``status == "failed"``).
        steps_compiled, steps_eager: decode-only steps run each way so far.
        started: ``time.monotonic()`` when compiling began (for the seconds it has taken so far).
        prompts: ``"rows"`` when prompt tokens run as rows of the shared graph, else
            ``"eager"`` (transformers' code); prompts_note: why not rows, once every graph is
            compiled.
        compiler: ``"process"`` when a child process generated the kernels first
            (:mod:`.compile_process`), else ``"thread"``; compiler_note: why a child stopped
            helping (its exit code and last words), when one did.
    """

    status: str = "compiling"
    ready: list[int] = field(default_factory=list)
    compile_s: dict[int, float] = field(default_factory=dict)
    cache_hits: int = 0
    error: str = ""
    steps_compiled: int = 0
    steps_eager: int = 0
    started: float = field(default_factory=time.monotonic)
    prompts: str = "eager"
    prompts_note: str = ""
    compiler: str = "thread"
    compiler_note: str = ""

    @property
    def elapsed_s(self) -> float:
        """Seconds since compiling began."""
        return time.monotonic() - self.started

    @property
    def total_compile_s(self) -> float:
        """Seconds of compiling over all ready buckets."""
        return sum(self.compile_s.values())


def inductor_cache_dir() -> str:
    """Point inductor's on-disk caches at ``<cache_dir()>/inductor`` (once, before compiling),
    unless ``$TORCHINDUCTOR_CACHE_DIR`` names another folder. torch fills that variable with
    its own default (a folder in ``/tmp``) as soon as inductor asks for it, so that default is
    replaced too. Returns the folder in use."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from engine.model.embedded import cache_dir

    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current is None or os.path.abspath(current) == os.path.abspath(default_cache_dir()):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir() / "inductor")
    path = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    os.makedirs(path, exist_ok=True)
    return path


def is_decode_row(e: ScheduledSeq) -> bool:
    """Whether ``e`` is computed by the compiled graph: one new token that is an output token
    (a prompt's last token left over by a prefix-cache hit is prefilled, as it would be without
    the hit), plus the drafts it verifies, if any (a verification pass of ``k`` drafts is
    ``k + 1`` rows of the same graph)."""
    return is_decode_step(e) and e.num_computed >= len(e.seq.prompt_ids)


class CompiledBackend:
    """Decode rows in compiled bucket graphs of the compact Llama forward, prompt tokens as rows
    of the shared one; everything else (and everything until a graph is ready) through the
    :class:`EagerBackend` it holds.

    Args:
        eager: the eager backend (its model, input builder with the scratch block, and the
            runner's thread setting serve the compiled steps too).
        max_blocks_per_seq: blocks of the longest sequence (the context window): the one table
            width of every bucket.
        buckets: the batch buckets to compile (smallest first, :meth:`compile_order`).
        background: compile in a background thread (False: compile every bucket now, in the
            constructor, as the benches and tests do).
        max_rows: the most prompt tokens of one step (the scheduler's
            ``max_num_batched_tokens``): the top of the shared graph's rows.
        compile: ``False`` runs the same compact forward eagerly on the static buffers (its
            parity with transformers' forward is testable in seconds).
        load: ``(load_args, config)`` of the engine's model and :class:`engine.config.EngineConfig`:
            part of the graphs' :attr:`key`, and what a compile process loads
            (:mod:`.compile_process`, with ``background``); ``None``: the thread compiles alone.
        on_ready: called with a bucket's rows once it is compiled (the compile process's
            report).
        expect_key: the :attr:`key` the graphs must have (a compile process checks that it
            builds the serving process's graphs); another key fails the compile.
    """

    name = "compiled"

    def __init__(self, eager: EagerBackend, *, max_blocks_per_seq: int, buckets=BATCH_BUCKETS,
                 background: bool = True, compile: bool = True, max_rows: int = 512,
                 load: tuple | None = None, on_ready=None, expect_key: str | None = None):
        self.eager = eager
        self.inputs = eager.inputs
        self.threads = eager.threads
        self.device = eager.device
        self.width = max_blocks_per_seq
        self.buckets = tuple(sorted(buckets))
        self.max_rows = max(max_rows, self.buckets[-1])
        self.rows_error = ""      # why prompts left the graph (a call that would recompile)
        self.bucket_rule = Buckets(self.buckets, (self.width,), self.inputs.block_size)
        self.buffers: dict[tuple[int, int], StaticBuffers] = {}
        self.forward_fn = LlamaDecodeForward(eager.model, self.inputs.pool,
                                             max_blocks_per_seq * self.inputs.block_size)
        # prompts as rows where attention runs in the kernel (CPU, bf16/fp16): elsewhere the op
        # attends row by row through SDPA, slower than transformers' chunk, and fp32 prompts stay
        # transformers' exact reference
        from engine.worker.kernels import decode_attention

        probe = self.forward_fn.cos.new_empty(1, dtype=self.forward_fn.dtype)
        self.prompt_rows = decode_attention.applies(probe, self.forward_fn.k_pool[0].dtype)
        self.state = CompileState(status="compiling" if compile else "off")
        self._lock = threading.Lock()
        self._direct: dict[int, object] = {}     # bucket rows → the DIRECT_CALL function
        self.stopped = threading.Event()
        self._load = self._on_ready = None
        self.key = ""
        self._step = direct_call.private_decode_step()  # graphs of this backend only
        if not compile:
            self.state.ready = list(self.buckets)
            self._fn = self._step
            self._say_prompts()
            return
        inductor_cache_dir()
        import torch._dynamo  # here, not below: the import makes ``torch`` local to this method

        self.key_threads = torch.get_num_threads()   # the graphs' thread count, in the key
        self.key = compile_process.graph_key(self._key_parts(load[0] if load else {}))
        self._load, self._on_ready = load, on_ready
        if expect_key is not None and expect_key != self.key:
            self.state.status, self.state.error = "failed", "another graph key than the serving process's"
            self._fn = self._step
            return
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit,
                                                    2 * len(self.buckets))
        # dynamic=None: the rows of the buckets above 1 are marked as a symbol
        # (_mark_dynamic_rows); every other size stays static
        self._fn = torch.compile(self._step, dynamic=None if DYNAMIC_ROWS else False, fullgraph=True,
                                 options={"emulate_precision_casts": True,
                                          "cpp.threads": INDUCTOR_THREADS,
                                          "size_asserts": SIZE_ASSERTS})
        if background:
            import_setuptools()       # inductor's builds import it; not on a second thread
            threading.Thread(target=self._compile_in_background, name="decode-compile", daemon=True).start()
        else:
            self.compile_all()

    # ---- compiling ----------------------------------------------------------------------------
    def _key_parts(self, load_args: dict) -> tuple:
        """What tells this backend's graphs apart (:func:`.compile_process.graph_key`): the
        model's load arguments, the pool's and the buffers' shapes, the buckets, the thread
        settings the graphs are traced under, and the compile options."""
        pool = self.inputs.pool
        return (sorted(load_args.items()), tuple(pool.k[0].shape), str(pool.k[0].dtype),
                str(self.forward_fn.dtype), self.width, self.buckets, self.max_rows,
                self.threads.decode_threads, self.threads.few_rows, self.key_threads,
                DYNAMIC_ROWS, PREFILL_ROWS, self.prompt_rows, INDUCTOR_THREADS, SIZE_ASSERTS,
                self.forward_fn.regions)

    def _compile_in_background(self) -> None:
        """The background thread's body: :meth:`compile_all`, yielding to serving
        (:func:`_yielding`), with a compile process generating the kernels first when this
        configuration's graphs are not in the cache (:mod:`.compile_process`).

        The child is started before the thread lowers its priority: a child inherits its
        parent thread's ``nice``, which it may not lower again without privileges, and at nice
        10 it got only what the eager steps left (under non-stop requests its graphs were ready
        6-22 s later; docs/performance.md, "A compile process")."""
        process = self._start_process()
        with _yielding():
            try:
                self.compile_all(process)
            finally:
                if process is not None:
                    process.close()

    def _start_process(self):
        """A :class:`.compile_process.CompileProcess` for this backend's graphs, or ``None``
        (no load arguments, a stand-in ``torch.compile``, graphs already cached, or
        ``LLM_PLAYGROUND_COMPILE_PROCESS=0``)."""
        if (self._load is None or not self._load[0] or self.device.type != "cpu"
                or getattr(torch.compile, "__module__", "") != "torch"
                or not compile_process.wanted(self.key)):
            return None
        try:
            process = compile_process.CompileProcess(
                compile_process.CompileJob(*self._load, key=self.key, threads=self.key_threads),
                self.stopped)
        except Exception as exc:  # noqa: BLE001 - no child: compile here, as before
            self.state.compiler_note = _why(exc)
            return None
        self.state.compiler = "process"
        return process

    def _wait_for_process(self, process, rows: int | None):
        """Wait until ``process`` has compiled bucket ``rows`` (``None``: everything); returns
        the process, or ``None`` from then on when it ended without (the thread compiles the
        rest itself; :attr:`CompileState.compiler_note` says why)."""
        if process is None or process.wait_for(rows) or self.stopped.is_set():
            return process
        self.state.compiler, self.state.compiler_note = "thread", process.why()
        log.warning("the compile process stopped (%s); compiling here", self.state.compiler_note)
        return None

    def compile_all(self, process=None) -> None:
        """Compile every bucket in order; stops at the first failure, leaving the backend eager,
        or when :attr:`stopped` is set. With a compile ``process``
        (:class:`.compile_process.CompileProcess`), each bucket waits until the process has put
        its kernels in the cache."""
        from torch._dynamo.utils import counters

        for rows in self.compile_order():
            process = self._wait_for_process(process, rows)
            if self.stopped.is_set():
                return
            start, hits = time.perf_counter(), counters["inductor"]["fxgraph_cache_hit"]
            try:
                bufs = self.inputs.new_static(rows, self.width)
                # traces and compiles this shape (with DYNAMIC_ROWS, one graph for every bucket above 1)
                self._run(bufs, dynamic_rows=DYNAMIC_ROWS and rows > 1)
                if DIRECT_CALL and self._fn is not self._step:   # not the identity
                    self._find_direct_call(bufs)
            except Exception as exc:  # noqa: BLE001 - any compiler failure: stay eager
                self._compile_failed(exc)
                return
            if process is not None:
                process.go()
            with self._lock:
                self.buffers[(rows, self.width)] = bufs
                self.state.compile_s[rows] = time.perf_counter() - start
                self.state.cache_hits += counters["inductor"]["fxgraph_cache_hit"] - hits
                self.state.ready.append(rows)
            if self._on_ready is not None:
                self._on_ready(rows)
        process = self._wait_for_process(process, None)
        if self.stopped.is_set() or not self._compile_many_rows():
            return
        self.state.status = "ready"
        compile_process.mark_compiled(self.key)
        self._say_prompts()
        freeze_long_lived("decode step compiled")   # inductor's objects live as long

    def _compile_failed(self, exc: BaseException) -> None:
        """A compile that raised: the backend stays eager and :attr:`state` says why."""
        log.warning("compiling the decode step failed; decode stays eager", exc_info=True)
        self.state.status, self.state.error = "failed", _why(exc)

    def _compile_many_rows(self) -> bool:
        """Give the shared graph a version for steps of more than ``few_rows`` rows when it
        exists and no bucket has one: those steps run on all the engine thread's threads (StepThreads), and
        Dynamo guards on the thread count, so without it every prompt longer than ``few_rows``
        tokens would leave the graph (:meth:`run_rows`). One more trace, its kernels from
        inductor's cache. Returns False when it failed (the backend stays eager, as for a
        bucket)."""
        rows = self.threads.few_rows + 1
        if (not (PREFILL_ROWS and DYNAMIC_ROWS and self.prompt_rows) or not self.threads.decode_threads
                or self.buckets[-1] == 1 or self.buckets[-1] >= rows or self.stopped.is_set()):
            return True   # (bucket 1 alone: no shared graph, and prompts stay eager)
        start = time.perf_counter()
        try:
            bufs = self.inputs.new_static(rows, self.width)
            self._run(bufs, dynamic_rows=True)
        except Exception as exc:  # noqa: BLE001 - as in compile_all
            self._compile_failed(exc)
            return False
        log.info("shared graph traced for %d rows (all threads) in %.1f s", rows,
                 time.perf_counter() - start)
        return True

    def compile_order(self) -> list[int]:
        """The buckets in the order they are compiled: smallest first. Bucket 1 (the commonest
        step, and the quicker compile: about 35 s against the shared graph's 45 on 2 cores)
        comes first; with :data:`DYNAMIC_ROWS` the next bucket compiles the graph that every
        larger one shares."""
        return list(self.buckets)

    def _mark_dynamic_rows(self, args: tuple) -> None:
        """Trace the rows of a step's arguments (:meth:`_args`: each one's first dimension) as a
        symbol in ``[2, max_rows]`` (Dynamo specializes a size of 1, so bucket 1 keeps a
        graph of its own): the next buckets' calls and prompts' rows (:meth:`run_rows`) pass
        the guards of this one graph and compile nothing. The marks go on the very tensors
        passed (views included)."""
        import torch._dynamo

        for t in args:
            torch._dynamo.mark_dynamic(t, 0, min=2, max=self.max_rows)

    @property
    def direct_buckets(self) -> list[int]:
        """Buckets whose steps call their compiled function directly (:data:`DIRECT_CALL`)."""
        return sorted(self._direct)

    def _args(self, bufs: StaticBuffers) -> tuple:
        return (bufs.input_ids.view(-1), bufs.position_ids.view(-1), bufs.slots, bufs.blocks,
                bufs.lens)

    def _find_direct_call(self, bufs: StaticBuffers) -> None:
        """Keep the function of :data:`DIRECT_CALL` for the bucket of ``bufs`` (just compiled
        by :meth:`_run`) if it gives this backend's own Dynamo call's logits bit for bit; else
        the bucket's steps keep going through Dynamo."""
        rows = bufs.blocks.shape[0]
        args = self._args(bufs)
        names = ("forward", "input_ids", "positions", "slots", "blocks", "lens")
        try:
            with torch.inference_mode():
                call = direct_call.find(dict(zip(names, (self.forward_fn, *args))), self._step)
                if call is not None and torch.equal(self.forward_fn.lm_head(call(self.forward_fn, *args)),
                                                    bufs.logits):
                    self._direct[rows] = call
                    return
        except Exception:  # noqa: BLE001 - an unusable function: keep Dynamo's own call
            log.info("direct call of decode bucket %d failed", rows, exc_info=True)
        log.info("decode bucket %d runs through Dynamo's frame hook", rows)

    def _run(self, bufs: StaticBuffers, dynamic_rows: bool = False) -> None:
        """The bucket's compiled step on its buffers, then the LM head on every row
        (``bufs.logits`` ``[B, V]`` after), with
        the intra-op thread count the graph was compiled under (Dynamo guards on it: another
        count would recompile): the runner's :class:`engine.worker.threads.StepThreads` for
        the bucket's rows. ``dynamic_rows``: trace this call's rows as a symbol
        (:meth:`_mark_dynamic_rows`; a bucket's first call when :data:`DYNAMIC_ROWS`)."""
        self.threads.use(bufs.blocks.shape[0])
        args = self._args(bufs)
        if dynamic_rows:
            self._mark_dynamic_rows(args)
        call = self._direct.get(bufs.blocks.shape[0])
        with torch.inference_mode():
            if call is not None:
                hidden = call(self.forward_fn, *args)
            elif SKIP_GUARDS and self.state.status == "ready":
                with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                    hidden = self._fn(self.forward_fn, *args)
            else:
                hidden = self._fn(self.forward_fn, *args)
            bufs.logits = self.forward_fn.lm_head(hidden)

    def info(self) -> RunnerInfo:
        """The pool, :attr:`state`, the buckets and those called directly."""
        return RunnerInfo(backend=self.name, pool=self.inputs.pool, compile=self.state,
                          buckets=self.buckets, direct_buckets=tuple(self.direct_buckets))

    def close(self) -> None:
        """Stop compiling further buckets (the engine is shutting down)."""
        self.stopped.set()

    # ---- steps --------------------------------------------------------------------------------
    def bucket(self, entries: list[ScheduledSeq]) -> tuple[int, int] | None:
        """``(rows, width)`` for decode entries whose rows a ready bucket holds, ``None`` when
        ``entries`` hold anything else or no bucket is ready. A bucket not compiled yet is
        skipped for the next larger one that is (padding costs less than the eager step)."""
        if not entries or not all(map(is_decode_row, entries)):
            return None
        return self.bucket_rule.key(entries, ready=self.state.ready)

    def plan(self, entries: list[ScheduledSeq]) -> StepPlan:
        """Decode entries in static groups whenever a bucket is ready, prompt chunks as rows of
        the shared graph when it is (:attr:`rows_ready`) and they fit its rows, the rest packed.

        Decode entries run in the compiled graph also in a step that prefills other sequences
        (those run in the packed pass) and in groups of at most the largest ready bucket's rows
        when there are more of them: so every output token of a request is computed by the same
        graph, whoever else is in the step, and a greedy answer does not change with the load
        or with speculation. Until the first bucket is ready everything is packed (eager).
        """
        ready = sorted(self.state.ready)
        decode = [i for i, e in enumerate(entries) if is_decode_row(e)] if ready else []
        decode = [i for i in decode if rows_of(entries[i]) <= ready[-1]]
        prompts = []
        if self.rows_ready:
            taken = set(decode)
            prompts = [i for i, e in enumerate(entries) if i not in taken and not e.draft_ids]
            if sum(entries[i].num_new for i in prompts) > self.max_rows:
                prompts = []
        if not decode and not prompts:
            if entries and all(e.num_new == 1 for e in entries):
                self.state.steps_eager += 1
            return StepPlan(packed=list(range(len(entries))))
        in_graph = set(decode) | set(prompts)
        return StepPlan(packed=[i for i in range(len(entries)) if i not in in_graph],
                        static=list(_chunks(entries, decode, ready[-1])) if decode else [],
                        rows=prompts)

    def _say_prompts(self) -> None:
        """Record in :attr:`state` how prompts run (``prompts``, ``prompts_note``)."""
        ready = self.rows_ready
        self.state.prompts = "rows" if ready else "eager"
        self.state.prompts_note = "" if ready else (
            self.rows_error or ("attention is not the kernel here (fp32, fp8 or GPU)" if not self.prompt_rows
                                else "off (LLM_PLAYGROUND_PREFILL_ROWS=0 or LLM_PLAYGROUND_DYNAMIC_ROWS=0)"))

    @property
    def rows_ready(self) -> bool:
        """Whether prompts run as rows of the shared graph (:data:`PREFILL_ROWS`): attention
        runs in the kernel (:attr:`prompt_rows`), every graph is compiled (the shared graph
        exists for both thread counts only then: a prompt of many rows sent to it while only
        the few-rows version existed would fail its guards) and no call has needed a new one."""
        return (PREFILL_ROWS and DYNAMIC_ROWS and self.prompt_rows and not self.rows_error
                and self.state.status in ("ready", "off") and any(b > 1 for b in self.state.ready))

    def run_rows(self, rows: GraphRows) -> torch.Tensor | None:
        """Prompt tokens as rows of the shared graph, then the LM head on the rows that sample.

        Returns:
            ``[K, V]`` logits of ``rows.keep``; ``None`` when the graph would have to compile
            again for these rows (then :attr:`rows_error` says why, prompts go back to
            transformers' code for good, and nothing was written to the pool).
        """
        n = rows.input_ids.shape[0]
        self.threads.use(n)
        with torch.inference_mode():
            if self._fn is self._step:                       # compile=False: the same, eagerly
                hidden = self._step(self.forward_fn, *rows.args)
            else:
                try:
                    with torch.compiler.set_stance("fail_on_recompile"):
                        hidden = self._fn(self.forward_fn, *rows.args)
                except Exception as exc:  # noqa: BLE001 - a guard failed: never compile mid-step
                    self.rows_error = _why(exc)
                    log.warning("prompt rows left the compiled graph: %s", self.rows_error)
                    self._say_prompts()
                    return None
            if rows.keep.numel() == 0:
                return hidden.new_empty((0, self.forward_fn.vocab_size))
            return self.forward_fn.lm_head(hidden[rows.keep])

    def run_packed(self, inp: PackedInput) -> torch.Tensor:
        """The eager backend's packed pass (transformers' model code)."""
        return self.eager.run_packed(inp)

    def buffers_for(self, entries: list[ScheduledSeq]) -> StaticBuffers:
        """The buffers of the smallest ready bucket that holds ``entries`` (made on demand
        when compiling is off).

        Raises:
            ValueError: no ready bucket holds ``entries``.
        """
        key = self.bucket(entries)
        if key is None:
            raise ValueError("these entries fit no ready bucket")
        with self._lock:
            bufs = self.buffers.get(key)
            if bufs is None:  # the eager compact forward (compile=False) makes them on demand
                bufs = self.buffers[key] = self.inputs.new_static(*key)
        return bufs

    def run_static(self, bufs: StaticBuffers) -> torch.Tensor:
        """``[B, V]`` logits of the filled buffers from the bucket's compiled graph."""
        self._run(bufs)
        self.state.steps_compiled += 1
        return bufs.logits


COMPILE_NICE = 10
"""The background compile's scheduling priority (``nice``), and that of the compilers it runs:
below the engine thread's, so the requests served meanwhile keep their core."""
@contextlib.contextmanager
def _yielding():
    """Lower the calling thread's priority (Linux: a thread's own ``nice``) to
    :data:`COMPILE_NICE` for the rest of its life (it cannot be raised again without
    privileges; the thread ends with the compile).

    The interpreter's switch interval is left alone: shortening it let the engine thread run
    an eager step while the compile was inside a ``torch.fx`` trace, which patches
    ``nn.Module.__call__`` for the whole process, and that step failed."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), COMPILE_NICE)
    except (OSError, AttributeError):   # not Linux, or not allowed: compile at the same priority
        pass
    yield


def _why(exc: BaseException) -> str:
    """An exception as one short line for the status: its type and message, 300 characters."""
    return f"{type(exc).__name__}: {exc}"[:300]


def _chunks(entries: list[ScheduledSeq], index: list[int], most: int):
    """``index`` (positions in ``entries``) cut into consecutive parts of at most ``most`` rows
    (an entry's rows stay together)."""
    part, used = [], 0
    for i in index:
        n = rows_of(entries[i])
        if part and used + n > most:
            yield part
            part, used = [], 0
        part.append(i)
        used += n
    if part:
        yield part
