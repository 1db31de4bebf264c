"""Experiment ``llama-cpp``: the same GGUF file through llama-cpp-python, as an optional peer.

Runs only when ``llama_cpp`` is importable (it is not a project dependency) and the model is
an embedded one that ships a GGUF file; otherwise the result has ``status: "skipped"`` and a
``reason``. llama.cpp reads the quantized GGUF weights directly (Q4_1 for the embedded model);
the engine runs the weights it was loaded with (``--weights``: int4 by default on CPU, read from
the same file, or fp32 dequantized from it). The two take turns for ``rounds`` rounds, warm,
and each figure is the median, so a noisy machine slows both alike. Result fields beyond the
common ones (see :mod:`.common`):

- ``gguf_path``, ``prompt_tokens``, ``new_tokens``.
- ``rounds``, ``engine_weights``.
- ``llama_cpp_decode_tokens_per_s``, ``llama_cpp_ttft_s``: llama.cpp's greedy runs (medians).
- ``engine_decode_tokens_per_s``, ``engine_ttft_s``: ours on the same prompt ids and count
  (medians).
- ``ratio``: engine / llama.cpp decode tokens/s.
- ``matching_prefix``: how many leading tokens both produced alike (quantization may differ).
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from engine.experiments.common import STORY_PROMPT, engine_config, engine_for, report, result, row, run_engine, salted

NAME = "llama-cpp"
TITLE = "Peer: llama-cpp-python on the same GGUF file"
SERVED = True
"""Measured on the decode step ``serve`` runs (compiled where it applies): the engine
beside a peer is the engine a user would run."""


def gguf_path(loaded) -> Path | None:
    """The GGUF file behind an embedded model, or ``None`` (not embedded, package missing)."""
    from engine.model.embedded import EMBEDDED

    emb = EMBEDDED.get(str(loaded.info.name).lower())
    if emb is None:
        return None
    spec = importlib.util.find_spec(emb.package)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / emb.gguf_file
    return path if path.exists() else None


def _skipped(quick: bool, reason: str) -> dict:
    res = result(NAME, TITLE, quick, {})
    res.update(status="skipped", reason=reason)
    res["summary"] = [row("skipped", reason)]
    return res


def _llama_run(llm, ids: list[int], n: int) -> tuple[list[int], float, float]:
    """Greedy tokens from llama.cpp, its TTFT and decode tokens/s."""
    llm.reset()
    toks, times = [], []
    start = time.perf_counter()
    for tok in llm.generate(ids, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0):
        times.append(time.perf_counter())
        toks.append(int(tok))
        if len(toks) >= n:
            break
    decode = times[-1] - times[0] if len(times) > 1 else 0.0
    return toks, times[0] - start, (len(times) - 1) / decode if decode > 0 else 0.0


def _child(path: str, ids: list[int], n: int) -> dict:
    """In a child process: load the GGUF file, warm up, then one timed greedy run."""
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_ctx=len(ids) + n + 16, n_threads=os.cpu_count() or 1,
                verbose=False)
    _llama_run(llm, ids, 4)
    toks, ttft, tps = _llama_run(llm, ids, n)
    return {"tokens": toks, "ttft_s": ttft, "tokens_per_s": tps}


def _llama_in_child(path: Path, ids: list[int], n: int) -> tuple[list[int], float, float]:
    """One warm greedy run of llama.cpp in its own process.

    A native crash in llama.cpp (a build whose CPU features the machine lacks at run time, say)
    then ends the child, not the bench, and llama.cpp's OpenMP threads never share a process
    with PyTorch's.

    Raises:
        RuntimeError: the child failed; the message is its last line of stderr.
    """
    code = ("import json, sys; from engine.experiments.llama_cpp import _child; "
            "a = json.loads(sys.stdin.read()); print(json.dumps(_child(a['path'], a['ids'], a['n'])))")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(
        {"path": str(path), "ids": ids, "n": n}), capture_output=True, text=True, cwd=root,
        timeout=600)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise RuntimeError(f"llama.cpp run failed: {tail}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["tokens"], out["ttft_s"], out["tokens_per_s"]


def _llama_in_process(path: Path, ids: list[int], n: int) -> tuple[list[int], float, float]:
    """:func:`_llama_in_child`'s work in this process (for a stand-in ``llama_cpp`` in tests)."""
    out = _child(str(path), ids, n)
    return out["tokens"], out["ttft_s"], out["tokens_per_s"]


