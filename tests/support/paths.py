"""Where the repository is."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository root (holds ``app/``, ``engine/``, ``assets/``, ``scripts/``)."""
