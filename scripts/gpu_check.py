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
                      "num_blocks": engine.pool.num_blocks if engine.pool is not None else 0,
                      "bytes": engine.pool.nbytes if engine.pool is not None else 0}
    try:
        _step(report, "telemetry_run", lambda: telemetry_run(engine))
        _step(report, "parity_greedy", lambda: parity(loaded, engine, 8 if args.quick else 32))
        sizes = (1, 2) if args.quick else (1, 16)
        _step(report, "batch", lambda: batch_figures(engine, sizes, 8 if args.quick else 64))
        _step(report, "nvml", lambda: nvml_readings(engine))

        def batch_experiment():
            from engine.experiments import batch

            return batch.run(loaded, quick=True, engine=engine,
                             batch_sizes=[1, 2] if args.quick else None)["summary"]

        _step(report, "batch_experiment_quick", batch_experiment)
    finally:
        engine.shutdown()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, default=str))
    print(f"[gpu_check] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
