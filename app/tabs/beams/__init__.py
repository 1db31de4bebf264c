"""The "Beams and samples" tab: n samples or a beam search of one prompt, side by side."""

from app.tabs.beams.tab import build

__all__ = ["build"]
