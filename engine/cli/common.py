"""Shared pieces of the ``python -m engine`` command line."""

from __future__ import annotations

import argparse
import sys


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse hook
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def fail(message: str, code: int = 1) -> None:
    """Print ``error: message`` (first line only) to stderr and exit with ``code``."""
    first = str(message).strip().splitlines()[0] if str(message).strip() else "unknown error"
    print(f"error: {first}", file=sys.stderr)
    raise SystemExit(code)
