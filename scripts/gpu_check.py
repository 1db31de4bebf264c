"""One prepared run on a machine with an NVIDIA GPU: the figures the README's GPU table needs.

Run it through ``scripts/gpu_check.sh``, which also runs the tests marked ``gpu``. Every figure
goes into one JSON file; a step that fails records its error and the run goes on.

The embedded weights (538 MB) may be too large to carry to such a machine: with
``--random-weights`` the model is built from the real config with seeded random weights, which
is enough for timing and for parity between the engine and Hugging Face ``generate``.

Usage::

    python scripts/gpu_check.py --out gpu-check-out/gpu_check.json \\
        [--model smollm2-135m | FOLDER] [--random-weights] [--device cuda] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _step(report: dict, name: str, fn) -> None:
    """Run one part of the check; record its figures or its error under ``name``."""
    t0 = time.perf_counter()
    try:
        report[name] = fn()
    except Exception as exc:  # noqa: BLE001 - one failing part must not lose the others
        report[name] = {"error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(limit=6)}
    print(f"[gpu_check] {name}: {time.perf_counter() - t0:.1f} s", flush=True)


def environment(device: str) -> dict:
    import torch

    from engine.model.loader import resolve_dtype

    env = {"python": platform.python_version(), "torch": torch.__version__,
           "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
           "dtype_auto": str(resolve_dtype("auto", device)).replace("torch.", "")}
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    if torch.cuda.is_available() and device.startswith("cuda"):
        idx = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(idx)
        env.update(device_name=props.name, compute_capability=list(torch.cuda.get_device_capability(idx)),
                   total_memory_bytes=props.total_memory)
    try:
        import pynvml

        pynvml.nvmlInit()
        env["driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception as exc:  # noqa: BLE001 - NVML may be missing
        env["driver"] = f"N/A ({type(exc).__name__})"
    return env


def greedy_ids(engine, prompt: str, n: int) -> tuple[list[int], object]:
    from engine import SamplingParams

    out = engine.generate(prompt, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True),
                          raw=True)
    if out.finish_reason == "error":
        raise RuntimeError(out.error)
    return out.token_ids, out


def parity(loaded, engine, n: int = 32) -> dict:
    """Greedy engine tokens against Hugging Face ``generate`` on the same prompt ids."""
    import torch

    prompt = "The key to fast inference is"
    ours, out = greedy_ids(engine, prompt, n)
    ids = torch.tensor([out.prompt_token_ids], device=loaded.model.device)
    with torch.inference_mode():
        ref = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                    do_sample=False, min_new_tokens=n)[0, ids.shape[1]:].tolist()
    first = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), None)
    return {"tokens": n, "identical": ours == ref, "first_divergence": first}


def paged_scenarios(loaded, engine) -> dict:
    """Greedy tokens of the paged engine against Hugging Face ``generate`` for a fresh prompt,
    a prefix-cache hit, a chunked prefill and a mixed batch (prefill beside decodes)."""
    import torch

    from engine import LLMEngine, SamplingParams

    p = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    long_prompt = "Summarise: " + "The scheduler packs tokens into steps. " * 60

    def ref(out):
        ids = torch.tensor([out.prompt_token_ids], device=loaded.model.device)
        with torch.inference_mode():
            gen = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                        max_new_tokens=16, min_new_tokens=16)
        return gen[0, ids.shape[1]:].tolist()

    res = {}
    fresh = engine.generate(long_prompt, p, raw=True)
    res["fresh"] = fresh.token_ids == ref(fresh)
    hit = engine.generate(long_prompt, p, raw=True)
    res["prefix_hit"] = hit.token_ids == fresh.token_ids
    chunked_engine = LLMEngine(loaded, telemetry=False, max_num_batched_tokens=64)
    try:
        res["chunked"] = chunked_engine.generate(long_prompt, p, raw=True).token_ids == fresh.token_ids
    finally:
        chunked_engine.shutdown()
    running = [engine.submit(f"Decode {i}:", SamplingParams(temperature=0, max_tokens=40,
                                                            ignore_eos=True), raw=True)
               for i in range(4)]
    mixed = engine.generate(long_prompt + " Again.", p, raw=True)
    res["mixed"] = mixed.token_ids == ref(mixed)
    [h.result(300) for h in running]
    return res


def prefill_memory(engine, tokens: int = 512) -> dict:
    """The memory breakdown of a step that prefills ``tokens`` tokens, and at idle after."""
    from engine import SamplingParams

    out = engine.generate("word " * tokens, SamplingParams(temperature=0, max_tokens=2), raw=True)
    idle = engine.memory_snapshot()
    return {"prompt_tokens": len(out.prompt_token_ids),
            "during_prefill": out.memory.to_dict() if out.memory is not None else None,
            "idle": idle.to_dict() if idle is not None else None}


def batch_figures(engine, sizes=(1, 16), new_tokens: int = 64) -> dict:
    """Total decode tokens/s and mean TTFT with ``b`` requests at once, for each ``b``."""
    from engine import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    figures = {}
    greedy_ids(engine, "warm-up", 8)
    for b in sizes:
        t0 = time.perf_counter()
        handles = [engine.submit(f"Request {i}: tell a story about GPUs number {i}.", params,
                                 raw=True) for i in range(b)]
        outs = [h.result(600) for h in handles]
        wall = time.perf_counter() - t0
        decode_tokens = sum(o.metrics.output_tokens - 1 for o in outs)
        first = min(o.metrics.ttft_s for o in outs)
        figures[f"batch_{b}"] = {
            "wall_s": wall, "tokens_per_s_total": sum(o.metrics.output_tokens for o in outs) / wall,
            "decode_tokens_per_s_total": decode_tokens / max(1e-9, wall - first),
            "ttft_s_mean": sum(o.metrics.ttft_s for o in outs) / b,
            "tpot_s_mean": sum(o.metrics.tpot_s for o in outs) / b}
    return figures


def telemetry_run(engine) -> dict:
    """A short generation with telemetry on: TTFT, TPOT and the memory breakdown at its end."""
    _, out = greedy_ids(engine, "Explain the KV cache in one sentence.", 32)
    m = out.metrics
    mem = out.memory.to_dict() if out.memory is not None else None
    idle = engine.memory_snapshot()
    return {"ttft_s": m.ttft_s, "tpot_s": m.tpot_s, "decode_tokens_per_s": m.decode_tokens_per_s,
            "memory_last_step": mem, "memory_idle": idle.to_dict() if idle is not None else None}


def itl_table(engine, sizes=(1, 8, 32), new_tokens: int = 48) -> dict:
    """Median inter-token latency at each batch size, greedy and with the page's defaults
    (temperature 0.7, top-k 50, top-p 0.95, repetition penalty 1.1)."""
    from engine import SamplingParams

    settings = {"greedy": dict(temperature=0),
                "page_defaults": dict(temperature=0.7, top_k=50, top_p=0.95,
                                      repetition_penalty=1.1)}
    table = {}
    for name, kw in settings.items():
        for b in sizes:
            hs = [engine.submit(f"Story {i}: once upon a time", SamplingParams(
                max_tokens=new_tokens, ignore_eos=True, seed=i, **kw), raw=True)
                for i in range(b)]
            itl = sorted(x for h in hs for x in h.result(600).metrics.itl_s)
            table[f"{name}_batch_{b}"] = {"itl_p50_s": itl[len(itl) // 2],
                                          "itl_p99_s": itl[min(len(itl) - 1, int(len(itl) * .99))]}
    return table


def ttft_first_vs_second(loaded) -> dict:
    """TTFT of a fresh engine's first request against its second (warm-up at work)."""
    from engine import LLMEngine, SamplingParams

    eng = LLMEngine(loaded, telemetry=False)
    try:
        p = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
        first = eng.generate("A first request.", p, raw=True).metrics.ttft_s
        second = eng.generate("A second request.", p, raw=True).metrics.ttft_s
    finally:
        eng.shutdown()
    return {"first_ttft_s": first, "second_ttft_s": second}