#: How a round runs llama.cpp: in a child process; tests swap in :func:`_llama_in_process`.
RUNNER = _llama_in_child


def run(loaded, quick: bool = False, progress=None, engine=None, new_tokens: int | None = None) -> dict:
    """Compare llama.cpp and the engine on the same prompt ids, greedy, the same token count.

    Args:
        loaded: the :class:`engine.model.model_info.LoadedModel`.
        quick: 24 new tokens instead of 128.
        progress: ``progress(fraction, message)`` callback or ``None``.
        engine: an ``LLMEngine`` to run through (when ``None``, a private one with the decode
            step `serve` runs: compiled where it applies, see :func:`.common.engine_for`).
        new_tokens: override the size.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        return _skipped(quick, "llama-cpp-python is not installed (optional: "
                               "pip install llama-cpp-python)")
    path = gguf_path(loaded)
    if path is None:
        return _skipped(quick, f"model {loaded.info.name!r} has no embedded GGUF file")
    new_tokens = new_tokens or (24 if quick else 128)
    from engine.model.prompt import encode_prompt

    prompt = salted(STORY_PROMPT)
    ids = encode_prompt(loaded.tokenizer, prompt)
    rounds = 1 if quick else 3
    l_tpss, l_ttfts, e_tpss, e_ttfts = [], [], [], []
    with engine_for(loaded, engine, served=True) as eng:
        config = engine_config(eng)
        run_engine(eng, salted(STORY_PROMPT), 4)
        for r in range(rounds):
            report(progress, 0.1 + 0.9 * r / rounds, f"round {r + 1}/{rounds}: llama.cpp, {new_tokens} tokens")
            theirs, l_ttft, l_tps = RUNNER(path, ids, new_tokens)
            report(progress, 0.1 + 0.9 * (r + 0.5) / rounds, f"round {r + 1}/{rounds}: engine, {new_tokens} tokens")
            out, _ = run_engine(eng, prompt, new_tokens)
            l_tpss.append(l_tps)
            l_ttfts.append(l_ttft)
            e_tpss.append(out.metrics.decode_tokens_per_s)
            e_ttfts.append(out.metrics.ttft_s)
    report(progress, 1.0, "done")
    l_tps, l_ttft = statistics.median(l_tpss), statistics.median(l_ttfts)
    mine = out.token_ids
    same = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
    e_tps = statistics.median(e_tpss)
    weights = getattr(loaded.info, "weights", "fp32")
    res = result(NAME, TITLE, quick, {"new_tokens": new_tokens}, engine=config,
                 gguf_path=str(path), prompt_tokens=len(ids), new_tokens=new_tokens,
                 rounds=rounds, engine_weights=weights,
                 llama_cpp_decode_tokens_per_s=l_tps, llama_cpp_ttft_s=l_ttft,
                 engine_decode_tokens_per_s=e_tps, engine_ttft_s=statistics.median(e_ttfts),
                 ratio=e_tps / l_tps if l_tps > 0 else 0.0, matching_prefix=same)
    res["summary"] = [row("llama.cpp decode", l_tps, "tok/s"),
                      row(f"engine decode ({weights} weights)", e_tps, "tok/s"),
                      row("ratio engine/llama.cpp", res["ratio"], "x"),
                      row("matching leading tokens", same, f"of {new_tokens}")]
    res["notes"].append(f"llama.cpp reads the quantized GGUF weights; the engine runs {weights} "
                        f"weights from the same file; medians of {rounds} alternating round(s).")
    return res


def plot(res: dict, path: str) -> str:
    """Bars of decode tokens/s: llama.cpp and the engine."""
    from engine.experiments.plotting import ENGINE, OTHER, figure, save

    fig, (ax,) = figure(res["title"], height=3.6)
    vals = [res["llama_cpp_decode_tokens_per_s"], res["engine_decode_tokens_per_s"]]
    ax.bar(["llama.cpp (GGUF)", f"engine ({res.get('engine_weights', 'fp32')})"], vals, color=[OTHER, ENGINE], width=0.5)
    ax.set_ylabel("decode tokens/s (batch 1)")
    return save(fig, path, f"{res['prompt_tokens']}-token prompt, {res['new_tokens']} new tokens, "
                           "greedy; llama.cpp reads quantized weights")
