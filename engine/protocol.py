"""``EngineClient``: what a client of an engine (the page, a remote engine's stand-in, a test's
fake) may ask of it, and the typed snapshots it answers with.

vLLM declares the same contract (``vllm.engine.protocol.EngineClient``) so its API server can
drive the in-process engine or another process alike. Here three engines implement it:
:class:`engine.engine.LLMEngine` (this project's engine), ``app.remote.RemoteEngine`` (a remote
OpenAI-compatible server) and the tests' fake engine. A client reads
:attr:`EngineClient.capabilities` instead of probing attributes: an engine says once what it can
show (a block pool, traces, the lessons) and the page draws only that.

The snapshots are plain frozen dataclasses, read by attribute (``stats.running``,
``snapshot.tables``). A field that does not apply to the engine (the block pool of an engine
without paging) is ``None``; ``as_dict()`` leaves such fields out, for the JSON endpoints only.

No torch here: the page imports this module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:  # only for the annotations: these modules import torch or are heavy
    from engine.model.model_spec import ModelSpec
    from engine.output.events import RequestOutput
    from engine.output.handle import RequestHandle
    from engine.params import SamplingParams


def _present_fields(obj, always: frozenset = frozenset()) -> dict:
    """``obj``'s dataclass fields as a plain dict, ``None`` fields left out unless in ``always``."""
    return {f.name: v for f in dataclasses.fields(obj)
            if (v := getattr(obj, f.name)) is not None or f.name in always}


@dataclass(frozen=True)
class EngineStats:
    """An engine's counts at one moment.

    Attributes:
        waiting, running: requests in the queue and in the running batch.
        queue_max: most requests allowed to wait (0: not known, as for a remote server).
        finished, aborted, failed: requests ended so far, by outcome.
        kv_bytes_live: KV cache bytes the running requests hold now.
        batching: whether continuous batching over a paged block pool is on.
        batching_note: why it is off (``""`` or ``None`` when on).
        preemptions: requests preempted so far (their blocks freed, recomputed later).
        blocks_total, blocks_used, blocks_free, blocks_cached, block_size: the block pool
            (blocks; ``block_size`` in tokens); ``None`` without paging.
        prefix_hit_rate: prompt tokens served from cached blocks / prompt tokens looked up.
        kv_tokens_logical: tokens the running sequences would hold as independent caches;
        kv_tokens_physical: token slots of the distinct blocks they hold;
        kv_blocks_shared: blocks held by more than one sequence (forks, the prefix cache).
    """

    waiting: int = 0
    running: int = 0
    queue_max: int = 0
    finished: int = 0
    aborted: int = 0
    failed: int = 0
    kv_bytes_live: int = 0
    batching: bool = False
    batching_note: str | None = None
    preemptions: int = 0
    blocks_total: int | None = None
    blocks_used: int | None = None
    blocks_free: int | None = None
    blocks_cached: int | None = None
    block_size: int | None = None
    prefix_hit_rate: float | None = None
    kv_tokens_logical: int | None = None
    kv_tokens_physical: int | None = None
    kv_blocks_shared: int | None = None

    def as_dict(self) -> dict:
        """The fields as a plain dict for JSON: the counts always, the block pool's and
        sharing's fields only where not ``None`` (an engine without paging has none)."""
        return _present_fields(self, _ALWAYS_STATS)


_ALWAYS_STATS = frozenset({"waiting", "running", "queue_max", "finished", "aborted", "failed",
                           "kv_bytes_live", "batching", "batching_note", "preemptions"})
"""The :class:`EngineStats` fields :meth:`EngineStats.as_dict` keeps even when ``None``."""


@dataclass(frozen=True)
class BlockTable:
    """One running sequence's block table.

    Attributes:
        request_id: its request (the group's id for samples and beams).
        blocks: physical block numbers, in logical order.
        tokens: slots computed or being computed by the step in flight.
        index: the sample's or beam's index in its group.
        ref_counts: each block's holders (above 1: shared by forks or the prefix cache).
    """

    request_id: str
    blocks: list[int]
    tokens: int
    index: int = 0
    ref_counts: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class BlockPoolSnapshot:
    """The paged KV block pool at one moment, for drawing PagedAttention's picture.

    Attributes:
        block_size: tokens per block; num_blocks: blocks in the pool.
        state: per cell ``"free"``, ``"cached"`` or ``"used"``; a cell is ``blocks_per_cell``
            blocks (1 unless the pool has more than 4,096).
        tables: the running sequences' :class:`BlockTable`.

    An engine without a visible pool answers :meth:`empty` (every field ``None``;
    :attr:`visible` False).
    """

    block_size: int | None = None
    num_blocks: int | None = None
    state: list[str] | None = None
    blocks_per_cell: int | None = None
    tables: list[BlockTable] | None = None

    @classmethod
    def empty(cls) -> "BlockPoolSnapshot":
        """No pool to show."""
        return cls()

    @property
    def visible(self) -> bool:
        """Whether there is a pool to draw (``False`` for :meth:`empty`)."""
        return bool(_present_fields(self))

    def as_dict(self) -> dict:
        """The fields as a plain dict for JSON (tables as dicts), ``None`` fields left out:
        ``{}`` for :meth:`empty`."""
        out = _present_fields(self)
        if self.tables is not None:
            out["tables"] = [dataclasses.asdict(t) for t in self.tables]
        return out


