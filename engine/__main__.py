"""``python -m engine {generate,kv-size,bench}``: the engine's command line."""

from __future__ import annotations

import sys

from .cli_common import OneLineParser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run one subcommand; returns the exit code."""
    parser = OneLineParser(prog="python -m engine", description="LLM inference engine tools")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    from . import cli_generate, cli_kvsize

    cli_generate.register(sub)
    cli_kvsize.register(sub)
    try:
        from . import cli_bench
    except ImportError:
        cli_bench = None
    if cli_bench is not None:
        cli_bench.register(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
