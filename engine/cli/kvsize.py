"""``python -m engine kv-size``: predicted KV cache, weights and activation bytes of a model."""

from __future__ import annotations

import argparse
import json

from engine.cli.common import fail

DTYPES = ["fp32", "fp16", "bf16", "fp8", "int8"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``kv-size`` subcommand to ``subparsers``; its handler is ``args.func``."""
    p = subparsers.add_parser(
        "kv-size", help="KV cache size (and weights, activations) of a model from its config",
        description="Predict KV cache bytes with 2 × layers × kv_heads × head_dim × tokens × "
                    "dtype bytes × batch, plus weight and activation bytes. Works offline for "
                    "the models in assets/model_configs.json and for local config.json files.")
    p.add_argument("--model", required=True, help="table id or alias, config.json, model folder, "
                                                   "or a Hub id (online only)")
    p.add_argument("--tokens", required=True, type=int, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=1, help="sequences (default 1)")
    p.add_argument("--dtype", choices=DTYPES, default="fp16", help="element type (default fp16)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)
    return p


def _human(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"


def result(est) -> dict:
    """The ``--json`` object of a :class:`~engine.telemetry.estimator.MemoryEstimate` (bytes)."""
    s = est.spec
    return {
        "model": s.name, "source": s.source, "dtype": est.dtype, "dtype_bytes": est.dtype_bytes,
        "tokens": est.seq_len, "batch": est.batch, "layers": s.layers, "heads": s.heads,
        "kv_heads": s.kv_heads, "head_dim": s.head_dim, "sliding_window": s.sliding_window,
        "sliding_layers": s.sliding_layers, "bytes_per_token": est.kv_bytes_per_token,
        "kv_bytes": est.kv_bytes, "parameters": s.weight_count(),
        "weights_bytes": est.weights_bytes, "activation_bytes": est.activation_bytes,
        "total_bytes": est.total_bytes,
        "formula": s.formula_text(est.dtype_bytes, est.seq_len, est.batch),
    }


def run(args) -> int:
    """Print the estimate; an unknown model or bad number is one line on stderr, exit code 2."""
    from engine.telemetry.estimator import estimate

    if args.tokens < 0 or args.batch < 1:
        fail("--tokens must be >= 0 and --batch >= 1", code=2)
    try:
        est = estimate(args.model, dtype=args.dtype, batch=args.batch, seq_len=args.tokens)
    except (LookupError, ValueError, OSError) as exc:
        fail(str(exc), code=2)
    d = result(est)
    if args.json:
        print(json.dumps(d))
        return 0
    rows = [
        ("model", f"{d['model']}"),
        ("shape", f"{d['layers']} layers × {d['kv_heads']} KV heads × {d['head_dim']} head_dim"
                  f" ({d['heads']} query heads)"),
        ("dtype", f"{d['dtype']} ({d['dtype_bytes']} B per element)"),
        ("KV per token", f"{d['bytes_per_token']:,} B ({_human(d['bytes_per_token'])})"),
        ("KV cache", f"{d['kv_bytes']:,} B ({_human(d['kv_bytes'])}) for {d['tokens']:,} tokens"
                     f" × batch {d['batch']}"),
        ("weights", f"{d['weights_bytes']:,} B ({_human(d['weights_bytes'])}),"
                    f" {d['parameters']:,} parameters"),
        ("activations", f"{d['activation_bytes']:,} B ({_human(d['activation_bytes'])}),"
                        " estimate for one prefill"),
        ("total", f"{d['total_bytes']:,} B ({_human(d['total_bytes'])})"),
    ]
    for key, value in rows:
        print(f"{key:<13} {value}")
    print(f"formula       {d['formula']}")
    print(f"source        {d['source']}")
    return 0
