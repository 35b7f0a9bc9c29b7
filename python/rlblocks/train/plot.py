"""Learning-curve plots of a run directory's ``progress.csv`` (matplotlib, no display needed).

Examples:
    >>> import tempfile, pathlib
    >>> from rlblocks.train.logger import ProgressLogger
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> log = ProgressLogger(run)
    >>> for i in range(1, 4):
    ...     log.write({"training_iteration": i, "timesteps_total": 100 * i,
    ...                "episode_return_mean": 10.0 * i})
    >>> plot_run(run).name
    'progress.png'
"""

from __future__ import annotations

import math
from pathlib import Path

from rlblocks.train.logger import read_progress

__all__ = ["plot_run"]


def plot_run(
    run_dir: str | Path,
    out: str | Path | None = None,
    x: str = "timesteps_total",
    y: str = "episode_return_mean",
) -> Path:
    """Plots ``y`` against ``x`` from ``run_dir/progress.csv`` into a PNG.

    Args:
        run_dir: The run directory.
        out: The PNG path (default ``run_dir/progress.png``).
        x: Column for the horizontal axis.
        y: Column for the vertical axis.

    Returns:
        The PNG's path.

    Raises:
        ValueError: No progress.csv rows, an unknown column (the message lists them), or an
            ``out`` whose directory does not exist (it is not created: a typo in the path
            would otherwise make directories anywhere).
    """
    path = Path(out) if out is not None else Path(run_dir) / "progress.png"
    if out is not None and not path.parent.is_dir():
        what = "is not a directory" if path.parent.exists() else "does not exist"
        raise ValueError(
            f"cannot write the plot to {str(path)!r}: its directory {str(path.parent)!r} {what}"
        )
    rows = read_progress(run_dir)
    if not rows:
        raise ValueError(
            f"{str(run_dir)!r} has no progress.csv rows to plot (is it a run "
            "directory of `rlblocks train`?)"
        )
    for col in (x, y):
        if col not in rows[0]:
            raise ValueError(f"progress.csv has no column {col!r}; columns: {sorted(rows[0])}")
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    pairs = [
        (float(r[x]), float(r[y]))
        for r in rows
        if isinstance(r[x], (int, float))
        and isinstance(r[y], (int, float))
        and not math.isnan(float(r[y]))
    ]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    try:
        if pairs:
            xs, ys = zip(*pairs, strict=True)
            ax.plot(xs, ys, color="tab:blue", linewidth=1.8)
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(f"{Path(run_dir).resolve().name}")
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path
