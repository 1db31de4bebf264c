"""Entry point: ``python -m app`` (or ``python app/__main__.py``, as a Space's app_file runs it)."""

import sys
from pathlib import Path

if not __package__:  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
