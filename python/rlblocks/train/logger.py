"""Run-directory logging: ``progress.csv`` (one row per iteration) and optional TensorBoard.

Examples:
    >>> import tempfile, pathlib
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> log = ProgressLogger(run)
    >>> log.write({"training_iteration": 1, "episode_return_mean": 20.5})
    >>> log.write({"training_iteration": 2, "episode_return_mean": 31.0})
    >>> [r["episode_return_mean"] for r in read_progress(run)]
    [20.5, 31.0]
    >>> truncate_progress(run, 1); len(read_progress(run))
    1
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["ProgressLogger", "read_progress", "truncate_progress"]

PROGRESS = "progress.csv"


class ProgressLogger:
    """Appends metric dicts to ``run_dir/progress.csv`` (and TensorBoard events if asked).

    The CSV columns are fixed by the file's header (or by the first row written); keys that
    appear only later are not written to the CSV (they still go to TensorBoard).

    Args:
        run_dir: The run directory (created if missing).
        tensorboard: Also write TensorBoard event files into ``run_dir``.

    Raises:
        ValueError: ``tensorboard`` without the ``tensorboard`` package installed.
    """

    def __init__(self, run_dir: str | Path, tensorboard: bool = False) -> None:
        writer_class = _summary_writer() if tensorboard else None  # before touching the disk
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / PROGRESS
        self._columns: list[str] | None = None
        if self.path.is_file() and self.path.stat().st_size:
            with open(self.path, newline="") as f:
                self._columns = next(csv.reader(f), None)
        self._tb: Any = None
        if writer_class is not None:
            # A resumed run (progress.csv cut back to its checkpoint) hides the events that
            # an earlier process logged after that point: TensorBoard's purge_step.
            rows = read_progress(self.run_dir)
            purge = _tb_step(rows[-1]) + 1 if rows else None
            self._tb = writer_class(str(self.run_dir), purge_step=purge)

    def write(self, metrics: dict[str, Any]) -> None:
        """Appends one row (numbers and strings; other values are skipped)."""
        row = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool))}
        columns = self._columns if self._columns is not None else list(row)
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=columns, extrasaction="ignore")
        if self._columns is None:
            writer.writeheader()
        writer.writerow(row)
        append_whole(self.path, text.getvalue().encode())
        self._columns = columns
        if self._tb is not None:
            step = _tb_step(metrics)
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def close(self) -> None:
        """Closes the TensorBoard writer (the CSV is closed after every write)."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _summary_writer() -> Any:
    """TensorBoard's ``SummaryWriter`` class.

    Raises:
        ValueError: The tensorboard package is missing (the message names the extra).
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise ValueError(
            f'tensorboard=True needs the tensorboard package: pip install "rlblocks[train]" ({err})'
        ) from None
    return SummaryWriter


def _tb_step(metrics: dict[str, Any]) -> int:
    """The TensorBoard step of a row: its ``timesteps_total`` (else its iteration)."""
    value = metrics.get("timesteps_total", metrics.get("training_iteration", 0))
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def append_whole(path: Path, data: bytes) -> None:
    """Appends ``data`` to ``path`` entirely or not at all: a failed write (disk full, ...)
    is cut back off, so the file never ends in a torn row.

    Raises:
        ValueError: The write failed (the file is as it was).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            except OSError:
                with contextlib.suppress(OSError):  # not a regular file (a device, ...)
                    os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
    except OSError as err:
        raise ValueError(f"cannot write {str(path)!r}: {err.strerror or err}") from err


def _parse(value: str) -> Any:
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if value.lstrip("-").isdigit() else number


def read_progress(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``run_dir/progress.csv`` with numbers parsed (``[]`` if there is none).
    A last line without its newline is a row still being written (a training appends to
    the file while this reads it) and is left out."""
    path = Path(run_dir) / PROGRESS
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        text = f.read()
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(text))]


def truncate_progress(run_dir: str | Path, last_iteration: int) -> None:
    """Drops rows after ``last_iteration`` (resuming from an earlier checkpoint)."""
    path = Path(run_dir) / PROGRESS
    if not path.is_file():
        return
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        rows = [r for r in reader if int(float(r.get("training_iteration") or 0)) <= last_iteration]
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)
