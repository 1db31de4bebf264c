"""``python -m engine {generate,kv-size,bench,serve,prepare}``: the engine's command line."""

from __future__ import annotations

import os
import sys

from engine.cli.common import OneLineParser, missing_package_message


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run one subcommand; returns the exit code."""
    parser = OneLineParser(prog="python -m engine", description="LLM inference engine tools")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    from engine.cli import generate, kvsize, prepare, serve

    generate.register(sub)
    kvsize.register(sub)
    serve.register(sub)
    prepare.register(sub)
    try:
        from engine.cli import bench
    except ImportError:
        bench = None
    if bench is not None:
        bench.register(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        line = missing_package_message(exc, "engine")
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 1


def exit_now(code: int) -> None:
    """Exit with ``code`` at once (``os._exit`` after flushing): after ``serve`` has stopped the
    engine and closed its sockets, the interpreter's own teardown of torch and transformers
    (seconds on a small CPU) only delays a ``docker stop``."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cli() -> None:
    """``python -m engine`` and the ``llm-engine`` console script."""
    code = main()
    if sys.argv[1:2] == ["serve"]:
        exit_now(code)
    sys.exit(code)


if __name__ == "__main__":
    cli()
