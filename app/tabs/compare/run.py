"""One comparison's two runs: submitting both sides together and folding their events.

:func:`submit_pair` queues Left and Right one right after the other (a warm prefix cache's
prompt runs once before), so where they share an engine they share its batches from the first
decode step; each side's events fold into a :class:`app.state.run_state.RunState` of its own.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass, field

from engine import SamplingParams

from app.render.compare import DiffChips
from app.state.run_state import RunState
from app.tabs.compare.engines import EngineSet, Placement
from app.tabs.compare.settings import SideSettings


@dataclass
class SideRun:
    """One side of a running comparison.

    Attributes:
        name: ``"left"`` or ``"right"``.
        settings: its :class:`SideSettings`; placement: where it runs.
        state: its events folded (tokens, step times, KV sizes); handle: the engine's request.
        token_ids: its output token ids so far.
        output: the ``RequestOutput`` once it has ended.
        start: for a side that runs after the other (:func:`apart`), the call that submits
            it (``handle`` stays ``None`` until then).
    """

    name: str
    settings: SideSettings
    placement: Placement
    state: RunState
    handle: object = None
    token_ids: list[int] = field(default_factory=list)
    output: object = None
    chips: DiffChips = field(default_factory=DiffChips)
    start: object = None
    _seen: int = 0

    def poll(self) -> bool:
        """Fold the events that arrived since the last call; True when there were any."""
        if self.handle is None:  # waiting for its turn (:func:`apart`)
            return False
        events = self.handle.events
        new = events[self._seen:]
        self._seen += len(new)
        for ev in new:
            self.state.add(ev)
            self.token_ids.append(int(ev.token_id))
        return bool(new)

    @property
    def finished(self) -> bool:
        """The request has ended and every event was folded (a side that never started, because
        the side before it was stopped, counts as ended)."""
        if self.handle is None:
            return self.state.finish_reason is not None
        return bool(self.handle.finished) and self._seen >= len(self.handle.events)

    def finish(self) -> None:
        """Record the engine's output (exact metrics, the final text)."""
        if self.handle is None:
            return
        self.poll()
        self.output = self.handle.output
        if self.output is not None:
            self.state.finish(self.output)
            if self.output.token_ids and len(self.output.token_ids) >= len(self.token_ids):
                self.token_ids = list(self.output.token_ids)

    def token_times_s(self) -> list[float]:
        """Seconds from submit to each output token."""
        return [t - self.state.submitted_s for t in self.state.token_times]

    def figures(self, diff: int | None) -> dict:
        """The table's figures (:data:`app.render.compare.ROWS`) and the API's fields.

        Returns:
            ``text``, ``token_ids``, ``token_times_s`` (seconds from submit), ``ttft_s``,
            ``tpot_s``, ``tokens_per_s`` (decode tokens per second), ``tokens``,
            ``kv_cache_bytes`` (the request's cache at its end; the latest size while it
            runs), ``kv_cache_tokens`` (tokens its cache held after its last step),
            ``cached_prompt_tokens`` (prompt tokens the prefix cache served), ``weight_bytes`` (the engine's stored weights), ``acceptance`` (accepted /
            drafted, ``None`` without speculative decoding), ``batch_size`` (most sequences
            in one of its steps), ``first_diff`` (0-based), ``engine``, ``settings`` (what differs
            from the defaults), ``finish_reason``.
        """
        m = self.state.live_metrics()
        out = self.output
        spec = getattr(out, "speculative", None) if out is not None else None
        kv = (out.kv_cache_bytes if out is not None else
              (self.state.kv_bytes[-1] if self.state.kv_bytes else None))
        info = self.placement.engine.info
        return {
            "text": self.state.text, "token_ids": list(self.token_ids),
            "token_times_s": self.token_times_s(),
            "ttft_s": m.get("ttft_s"), "tpot_s": m.get("tpot_s"),
            "tokens_per_s": m.get("decode_tokens_per_s"), "tokens": len(self.token_ids),
            "kv_cache_bytes": kv,
            "kv_cache_tokens": self.state.kv_tokens[-1] if self.state.kv_tokens else None,
            "cached_prompt_tokens": self.state.cached_prompt_tokens,
            "weight_bytes": getattr(info, "weights_bytes", None) or None,
            "acceptance": spec.get("acceptance_rate") if spec and spec.get("drafted") else None,
            "batch_size": max(self.state.batch_sizes) if self.state.batch_sizes else None,
            "first_diff": diff, "engine": self.placement.label, "settings": self.settings.summary(),
            "finish_reason": self.state.finish_reason,
        }


