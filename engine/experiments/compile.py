"""Experiment ``compile``: the eager decode step against the compiled one, in turns.

Two engines on the same loaded model: ``compile="off"`` (transformers' model code) and
``compile="on"`` (the compact Llama forward through ``torch.compile``, every bucket compiled
before timing). At each batch size, ``B`` greedy requests of ``new_tokens`` tokens
(``ignore_eos``) run on one engine, then the other, ``rounds`` times (A B A B); decode
tokens/s is (all output tokens − B) / (the last first-token time to the last token's time, the
span where all B decode together), and the median over the rounds is reported with the ratio.
Result fields beyond the common ones (see :mod:`.common`):

- ``batch_sizes``; ``eager_tokens_per_s`` / ``compiled_tokens_per_s``: ``{B: median}``;
  ``speedup``: ``{B: compiled / eager}`` of the medians; ``rounds``: every round's figures.
- ``compile``: the compiled engine's :meth:`engine.engine.LLMEngine.compile_status` (seconds,
  inductor cache hits: > 0 when the kernels came from the on-disk cache).
- ``bandwidth_gb_per_s``, ``bytes_per_step`` (weights + mean KV at batch 1),
  ``ceiling_tokens_per_s`` and ``roofline_fraction``: ``{"eager": f, "compiled": f}`` at batch 1.
- ``parity``: per parity prompt, whether the compiled greedy tokens equal eager's, else the
  first differing position and the eager logit gap between the two tokens there.
- ``profile``: per path, ms per batch-1 decode step in matrix products, attention and other
  operators (torch.profiler self times), and the rest of the wall time (Python, dispatch).
"""

from __future__ import annotations

import time

from engine.experiments.common import median, report, result, row

NAME = "compile"
TITLE = "Compiled decode step against eager (tokens/s, roofline share, parity)"

PARITY_PROMPTS = ["Explain the KV cache in one sentence.", "写一首关于程序员加班的短诗",
                  "def fib(n):", "Name three colours.", "What is the capital of France?"]
STORY = "Write a long story about a lighthouse keeper and the ships she guides at night."
MATMUL_OPS = ("int4pack", "int4_mm", "int8pack", "int8_mm", "aten::mm", "aten::addmm", "aten::linear", "aten::bmm",
              "linear_pointwise", "packed_linear")
ATTENTION_OPS = ("attention", "sdpa", "paged_decode")


def decode_rate(engine, batch: int, new_tokens: int) -> float:
    """Decode tokens/s of ``batch`` concurrent greedy requests of ``new_tokens`` tokens."""
    from engine.params import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    sent = time.perf_counter()
    handles = [engine.submit(f"{STORY} (part {i})", params) for i in range(batch)]
    outs = [h.result(1800) for h in handles]
    start = sent + max(o.metrics.ttft_s for o in outs)     # every request is decoding from here
    end = sent + max(o.metrics.e2e_s for o in outs)
    tokens = sum(len(o.token_ids) for o in outs) - batch
    return tokens / max(end - start, 1e-9)


