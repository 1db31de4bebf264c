"""Compiling the decode step's graphs in a process of its own, so that serving never waits for it.

A cold compile is mostly Python (Dynamo's trace, AOTAutograd, inductor's code generation) and
it used to run on a thread of the serving process: while it held the interpreter, an eager step
waited between each of its hundreds of operators, and answers served during the first minutes
stalled for seconds at a time (docs/performance.md, "Time to full speed").

Now, on a start whose graphs were never compiled on this machine, the serving process starts
``python -m engine.worker.compiled.compile_process`` at its own priority (its compile thread,
which waits for the child, then runs at ``nice``
:data:`engine.worker.compiled.compiled_backend.COMPILE_NICE`). The child loads the same model,
builds the same runner and compiles every graph in the same order, filling inductor's and
AOTAutograd's caches on disk (``$TORCHINDUCTOR_CACHE_DIR``); it prints a line after each bucket.
The serving process waits for each line, then compiles that bucket itself, which now loads the
generated kernels from the cache: a few seconds of tracing instead of tens of seconds of code
generation. The graphs the serving process runs are its own, compiled by its own
``torch.compile``; the child only warms the cache, so a child that fails or is killed costs
nothing but time (the serving process then compiles the rest as before).

A later start whose cache holds this configuration's graphs (a marker file per configuration,
:func:`graph_key`) compiles in-process at once, as does a start with
``LLM_PLAYGROUND_COMPILE_PROCESS=0``; ``=1`` starts the child even then.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("engine")

ENV = "LLM_PLAYGROUND_COMPILE_PROCESS"
"""``auto`` (default): compile in a child process unless this configuration's graphs were
compiled before on this machine (:func:`compiled_before`); ``1``: always; ``0``: never (the
compile runs on a thread of the serving process, as the tests' engines do, and as
``serve --compile-wait`` does: nothing is served meanwhile, so a second process would only add
its model load)."""

READY = "compile-process: ready "
"""The child's line after each bucket: this prefix, then the bucket's rows (``done`` at the end)."""

SILENT_S = 900.0
"""Seconds the child may go without reporting a bucket before it is taken for hung and killed
(the serving process then compiles the rest itself). A cold graph takes about 20 s on 2 cores
(35-50 s before the layers became regions)."""

HOLD_S = 60.0
"""Seconds the child waits, after its first graph (bucket 1), for the serving process to load
that graph from the cache before it compiles the next (:meth:`CompileProcess.go`). Under
non-stop requests the serving process's trace of bucket 1 took 23 s while the child compiled the
shared graph beside it, and bucket 1 was ready at 69 s from launch (docs/performance.md, "Bucket 1
within a minute"); a serving process that never says go costs the child this long."""

_SOURCES = ("engine/worker/compiled", "engine/worker/kernels", "engine/model/quant")


@dataclass
class CompileJob:
    """What the child needs to build the same runner as the serving process.

    Attributes:
        load_args: :attr:`engine.model.model_info.LoadedModel.load_args`.
        config: the serving engine's :class:`engine.config.EngineConfig`.
        key: :func:`graph_key` of the serving process's backend (the child checks its own
            against it: a different key means different graphs, and the child stops).
        threads: the serving process's intra-op thread count (``torch.get_num_threads()``),
            which the graphs are traced under and the key holds; the child sets it first.
    """

    load_args: dict
    config: object
    key: str
    threads: int = 0


def graph_key(parts: tuple) -> str:
    """A hash naming one configuration's graphs: ``parts`` (the backend's shapes, buckets,
    thread settings and options, the model's load arguments) with torch's version, the Python
    version and the source of the code the graphs are traced from. 16 hex digits."""
    import torch

    root = Path(__file__).resolve().parents[3]
    h = hashlib.sha256(repr((torch.__version__, sys.version, parts)).encode())
    for folder in _SOURCES:
        for p in sorted((root / folder).glob("*.*")):
            if p.suffix in (".py", ".c", ".cpp", ".h"):
                h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()[:16]


def _marker(key: str) -> Path:
    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR", ".")) / "playground-graphs" / key


def compiled_before(key: str) -> bool:
    """Whether every graph of configuration ``key`` was compiled on this machine into the
    inductor cache in use (:func:`mark_compiled` wrote its marker)."""
    return _marker(key).exists()


def mark_compiled(key: str) -> None:
    """Record that configuration ``key``'s graphs are in the inductor cache in use."""
    path = _marker(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:   # a read-only cache: the next start compiles in a child again
        pass


def wanted(key: str) -> bool:
    """Whether to compile in a child process (``$``:data:`ENV`, :func:`compiled_before`)."""
    mode = os.environ.get(ENV, "auto")
    if mode == "0":
        return False
    return mode == "1" or not compiled_before(key)


class CompileProcess:
    """The serving process's handle on the child: starts it, reads its lines.

    Args:
        job: what the child builds (:class:`CompileJob`).
        stopped: set when the engine shuts down; every wait returns at once then.

    The child's standard input stays open for its whole life: it exits when that closes, so a
    serving process that dies takes its child with it.
    """

    def __init__(self, job: CompileJob, stopped: threading.Event):
        self.stopped = stopped
        self.ready: set[int] = set()
        self.done = False
        self.ended = threading.Event()
        self.stderr: collections.deque[str] = collections.deque(maxlen=30)
        self.heard = time.monotonic()     # the child's last report (or its start)
        self._changed = threading.Condition()
        env = dict(os.environ, PYTHONUNBUFFERED="1", **{ENV: "0"})
        self.proc = subprocess.Popen([sys.executable, "-m", "engine.worker.compiled.compile_process"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env,
                                     cwd=str(Path(__file__).resolve().parents[3]))
        data = pickle.dumps(job)
        self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
        self.proc.stdin.flush()
        threading.Thread(target=self._read, name="compile-process-out", daemon=True).start()
        threading.Thread(target=self._drain, name="compile-process-err", daemon=True).start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith(READY):
                with self._changed:
                    what = line[len(READY):]
                    self.heard = time.monotonic()
                    if what == "done":
                        self.done = True
                    elif what.isdigit():
                        self.ready.add(int(what))
                    self._changed.notify_all()
        self.proc.wait()
        with self._changed:
            self.ended.set()
            self._changed.notify_all()

    def _drain(self) -> None:
        for raw in self.proc.stderr:
            self.stderr.append(raw.decode(errors="replace").rstrip())

    def wait_for(self, rows: int | None) -> bool:
        """Block until the child has compiled bucket ``rows`` (``None``: every graph).

        Returns:
            True when it has; False when it ended without (it failed: :meth:`why` says how),
            went :data:`SILENT_S` without a report (it is killed), or the engine is stopping.
        """
        with self._changed:
            while not self.stopped.is_set():
                if self.done or (rows is not None and rows in self.ready):
                    return True
                if self.ended.is_set():
                    return False
                if time.monotonic() - self.heard > SILENT_S:
                    self.stderr.append(f"silent for {SILENT_S:.0f} s: killed")
                    self.proc.kill()
                    return False
                self._changed.wait(0.2)
        return False

    def go(self) -> None:
        """Tell the child that the serving process has loaded a graph: after its first graph
        the child waits for this (:data:`HOLD_S`), so the serving process traces bucket 1 from
        the cache with the cores to itself and the engine's steps."""
        try:
            self.proc.stdin.write(b"g")
            self.proc.stdin.flush()
        except (OSError, ValueError):   # the child is gone: nothing to tell
            pass

    def why(self) -> str:
        """The child's exit code and the end of what it wrote to standard error."""
        tail = " | ".join(line for line in list(self.stderr)[-3:] if line)
        return f"exit code {self.proc.poll()}: {tail[-300:]}"

    def close(self) -> None:
        """End the child (at once if it is still compiling) and wait for it."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait()


_GO = threading.Event()


def _exit_when_parent_goes() -> None:
    """Watch standard input: a byte is the serving process's go-ahead (:meth:`CompileProcess.go`),
    the end means it is gone: exit at once."""
    while os.read(0, 4096):
        _GO.set()
    os._exit(0)


def _read_exactly(n: int) -> bytes:
    """``n`` bytes of standard input (unbuffered: the watchdog reads the rest)."""
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            raise EOFError("the serving process closed the pipe")
        data += chunk
    return data


def main() -> int:
    """The child: read the :class:`CompileJob`, load the model, build the runner and compile
    every graph in the serving process's order, printing :data:`READY` lines. Exit code 0 when
    every graph compiled, else 1 (standard error says why: a failed compile, or a configuration
    whose key differs from the serving process's)."""
    size, = struct.unpack("<Q", _read_exactly(8))
    job: CompileJob = pickle.loads(_read_exactly(size))
    threading.Thread(target=_exit_when_parent_goes, daemon=True).start()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    import torch

    from engine.model.loader import load_model
    from engine.wiring import build_parts

    if job.threads > 0:
        torch.set_num_threads(job.threads)

    loaded = load_model(**job.load_args, progress=None)

    held = False

    def report(rows: int | str) -> None:
        nonlocal held
        print(f"{READY}{rows}", flush=True)
        if not held:          # the first graph (bucket 1): wait while the serving process loads it
            held = True
            _GO.wait(HOLD_S)

    parts = build_parts(loaded, job.config,
                        compile_hooks={"background": False, "on_ready": report, "expect_key": job.key})
    state = parts.runner.info().compile
    if state is None or state.status != "ready":
        print(f"compile process: {state.error if state else 'no compiled backend'}", file=sys.stderr)
        return 1
    report("done")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)   # no interpreter shutdown: the watchdog thread is still reading