def warm_up(pg, session_id: str, prompt, placement: Placement, salt: str) -> None:
    """Run ``prompt`` once for one token with ``salt``, so its full KV blocks are cached for the
    side that asks for a warm prefix cache (waits for it; a few hundred ms)."""
    handle = pg.submit(session_id, prompt, SamplingParams(temperature=0.0, max_tokens=1),
                       engine=placement.engine, cache_salt=salt)
    try:
        handle.result()
    finally:
        pg.release(session_id, handle)


def apart(sides: dict, placed: dict) -> bool:
    """Whether the two sides run one after the other: they share an engine and one of them
    runs without a KV cache. Sharing steps, every step of the cache side would also recompute
    the other side's whole sequence, so both would decode at the recompute's pace and the
    comparison would show no difference (measured: TPOT 374 against 387 ms)."""
    engines = {id(p.engine) for p in placed.values()}
    return len(engines) == 1 and any(not s.use_kv_cache for s in sides.values())


def submit_pair(pg, engines: EngineSet, session_id: str, prompt, sides: dict) -> list[SideRun]:
    """Place both sides, warm what needs it, then submit Left and Right back to back (or Left
    alone, Right to follow, when they run :func:`apart`).

    Args:
        pg: the :class:`app.state.playground.Playground` (Stop and tab closing reach both).
        engines: the :class:`EngineSet`; session_id: the browser session.
        prompt: the user message (through the chat template).
        sides: ``{"left": SideSettings, "right": SideSettings}``.

    Returns:
        The two :class:`SideRun`, Left first.

    Raises:
        ValueError, QueueFullError, ModelLoadError: from placing or submitting (a side already
        submitted is aborted first).
    """
    placed = {}
    try:
        for name, s in sides.items():
            placed[name] = engines.place(s)
    except BaseException:  # a variant that failed to load: the other side's is free again
        for p in placed.values():
            engines.done(p)
        raise
    salts = {}
    for name, s in sides.items():
        if not placed[name].engine.capabilities.supports_cache_salt:
            continue
        salts[name] = secrets.token_hex(16)  # cold: nothing of this prompt is cached under it
        if s.prefix_cache == "warm":
            warm_up(pg, session_id, prompt, placed[name], salts[name])
    runs = []
    try:
        later = list(sides)[1:] if apart(sides, placed) else []
        with _held({id(p.engine): p.engine for p in placed.values()}.values()):
            _submit_all(pg, session_id, prompt, sides, placed, salts, runs, later)
    except BaseException:
        for run in runs:
            pg.release(session_id, run.handle)
        for p in placed.values():
            engines.done(p)
        raise
    return runs


@contextlib.contextmanager
def _held(engines):
    """Each engine's ``hold()`` (:meth:`engine.LLMEngine.hold`) at once, where it has one: the
    sides submitted inside start in the same step instead of one a step behind the other."""
    with contextlib.ExitStack() as stack:
        for eng in engines:
            hold = getattr(eng, "hold", None)
            if hold is not None:
                stack.enter_context(hold())
        yield


def _submit_all(pg, session_id: str, prompt, sides: dict, placed: dict, salts: dict,
                runs: list, later: list) -> None:
    """Submit every side, appending each :class:`SideRun` to ``runs`` as it is queued; a side
    named in ``later`` gets its ``start`` call instead (the caller submits it in its turn)."""
    for name, s in sides.items():
        kwargs = {"cache_salt": salts[name]} if name in salts else {}
        if s.speculative:
            kwargs["speculative"] = "ngram"
        elif getattr(getattr(placed[name].engine, "config", None), "speculative", None):
            kwargs["speculative"] = False  # an engine that drafts by default: this side doesn't
        run = SideRun(name, s, placed[name], RunState(use_kv_cache=s.use_kv_cache))

        def start(run=run, s=s, kwargs=kwargs, name=name) -> None:
            run.start = None
            run.handle = pg.submit(session_id, prompt, s.params(), use_kv_cache=s.use_kv_cache,
                                   engine=placed[name].engine, **kwargs)
            run.state.request_id = run.handle.request_id

        if name in later:
            run.start = start
        else:
            start()
        runs.append(run)
