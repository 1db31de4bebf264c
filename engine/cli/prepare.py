"""``python -m engine prepare``: build what a first start would build, ahead of it.

A first start on an empty cache compiles the engine's own kernels with the machine's compiler
(the paged attention kernel and its C++ operator, the int4/int8 products, the sampler's row
summary: about 15 s of g++ on 2 cores, the critical path of the start, docs/performance.md,
"Time to full speed") and writes the embedded model's config and tokenizer folder from its GGUF.
This command does both into the cache (``LLM_PLAYGROUND_CACHE``), so a start afterwards loads
them: for a machine set up ahead of its first use (a classroom's laptops the day before). The
Docker image's build does this and more already (it loads the model and compiles the decode
step into the image's cache). ``scripts/setup.sh`` does not run it: ``scripts/run.sh`` calls
set-up on every launch, and the check alone would cost seconds of imports. The libraries' names
carry a hash of their source, flags and compiler, so a later version of the code builds its own
again.
"""

from __future__ import annotations

import argparse
import time


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``prepare`` subcommand to ``subparsers``; its handler is ``args.func``."""
    p = subparsers.add_parser(
        "prepare", help="build the engine's kernels and the embedded model's config into the cache",
        description="Compile the engine's C/C++ kernels and write the embedded model's config and "
                    "tokenizer into the cache, so that the first start of the playground or the "
                    "server skips both. Safe to run again: what is there is kept.")
    p.add_argument("--model", default="smollm2-135m", help="embedded model whose config to prepare")
    p.set_defaults(func=run)
    return p


def prepare(model: str = "smollm2-135m") -> list[str]:
    """Build every kernel this machine can take and the embedded ``model``'s config folder.

    Returns:
        One line per part: what was prepared, or why it is not used here (no compiler, a CPU
        without AVX-512-bf16 for the int4 kernel). Nothing raises for a part that can't be built:
        the engine falls back the same way at run time.
    """
    from engine.model.embedded import embedded_config_folder
    from engine.model.quant import int4_kernel
    from engine.worker.kernels import decode_attention, row_summary

    t0 = time.perf_counter()
    decode_attention.prebuild()   # both compilers run at once, as on a first start
    int4_kernel.prebuild()
    lines = []
    reason = decode_attention.unavailable_reason()
    if reason is None:
        reason = ("built, with its C++ operator" if decode_attention.native_op() is not None
                  else "built (the C++ operator could not be)")
    lines.append(f"paged attention kernel: {reason}")
    reason = int4_kernel.unavailable_reason()
    lines.append("int4/int8 kernel: " + (reason or "built"))
    lines.append("row summary operator: " + ("built" if row_summary.load() is not None
                                             else "unavailable (the sampler's PyTorch operations serve)"))
    try:
        lines.append(f"{model} config and tokenizer: {embedded_config_folder(model)}")
    except Exception as exc:  # noqa: BLE001 - not an embedded model, or its package missing
        lines.append(f"{model} config and tokenizer: not prepared ({exc})")
    lines.append(f"prepared in {time.perf_counter() - t0:.1f} s")
    return lines


def run(args: argparse.Namespace) -> int:
    """Print :func:`prepare`'s lines; exit code 0 (every part has a fallback)."""
    for line in prepare(args.model):
        print(line, flush=True)
    return 0
