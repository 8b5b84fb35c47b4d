"""What every benchmark plot does last: lay out, write the PNG, and free the figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save_figure(fig: Any, path: Path) -> None:
    """Write ``fig`` to ``path`` (its folder made) at the benchmarks' one resolution, then close it."""
    import matplotlib.pyplot as plt  # the caller has imported it, with its backend chosen

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
