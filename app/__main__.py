"""Entry point: ``python -m app`` (or ``python app/__main__.py``, as a Space's app_file runs it)."""

import os
import sys
from pathlib import Path

if not __package__:  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.server.main import main  # noqa: E402



def _main() -> int:
    """Run the page; a project package missing from this Python is one line, not a traceback."""
    try:
        return main()
    except ModuleNotFoundError as exc:
        from engine.cli.common import missing_package_message

        line = missing_package_message(exc, "app")
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 1


def exit_now(code: int) -> None:
    """Exit with ``code`` once ``main`` has returned: every server resource is released by then
    (page closed, engine stopped, temporary files removed), so the interpreter's own teardown of
    torch and transformers, seconds on a small CPU, is skipped (``os._exit`` after flushing)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cli() -> None:
    """The ``llm-playground`` console script: ``python -m app`` under another name."""
    exit_now(_main())


if __name__ == "__main__":
    cli()