def launches_per_decode_step(loaded, batch: int) -> dict:
    """Kernel launches and host-device waits in one decode step, eager and from a graph."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine import LLMEngine, SamplingParams

    out = {}
    for label, graphs in (("eager", False), ("graphs", True)):
        eng = LLMEngine(loaded, telemetry=False, cuda_graphs=graphs)
        try:
            p = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
            [h.result(120) for h in [eng.submit(f"Warm {i}", p, raw=True) for i in range(batch)]]
            hs = [eng.submit(f"Prompt {i} goes", SamplingParams(
                temperature=0, max_tokens=40, ignore_eos=True), raw=True) for i in range(batch)]
            while max(len(h.events) for h in hs) < 20:
                time.sleep(0.01)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                n0 = min(len(h.events) for h in hs)
                while min(len(h.events) for h in hs) < n0 + 5:
                    time.sleep(0.002)
            [h.result(120) for h in hs]
            ev = prof.key_averages()
            launches = sum(e.count for e in ev if "LaunchKernel" in e.key or
                           "GraphLaunch" in e.key)
            syncs = sum(e.count for e in ev if "Synchronize" in e.key or "MemcpyAsync" in e.key)
            out[label] = {"launches_per_step": launches / 5, "syncs_or_copies_per_step": syncs / 5}
        finally:
            eng.shutdown()
    return out


def compiled_step(loaded, sizes=(1, 16), new_tokens: int = 64) -> dict:
    """The compiled decode step (``compile="on"``: the compact Llama forward through
    torch.compile on the same batch buckets) beside the CUDA-graph runner (the ``auto`` default
    on CUDA): compile time, decode tokens/s per batch size, greedy tokens equal."""
    from engine import LLMEngine

    out = {}
    for mode in ("on", "auto"):
        eng = LLMEngine(loaded, telemetry=False, compile=mode, compile_batch_sizes=tuple(sizes))
        try:
            status = eng.wait_compiled(240)
            figures = batch_figures(eng, sizes, new_tokens)
            out[f"compile_{mode}"] = {"status": eng.compile_status().as_dict(), "runner":
                                      eng.runner.info().backend, "batch": figures,
                                      "greedy": greedy_ids(eng, "Explain the KV cache.", 32)[0]}
        finally:
            eng.shutdown()
    out["greedy_equal"] = out["compile_on"]["greedy"] == out["compile_auto"]["greedy"]
    return out


def nvml_readings(engine) -> dict:
    gpu = getattr(engine, "gpu", None)
    if gpu is None:
        return {"note": "no NVML monitor (no CUDA device or telemetry off)"}
    t0 = time.perf_counter()
    reading = gpu.read()
    return {"read_s": time.perf_counter() - t0,
            "reading": reading.to_dict() if hasattr(reading, "to_dict") else str(reading)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "gpu-check-out"),
                                                  "gpu_check.json"))
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--random-weights", action="store_true")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--quick", action="store_true", help="smaller batches (a CPU smoke run)")
    args = ap.parse_args(argv)

    from engine import LLMEngine
    from engine.model.loader import load_model, resolve_device

    device = resolve_device(args.device)
    report: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "args": vars(args)}
    _step(report, "environment", lambda: environment(device))
    t0 = time.perf_counter()
    loaded = load_model(args.model, device=device, dtype=args.dtype, progress=None,
                        random_weights=args.random_weights)
    report["model"] = {"name": loaded.info.name, "source": loaded.info.source,
                       "dtype": loaded.info.dtype, "weights_bytes": loaded.info.weights_bytes,
                       "load_s": time.perf_counter() - t0}
    t0 = time.perf_counter()
    engine = LLMEngine(loaded)
    report["pool"] = {"setup_s": time.perf_counter() - t0,
                      "runner": engine.runner.info().backend,
                      "num_blocks": engine.pool.num_blocks if engine.pool is not None else 0,
                      "bytes": engine.pool.nbytes if engine.pool is not None else 0}
    try:
        _step(report, "telemetry_run", lambda: telemetry_run(engine))
        _step(report, "parity_greedy", lambda: parity(loaded, engine, 8 if args.quick else 32))
        _step(report, "paged_scenarios", lambda: paged_scenarios(loaded, engine))
        _step(report, "prefill_memory", lambda: prefill_memory(engine, 64 if args.quick else 512))
        sizes = (1, 2) if args.quick else (1, 16)
        _step(report, "batch", lambda: batch_figures(engine, sizes, 8 if args.quick else 64))
        _step(report, "nvml", lambda: nvml_readings(engine))
        _step(report, "itl", lambda: itl_table(engine, (1, 2) if args.quick else (1, 8, 32),
                                                8 if args.quick else 48))

        def telemetry_on_off():
            from engine import LLMEngine

            quiet = LLMEngine(loaded, telemetry=False)
            try:
                on = itl_table(engine, (1,), 8 if args.quick else 64)["greedy_batch_1"]
                off = itl_table(quiet, (1,), 8 if args.quick else 64)["greedy_batch_1"]
            finally:
                quiet.shutdown()
            return {"telemetry_on": on, "telemetry_off": off}

        _step(report, "telemetry_on_off", telemetry_on_off)

        def batch_experiment():
            from engine.experiments import batch

            return batch.run(loaded, quick=True, engine=engine,
                             batch_sizes=[1, 2] if args.quick else None)["summary"]

        _step(report, "batch_experiment_quick", batch_experiment)
    finally:
        engine.shutdown()
    _step(report, "ttft_first_vs_second", lambda: ttft_first_vs_second(loaded))
    if device.startswith("cuda") and loaded.info.dtype == "float32":
        def bf16_parity():
            import torch

            loaded.model.to(torch.bfloat16)
            eng = LLMEngine(loaded, telemetry=False)
            try:
                return parity(loaded, eng, 64)
            finally:
                eng.shutdown()
                loaded.model.to(torch.float32)

        _step(report, "parity_greedy_bf16", bf16_parity)
    _step(report, "compiled_step", lambda: compiled_step(loaded, (1, 2) if args.quick else (1, 16),
                                                          8 if args.quick else 64))
    if device.startswith("cuda"):
        for b in (1, 32):
            _step(report, f"launches_batch_{b}", lambda b=b: launches_per_decode_step(loaded, b))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, default=str))
    print(f"[gpu_check] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