@dataclass(frozen=True)
class ModelInfo:
    """What the page, the API and the CLI show about the served model (sizes in bytes), one type
    for every engine: the loader fills it for a local model
    (:func:`engine.model.loader.load_model`), a remote engine for another server's model
    (``app.remote.RemoteEngine``: ``"remote"`` where it cannot know), the tests' fake for none.

    Attributes:
        name: the model as asked for (a Hub id, a folder, ``embedded``, the server's model id).
        source: where it came from (``embedded``, ``local``, ``hub``, ``remote``).
        architecture: the transformers class (``LlamaForCausalLM``).
        device: ``cpu``, ``cuda``, ``mps`` (``remote`` for a server's).
        dtype, dtype_bytes: the compute dtype (activations, norms, float weights) and its size.
        num_params: parameters; weights_bytes: the weights as stored, measured (packed codes,
            scales and zeros of quantized matrices included).
        context_len: longest sequence the model takes, in tokens.
        spec: the model's shape (:class:`engine.model.model_spec.ModelSpec`: layers, heads, KV
            heads, head_dim); ``None`` when unknown (a remote server).
        load_seconds: seconds the load took.
        eos_tokens: ``(id, token text)`` of every token that ends generation.
        weights: how the matrices are stored (``fp32``, ``bf16``, ``fp16``, ``int8``, ``int4``;
            see :mod:`engine.model.quant.options`); weights_note: how they got there (e.g. the
            GGUF's Q4_1 blocks), with any fallback.
        kv_dtype, kv_dtype_bytes: the KV cache's storage (the compute dtype as loaded; an
            engine's own ``info`` carries its ``kv_cache_dtype``).
        step_weights_bytes: the part of ``weights_bytes`` a decode step streams, without a table
            kept only for the embedding lookup (0: all of it; read :attr:`weights_read_bytes`).
        served_by: the engine serving a remote model (``vLLM``, ``SGLang``; ``""`` in process).
        base_url: a remote server's OpenAI-compatible address (``""`` in process).
    """

    name: str
    source: str = ""
    architecture: str = ""
    device: str = ""
    dtype: str = ""
    dtype_bytes: int = 0
    num_params: int = 0
    weights_bytes: int = 0
    context_len: int = 0
    spec: "ModelSpec | None" = None
    load_seconds: float = 0.0
    eos_tokens: tuple[tuple[int, str], ...] = ()
    weights: str = ""
    weights_note: str = ""
    kv_dtype: str = ""
    kv_dtype_bytes: int = 0
    step_weights_bytes: int = 0
    served_by: str = ""
    base_url: str = ""

    @property
    def weights_read_bytes(self) -> int:
        """Bytes of the weights a decode step reads: ``weights_bytes`` less a table kept only
        for the embedding lookup (:func:`engine.model.accounting.lookup_only_bytes`)."""
        return self.step_weights_bytes or self.weights_bytes


