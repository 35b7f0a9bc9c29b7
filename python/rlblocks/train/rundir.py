"""Claiming a run directory: one writer at a time (a lock), and what a directory that is
reused may hold.

A trainer that writes a run directory holds ``run_dir/.lock`` under ``fcntl.flock`` (the
file holds the writer's pid) until it closes; a second writer is refused with one line
naming that pid. The kernel drops the lock when its process dies, so a killed run never
blocks the next one. Readers (evaluate, export, plot) take no lock. Locks are counted per
process: the command line and the trainer it makes may both hold the same directory's.

``rlblocks train`` claims its directory with :func:`claim_run_dir`: a new or empty
directory is used; one that holds a previous run is refused unless the run is resumed
(``--resume``) or replaced (``--overwrite``: the run's own files are deleted first); one
that holds anything else is refused (nothing of it is deleted).

Examples:
    >>> import tempfile, pathlib
    >>> run = pathlib.Path(tempfile.mkdtemp()) / "run"
    >>> lock = claim_run_dir(run)
    >>> (run / LOCK_FILE).read_text().strip() == str(os.getpid())
    True
    >>> lock.release()
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: no advisory locks, a second writer is not detected
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_FILE",
    "RunDirLock",
    "claim_run_dir",
    "default_run_dir",
    "fresh_run_dir",
    "lock_run_dir",
    "run_files",
]

#: The lock file of a run directory (holds the pid of the process writing the run).
LOCK_FILE = ".lock"

# What a run directory of rlblocks holds (checkpoint.py, logger.py, plot.py, the CLI, export
# and TensorBoard): anything else makes a directory "not a run directory".
_RUN_FILE = re.compile(
    r"^(config\.json|stop\.json|progress\.csv(\.tmp)?|progress\.png|\.lock|best|"
    r"\.?checkpoint_\d{6,}(\..+|\.tmp)?|abandoned_\d{8}_\d{6}(_\d+)?|"
    r"events\.out\.tfevents\..+|policy(_.+)?\.(onnx|pt2)(\.json|\.data)?)$"
)

# {real path of the run directory: [open lock fd, holders in this process]}
_HELD: dict[str, list[int]] = {}


class RunDirLock:
    """A hold on a run directory's lock (see the module docstring); :meth:`release` once."""

    def __init__(self, key: str, path: Path) -> None:
        self._key: str | None = key
        #: The run directory.
        self.path = path

    def release(self) -> None:
        """Drops this hold; the last hold of the process unlocks the directory."""
        key, self._key = self._key, None
        if key is None or key not in _HELD:
            return
        held = _HELD[key]
        held[1] -= 1
        if held[1] <= 0:
            del _HELD[key]
            os.close(held[0])  # closing the descriptor releases the flock


def _holder(path: Path) -> str:
    try:
        pid = path.read_text().strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "a process whose pid is not written yet"


