"""Experiment ``roofline``: decode tokens/s against the memory-bandwidth ceiling.

At batch 1 every decode step reads all the weights once plus the KV cache so far, so
tokens/s ≤ read bandwidth / bytes per step. We measure the bandwidth (a ``sum`` over a tensor
much larger than the CPU caches, repeated), compute the ceiling and compare the engine's
measured decode rate with it. Result fields beyond the common ones (see :mod:`.common`):

- ``device``; ``bandwidth_gb_per_s`` (best of the repeats, 1 GB = 1e9 bytes) and
  ``bandwidth_median_gb_per_s``; ``bandwidth_bytes`` (tensor size) and ``bandwidth_repeats``.
- ``weights_bytes``, ``kv_bytes_mean`` (the cache at the mean context of the decode steps),
  ``bytes_per_step`` (their sum).
- ``ceiling_tokens_per_s``: bandwidth / bytes per step.
- ``achieved_tokens_per_s``: the engine's batch-1 decode rate; ``achieved_fraction`` of the
  ceiling; ``achieved_gb_per_s``: bytes per step × achieved tokens/s / 1e9.
- ``prompt_tokens``, ``new_tokens`` of the decode run.
"""

from __future__ import annotations

import time

from engine.experiments.common import STORY_PROMPT, median, report, result, row, warm_then_run

NAME = "roofline"
TITLE = "Decode roofline: achieved vs memory-bandwidth ceiling (batch 1)"