@dataclass(frozen=True)
class CompileStatus:
    """Which decode step an engine runs (:mod:`engine.worker.compiled`), for the page's line
    under the badge, the lessons and the benches.

    Attributes:
        path: ``"compiled"`` once at least one batch bucket is compiled, ``"eager"``, or
            ``"remote"`` (another server's step: nothing to report).
        status: ``"off"``, ``"compiling"`` (in the background, eager meanwhile), ``"ready"``
            or ``"failed"``.
        buckets: every batch bucket (sequences per step); ready: those compiled.
        compile_s: seconds, tracing included, over the ready buckets.
        cache_hits: inductor cache hits (> 0 on a start that found its kernels on disk).
        error: why compiling failed ("" otherwise).
        steps_compiled, steps_eager: decode-only steps run each way so far.
        compiling_s: seconds since compiling began, while ``status`` is ``"compiling"``
            (0 otherwise).
        direct: buckets called without Dynamo's frame hook
            (:data:`engine.worker.compiled.compiled_backend.DIRECT_CALL`).
        attention: ``"kernel"`` (the paged attention kernel of
            :mod:`engine.worker.kernels.decode_attention`) or ``"sdpa"``; attention_note: why
            not the kernel.
        prompts: ``"rows"`` (prompt tokens as rows of the compiled graph) or ``"eager"``
            (transformers' code); prompts_note: why not rows, once compiling is done.
        compiler: ``"process"`` when a separate process generated the kernels first
            (:mod:`engine.worker.compiled.compile_process`), else ``"thread"``.
    """

    path: str = "eager"
    status: str = "off"
    buckets: tuple[int, ...] = ()
    ready: tuple[int, ...] = ()
    compile_s: float = 0.0
    cache_hits: int = 0
    error: str = ""
    steps_compiled: int = 0
    steps_eager: int = 0
    compiling_s: float = 0.0
    direct: tuple[int, ...] = ()
    attention: str = "sdpa"
    attention_note: str = ""
    prompts: str = "eager"
    prompts_note: str = ""
    compiler: str = "thread"

    def as_dict(self) -> dict:
        """The fields as a plain dict (lists for the tuples), for JSON and experiment results."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine can show or do beyond submit/abort/stats.

    Attributes:
        remote: the model runs on another server (the page then draws the server's
            ``/metrics`` instead of its own step events, and has no traces).
        supports_blocks: a paged block pool the page may draw (``block_snapshot``).
        supports_traces: per-step events rich enough for a trace file (JSON/CSV).
        supports_lessons: the Lessons tab's experiments can run (a local model).
        supports_cache_salt: ``submit`` takes ``cache_salt`` (a per-session prefix cache).
        supports_rolling_reset: the recent-requests table can be emptied.
    """

    remote: bool = False
    supports_blocks: bool = False
    supports_traces: bool = False
    supports_lessons: bool = False
    supports_cache_salt: bool = False
    supports_rolling_reset: bool = False


@runtime_checkable
class EngineClient(Protocol):
    """What the page (``app``) calls on an engine; see the module docstring.

    Attributes:
        info: the model's description, :class:`ModelInfo`.
        spec: the model's shape (``engine.model.model_spec.ModelSpec``), ``None`` when unknown.
        capabilities: :class:`EngineCapabilities`.
        max_seq_tokens: longest prompt + output one request may reach, in tokens.
        gpu: an NVML reader (``engine.telemetry.nvml``) for the device panel, or ``None``.
        remote_view: what a remote engine draws instead of the model badge, the KV line and
            the memory panel (``app.remote.view.RemoteView``); ``None`` for a local engine.
        pool_bytes: bytes of the paged KV pool, ``None`` when there is none.
        recent_steps: the last engine steps (``BatchInfo``), oldest first.
        rolling_version: changes whenever the recent-requests summary changes.
    """

    info: ModelInfo
    spec: Any
    capabilities: EngineCapabilities
    gpu: Any
    remote_view: Any
    recent_steps: Sequence

    @property
    def max_seq_tokens(self) -> int: ...

    @property
    def pool_bytes(self) -> int | None: ...

    def submit(self, prompt, params: "SamplingParams | None" = None, *, raw: bool = False,
               use_kv_cache: bool = True, request_id: str | None = None,
               **kwargs) -> "RequestHandle":
        """Queue a request; ``cache_salt`` and ``source`` go in ``kwargs`` where supported.

        Raises:
            ValueError: a bad prompt or setting (the message names the field).
            QueueFullError: the waiting queue is full.
        """

    def generate(self, prompt, params: "SamplingParams | None" = None,
                 **kwargs) -> "RequestOutput":
        """Submit and wait for the output."""

    def abort(self, request_id: str) -> bool:
        """Abort a request; True if it was still waiting or running."""

    def stats(self) -> EngineStats:
        """The counts now."""

    def block_snapshot(self) -> BlockPoolSnapshot:
        """The block pool now (:meth:`BlockPoolSnapshot.empty` when not visible)."""

    def compile_status(self) -> CompileStatus:
        """Which decode step runs (:class:`CompileStatus`)."""

    def detokenize(self, token_ids: list[int]) -> str:
        """The text of ``token_ids``.

        Raises:
            NotImplementedError: the engine has no tokenizer here (a remote server).
        """

    def rolling_summary(self) -> dict:
        """p50/p90/p99 of TTFT, TPOT and end-to-end time over recent requests, lesson runs
        apart under ``"lessons"`` (see ``engine.telemetry.rolling``)."""

    @property
    def rolling_version(self) -> int: ...

    def reset_rolling(self) -> None:
        """Empty the recent-requests summary (where ``supports_rolling_reset``)."""

    def experiment_model(self):
        """The loaded model the lessons' experiments build their own engines from
        (``engine.model.model_info.LoadedModel``).

        Raises:
            NotImplementedError: the engine has none (``supports_lessons`` False).
        """

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the engine (and close its connections)."""
