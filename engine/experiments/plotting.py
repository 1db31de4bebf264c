"""Matplotlib helpers for the experiments' PNGs (headless: the Agg backend, no display)."""

from __future__ import annotations

from pathlib import Path

ENGINE = "#2E86AB"   # blue: our engine / KV cache on
OTHER = "#E4572E"    # orange-red: Hugging Face generate / KV cache off / prefill
THIRD = "#F3A712"    # amber: a third series


def figure(title: str, ncols: int = 1, width: float = 7.0, height: float = 4.2):
    """A new ``(fig, axes)`` pair with a title; ``axes`` is a list of ``ncols`` axes."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols if ncols > 1 else width, height))
    axes = list(axes) if ncols > 1 else [axes]
    fig.suptitle(title, fontsize=12)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def save(fig, path: str | Path, footnote: str = "") -> str:
    """Write ``fig`` as a PNG (with an optional small footnote), close it, return the path."""
    import matplotlib.pyplot as plt

    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, color="#555555", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.04 if footnote else 0, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