def measure_bandwidth(device: str = "cpu", size_bytes: int = 1024 * 2**20, repeats: int = 6) -> dict:
    """Memory read bandwidth: time ``torch.sum`` over an fp32 tensor of ``size_bytes``.

    Args:
        device: where the tensor lives (``cpu``, ``cuda``, ...).
        size_bytes: tensor size in bytes (use several times the last-level cache).
        repeats: timed passes after one untimed warm-up.

    Returns:
        ``best_gb_per_s`` and ``median_gb_per_s`` (1 GB = 1e9 bytes read per second),
        ``size_bytes``, ``repeats``.
    """
    import torch

    x = torch.ones(size_bytes // 4, dtype=torch.float32, device=device)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    float(x.sum())
    rates = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        s = x.sum()
        sync()
        dt = time.perf_counter() - t0
        float(s)
        rates.append(x.nbytes / dt / 1e9)
    del x
    return {"best_gb_per_s": max(rates), "median_gb_per_s": median(rates),
            "size_bytes": size_bytes, "repeats": repeats}


def measure_matmul_flops(device: str = "cpu", dtype: str = "float32", n: int = 1024,
                         repeats: int = 5) -> dict:
    """Matrix-multiply speed: time ``a @ b`` for two ``n × n`` matrices of ``dtype``.

    A square product of this size has intensity ``n / 3 × 2 / bytes per element`` FLOPs per byte
    (hundreds), far above any ridge point, so it runs at the device's compute ceiling for that
    dtype and thread count.

    Args:
        device: where the matrices live (``cpu``, ``cuda``, ...).
        dtype: a ``torch`` dtype name (``float32``, ``bfloat16``, ``float16``).
        n: matrix size (elements per side).
        repeats: timed products after one untimed warm-up.

    Returns:
        ``best_flops_per_s`` and ``median_flops_per_s`` (2·n³ FLOPs per product, per second),
        ``n``, ``dtype``, ``repeats``.

    Raises:
        ValueError: an unknown dtype name, or ``n``/``repeats`` below 1.
    """
    import torch

    dt = getattr(torch, str(dtype), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"dtype must be a torch dtype name such as float32, got {dtype!r}")
    if n < 1 or repeats < 1:
        raise ValueError(f"n and repeats must be at least 1, got n={n}, repeats={repeats}")
    a = torch.randn(n, n, device=device).to(dt)
    b = torch.randn(n, n, device=device).to(dt)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    a @ b
    rates = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        a @ b
        sync()
        rates.append(2.0 * n**3 / (time.perf_counter() - t0))
    return {"best_flops_per_s": max(rates), "median_flops_per_s": median(rates), "n": n,
            "dtype": str(dtype), "repeats": repeats}


def run(loaded, quick: bool = False, progress=None, engine=None, new_tokens: int | None = None) -> dict:
    """Measure bandwidth, then a batch-1 decode run, and compare.

    Args:
        loaded: the :class:`engine.model.model_info.LoadedModel`.
        quick: a 512 MiB tensor read 4 times and 32 new tokens instead of 1 GiB read 10 times
            and 128 tokens.
        progress: ``progress(fraction, message)`` callback or ``None``.
        engine: an ``LLMEngine`` to run through (a private one when ``None``).
        new_tokens: override the decode length.
    """
    new_tokens = new_tokens or (32 if quick else 128)
    size = (512 if quick else 1024) * 2**20
    repeats = 4 if quick else 10
    device = loaded.info.device
    report(progress, 0.0, "measuring memory read bandwidth")
    bw = measure_bandwidth(device, size, repeats)
    config, out = warm_then_run(loaded, engine, STORY_PROMPT, new_tokens, progress, 0.3,
                                f"decoding {new_tokens} tokens at batch 1")
    report(progress, 1.0, "done")
    p = len(out.prompt_token_ids)
    mean_ctx = p + (new_tokens - 1) / 2
    kv = loaded.spec.kv_cache_bytes(int(round(mean_ctx)), loaded.info.dtype_bytes)
    per_step = loaded.info.weights_read_bytes + kv
    ceiling = bw["best_gb_per_s"] * 1e9 / per_step
    achieved = out.metrics.decode_tokens_per_s
    res = result(NAME, TITLE, quick, {"new_tokens": new_tokens, "bandwidth_bytes": size,
                                      "bandwidth_repeats": repeats}, engine=config,
                 device=device, bandwidth_gb_per_s=bw["best_gb_per_s"],
                 bandwidth_median_gb_per_s=bw["median_gb_per_s"], bandwidth_bytes=size,
                 bandwidth_repeats=repeats, weights_bytes=loaded.info.weights_bytes,
                 kv_bytes_mean=kv, bytes_per_step=per_step, ceiling_tokens_per_s=ceiling,
                 achieved_tokens_per_s=achieved,
                 achieved_fraction=achieved / ceiling if ceiling > 0 else 0.0,
                 achieved_gb_per_s=per_step * achieved / 1e9, prompt_tokens=p,
                 new_tokens=new_tokens)
    res["summary"] = [
        row("memory read bandwidth (best)", res["bandwidth_gb_per_s"], "GB/s"),
        row("bytes read per decode step", per_step / 1e6, "MB (weights + KV cache)"),
        row("ceiling at batch 1", ceiling, "tok/s"),
        row("achieved decode", achieved, "tok/s"),
        row("achieved fraction of ceiling", res["achieved_fraction"] * 100, "%"),
    ]
    res["notes"].append("Bandwidth is a single-process sum() over a large fp32 tensor; the "
                        "ceiling ignores compute, so small models on CPU may sit well below it.")
    return res


def plot(res: dict, path: str) -> str:
    """Bars: ceiling tokens/s and achieved tokens/s, with the fraction."""
    from engine.experiments.plotting import ENGINE, OTHER, figure, save

    fig, (ax,) = figure(res["title"], height=3.8)
    vals = [res["ceiling_tokens_per_s"], res["achieved_tokens_per_s"]]
    bars = ax.bar(["bandwidth ceiling", "achieved (engine)"], vals, color=[OTHER, ENGINE], width=0.5)
    for b, v in zip(bars, vals):
        ax.annotate(f"{v:.1f} tok/s", (b.get_x() + b.get_width() / 2, v), ha="center",
                    va="bottom", fontsize=9)
    ax.set_ylabel("decode tokens/s (batch 1)")
    ax.set_ylim(0, max(vals) * 1.15 if max(vals) > 0 else 1)
    ax.set_title(f"{res['bandwidth_gb_per_s']:.1f} GB/s ÷ {res['bytes_per_step'] / 1e6:.0f} MB per "
                 f"step; achieved {res['achieved_fraction'] * 100:.0f}% of the ceiling", fontsize=10)
    return save(fig, path, f"device {res['device']}; bytes per step = weights + KV cache at the "
                           f"mean context")