def step_profile(engine, steps: int = 12) -> dict:
    """ms per batch-1 decode step by kind of operator, from torch.profiler's self times."""
    from torch._C._profiler import _ExperimentalConfig
    from torch.profiler import ProfilerActivity, profile

    from engine.params import SamplingParams

    engine.generate(STORY, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    t0 = time.perf_counter()
    # the steps run on the engine's own thread: record every thread's operators
    with profile(activities=[ProfilerActivity.CPU],
                 experimental_config=_ExperimentalConfig(profile_all_threads=True)) as prof:
        engine.generate(STORY, SamplingParams(temperature=0, max_tokens=steps + 1, ignore_eos=True))
    wall_ms = (time.perf_counter() - t0) * 1e3
    parts = {"matrix products": 0.0, "attention": 0.0, "other operators": 0.0}
    for ev in prof.key_averages():
        name = ev.key.lower()
        if not (name.startswith("aten::") or "::" in name) or name.startswith("##"):
            continue
        ms = ev.self_cpu_time_total / 1e3
        if any(k in name for k in MATMUL_OPS):
            parts["matrix products"] += ms
        elif any(k in name for k in ATTENTION_OPS):
            parts["attention"] += ms
        else:
            parts["other operators"] += ms
    per = {k: v / (steps + 1) for k, v in parts.items()}
    per["python and dispatch"] = max(0.0, wall_ms / (steps + 1) - sum(per.values()))
    return per


def parity(loaded, eager, compiled, max_tokens: int) -> list[dict]:
    """Greedy tokens of both engines per prompt; where they part, the eager logit gap."""
    import torch

    from engine.model.prompt import encode_prompt
    from engine.params import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    rows = []
    for p in PARITY_PROMPTS:
        a = eager.generate(p, params).token_ids
        b = compiled.generate(p, params).token_ids
        entry = {"prompt": p, "equal": a == b, "tokens": len(a)}
        if a != b:
            k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            entry["first_difference"] = k
            if k < min(len(a), len(b)):
                ids = torch.tensor([encode_prompt(loaded.tokenizer, p) + a[:k]])
                with torch.inference_mode():
                    logits = loaded.model(input_ids=ids, logits_to_keep=1).logits[0, -1].float()
                entry["logit_gap"] = float(logits[a[k]] - logits[b[k]])
        rows.append(entry)
    return rows


def run(loaded, quick: bool = False, progress=None, engine=None, new_tokens: int | None = None,
        batch_sizes=None, rounds: int | None = None) -> dict:
    """Compile, then time eager and compiled in turns, check parity and profile a step.

    Args:
        loaded: the :class:`engine.model.model_info.LoadedModel`.
        quick: batch 1 only, 24 new tokens and 2 rounds instead of batches 1 and 16, 96
            tokens and 3 rounds.
        progress: ``progress(fraction, message)`` callback or ``None``.
        engine: unused (both engines are private: the comparison needs each path alone).
        new_tokens, batch_sizes, rounds: overrides.
    """
    from engine.experiments.common import private_engine
    from engine.experiments.roofline import measure_bandwidth

    new_tokens = new_tokens or (24 if quick else 96)
    rounds = rounds or (2 if quick else 3)
    batch_sizes = tuple(batch_sizes or ((1,) if quick else (1, 16)))
    report(progress, 0.0, "compiling the decode step (minutes the first time)")
    compiled = private_engine(loaded, compile="on", compile_batch_sizes=batch_sizes)
    eager = private_engine(loaded, compile="off")
    try:
        status = compiled.wait_compiled(3600)
        rates = {"eager": {b: [] for b in batch_sizes}, "compiled": {b: [] for b in batch_sizes}}
        total = rounds * len(batch_sizes)
        done = 0
        for b in batch_sizes:
            for r in range(rounds):
                report(progress, 0.3 + 0.4 * done / total, f"batch {b}, round {r + 1}")
                for name, eng in (("eager", eager), ("compiled", compiled)):
                    rates[name][b].append(decode_rate(eng, b, new_tokens))
                done += 1
        report(progress, 0.75, "parity and profiles")
        par = parity(loaded, eager, compiled, 24 if quick else 48)
        prof = {"eager": step_profile(eager), "compiled": step_profile(compiled)}
        status = compiled.compile_status().as_dict()  # with the counts of steps run each way
        bw = measure_bandwidth(loaded.info.device, 512 * 2**20, 4)
    finally:
        compiled.shutdown()
        eager.shutdown()
    med = {n: {b: median(v) for b, v in per.items()} for n, per in rates.items()}
    speedup = {b: med["compiled"][b] / med["eager"][b] for b in batch_sizes}
    kv = loaded.spec.kv_cache_bytes(40 + new_tokens // 2, loaded.info.dtype_bytes)
    per_step = loaded.info.weights_read_bytes + kv
    ceiling = bw["best_gb_per_s"] * 1e9 / per_step
    first = batch_sizes[0]
    fraction = {n: med[n][first] / ceiling for n in med} if first == 1 else {}
    res = result(NAME, TITLE, quick, {"new_tokens": new_tokens, "rounds": rounds,
                                      "batch_sizes": list(batch_sizes)},
                 batch_sizes=list(batch_sizes), eager_tokens_per_s=med["eager"],
                 compiled_tokens_per_s=med["compiled"], speedup=speedup, rounds=rates,
                 compile=status, bandwidth_gb_per_s=bw["best_gb_per_s"],
                 bytes_per_step=per_step, ceiling_tokens_per_s=ceiling,
                 roofline_fraction=fraction, parity=par, profile=prof)
    res["summary"] = [row(f"batch {b}: compiled / eager", speedup[b], "x "
                          f"({med['compiled'][b]:.1f} vs {med['eager'][b]:.1f} tok/s)")
                      for b in batch_sizes]
    res["summary"] += [
        row("compile time (all buckets)", status["compile_s"], f"s, cache hits {status['cache_hits']}"),
        row("greedy parity prompts equal", sum(p["equal"] for p in par), f"of {len(par)}"),
    ]
    if fraction:
        res["summary"].append(row("roofline share at batch 1, compiled", fraction["compiled"],
                                  f"(eager {fraction['eager']:.3f}; ceiling {ceiling:.0f} tok/s)"))
    res["notes"] = [f"{p['prompt'][:30]!r}: parts at token {p.get('first_difference')}, "
                    f"eager logit gap {p.get('logit_gap', float('nan')):.3f}"
                    for p in par if not p["equal"]]
    report(progress, 1.0, "done")
    return res


def plot(res: dict, path: str) -> str:
    """Bars: decode tokens/s per batch size, eager beside compiled; and the batch-1 step split."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = res["batch_sizes"]
    x = range(len(sizes))
    a.bar([i - 0.2 for i in x], [res["eager_tokens_per_s"][s] for s in sizes], 0.4, label="eager")
    a.bar([i + 0.2 for i in x], [res["compiled_tokens_per_s"][s] for s in sizes], 0.4,
          label="compiled")
    a.set_xticks(list(x), [f"batch {s}" for s in sizes])
    a.set_ylabel("decode tokens/s")
    a.legend()
    bottom = [0.0, 0.0]
    for part in ("matrix products", "attention", "other operators", "python and dispatch"):
        vals = [res["profile"]["eager"][part], res["profile"]["compiled"][part]]
        b.bar(["eager", "compiled"], vals, bottom=bottom, label=part)
        bottom = [u + v for u, v in zip(bottom, vals)]
    b.set_ylabel("ms per decode step (batch 1)")
    b.legend(fontsize=8)
    fig.suptitle(res["title"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