def lock_run_dir(run_dir: str | Path) -> RunDirLock:
    """Locks ``run_dir`` (created if missing) for writing.

    Raises:
        ValueError: Another process holds the lock (the message names its pid), or the
            directory cannot be created.
    """
    run = Path(run_dir)
    try:
        run.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(
            f"cannot use {str(run)!r} as the run directory: {err.strerror or err}"
        ) from err
    key = os.path.realpath(run)
    if key in _HELD:
        _HELD[key][1] += 1
        return RunDirLock(key, run)
    path = run / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise ValueError(
            f"cannot use {str(run)!r} as the run directory: {err.strerror or err}"
        ) from err
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ValueError(
                f"run directory {str(run)!r} is being written by another training "
                f"({_holder(path)}); wait for it to end, or pick another --run-dir"
            ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _HELD[key] = [fd, 1]
    return RunDirLock(key, run)


def run_files(run_dir: str | Path) -> tuple[list[str], list[str]]:
    """``(run's files, other files)``: the names in ``run_dir`` that an rlblocks run
    writes, and the rest (both sorted; ``([], [])`` for a missing directory)."""
    run = Path(run_dir)
    if not run.is_dir():
        return [], []
    names = sorted(p.name for p in run.iterdir())
    ours = [n for n in names if _RUN_FILE.match(n)]
    return ours, [n for n in names if not _RUN_FILE.match(n)]


def claim_run_dir(
    run_dir: str | Path,
    overwrite: bool = False,
    fresh_name: bool = False,
    resume_hint: str | None = None,
) -> RunDirLock:
    """Locks the run directory of a new run and checks that it may be written.

    Args:
        run_dir: The directory (created if missing).
        overwrite: A previous run there is deleted (its own files only).
        fresh_name: ``run_dir`` is a default name that must not be reused: when it exists,
            ``run_dir_1``, ``run_dir_2``, ... are tried (created atomically, so that two
            runs started in the same second never share one). The claimed directory is
            the lock's :attr:`RunDirLock.path`.
        resume_hint: What the refusal of a previous run tells to do instead (default: the
            command line's ``--resume`` / ``--overwrite`` / ``--run-dir``).

    Raises:
        ValueError: Another process writes there; the directory holds a previous run
            (without ``overwrite``) or files that are not a run's.
    """
    run = Path(run_dir)
    if fresh_name:
        run = fresh_run_dir(run)
    had_lock = (run / LOCK_FILE).exists()
    lock = lock_run_dir(run)
    try:
        ours, others = run_files(run)
        ours = [n for n in ours if n != LOCK_FILE and not _empty(run / n)]
        if others:
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise ValueError(
                f"run directory {str(run)!r} holds files that are not an rlblocks run's "
                f"({shown}); pick a new or empty --run-dir"
            )
        if ours and not overwrite:
            hint = resume_hint or (
                f"pass --resume {run} to continue it, --overwrite to replace it, or pick "
                "another --run-dir"
            )
            raise ValueError(
                f"run directory {str(run)!r} holds a previous run ({_describe(run, ours)}); " + hint
            )
        for name in ours:
            path = run / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
    except BaseException:
        if not had_lock:  # a refused directory is left as it was
            (run / LOCK_FILE).unlink(missing_ok=True)
        lock.release()
        raise
    return lock


def default_run_dir(
    config: Any, root: str | Path = "rlblocks_runs", algo: str | None = None
) -> Path:
    """``root/<ALGO>_<env>_<YYYYmmdd-HHMMSS>`` (a name not taken now; a suffix avoids
    clashes; :func:`fresh_run_dir` makes it so that it cannot be taken meanwhile); ``algo``
    defaults to the config's algorithm (RLlib runs name theirs).

    Examples:
        >>> from rlblocks.train.trainer_config import PPOConfig
        >>> default_run_dir(PPOConfig(env="CartPole-v1")).name.startswith("PPO_CartPole-v1_")
        True
    """
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in config.env_name)
    base = Path(root) / f"{algo or config.ALGORITHM}_{name}_{stamp}"
    path, i = base, 1
    while path.exists():
        path, i = base.with_name(f"{base.name}_{i}"), i + 1
    return path


def _empty(path: Path) -> bool:
    """A run's file that holds nothing of a run: an empty file, or one that is not a
    regular file (a directory is never empty here)."""
    if path.is_dir():
        return False
    try:
        return not path.is_file() or path.stat().st_size == 0
    except OSError:
        return True


def fresh_run_dir(base: Path) -> Path:
    """``base`` (or ``base_N``), created here and now: an existing directory is never
    returned, also when another process picks the same name at the same moment."""
    base.parent.mkdir(parents=True, exist_ok=True)
    path, i = base, 1
    while True:
        try:
            path.mkdir()
            return path
        except FileExistsError:
            path, i = base.with_name(f"{base.name}_{i}"), i + 1


def _describe(run: Path, names: list[str]) -> str:
    """A short account of a run directory's files: its progress rows and checkpoints."""
    from rlblocks.train.checkpoint import list_checkpoints
    from rlblocks.train.logger import read_progress

    parts = []
    rows = len(read_progress(run)) if "progress.csv" in names else 0
    if rows:
        parts.append(f"{rows} progress row{'s' if rows != 1 else ''}")
    n = len(list_checkpoints(run))
    if n:
        parts.append(f"{n} checkpoint{'s' if n != 1 else ''}")
    return ", ".join(parts) or ", ".join(names[:3])
