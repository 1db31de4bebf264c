"""Entry point: ``python -m app`` (or ``python app/__main__.py``, as a Space's app_file runs it)."""

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


if __name__ == "__main__":
    sys.exit(_main())
