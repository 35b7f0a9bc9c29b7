"""Checkpoints: one directory ``checkpoint_NNNNNN`` per save, written atomically.

A checkpoint holds ``state.pt`` (model, optimizer, filter, RNG states, counters, env
snapshot; a ``torch.save`` pickle, so only load checkpoints you trust) and ``meta.json``
(format version, iteration, timesteps, the last mean return, a checksum of ``state.pt``).
Both are written into a temporary directory next to the final one and fsynced, then the
directory is renamed into place. Replacing a checkpoint of the same name renames the old copy
to ``.checkpoint_NNNNNN.old`` first, renames the new one in, and only then deletes the old
one, so a valid copy exists at every moment: a save killed between the two renames leaves
``.old`` under the real name's absence, which :func:`list_checkpoints` reads as that
checkpoint and :func:`recover_interrupted_saves` (run by every save and every resume) renames
back. Resuming from an older checkpoint than the newest moves the newer ones aside
(:func:`abandon_newer_checkpoints`), so that a later plain resume cannot pick up the
abandoned timeline.

Examples:
    >>> import tempfile, pathlib
    >>> run = pathlib.Path(tempfile.mkdtemp())
    >>> path = save_checkpoint(run, {"iteration": 3, "timesteps_total": 30, "x": 1})
    >>> path.name, load_checkpoint(run)["x"]
    ('checkpoint_000003', 1)
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

__all__ = [
    "BEST",
    "FORMAT_VERSION",
    "EXACT_BEST_BY",
    "GAMES_BEST_BY",
    "abandon_newer_checkpoints",
    "checkpoint_meta",
    "checkpoint_run_dir",
    "find_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "prune_checkpoints",
    "recover_interrupted_saves",
    "save_checkpoint",
    "select_checkpoint",
]

FORMAT_VERSION = 1
_NAME = re.compile(r"^checkpoint_(\d{6,})$")
# Temporary directories of save_checkpoint: ".checkpoint_NNNNNN.<random>" while writing,
# ".checkpoint_NNNNNN.old" (the previous copy) while replacing.
_TEMP = re.compile(r"^\.checkpoint_(\d{6,})\.(.+)$")
_OLD = "old"
#: The run directory's subdirectory holding the best checkpoint so far.
BEST = "best"
#: What ``best/`` is scored by when it is the checkpoint ``rlblocks evaluate`` and ``export``
#: pick by default: greedy games against a random legal player (turn-based self-play).
GAMES_BEST_BY = "selfplay/games_vs_random"
#: What ``best/`` is scored by where a turn-based run scores its policy exactly against the
#: random legal player (``selfplay_eval_exact``); ``"auto"`` picks that ``best/`` too.
EXACT_BEST_BY = "selfplay/exact_vs_random"
_CHOICES = ("auto", "best", "last")


def _fsync_dir(path: Path) -> None:
    """Makes the renames inside ``path`` durable (a no-op where directories cannot be
    opened, e.g. on Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def recover_interrupted_saves(run_dir: str | Path) -> list[Path]:
    """Repairs what a killed :func:`save_checkpoint` left behind (one process writes a
    run's checkpoints): a ``.checkpoint_NNNNNN.old`` whose ``checkpoint_NNNNNN`` is missing
    (the save was killed between its two renames) is renamed back, since it is the only
    valid copy; other temporary directories (half-written, or an ``.old`` copy that the new
    checkpoint already replaced) are deleted.

    Returns:
        The temporary directories deleted.
    """
    run = Path(run_dir)
    if not run.is_dir():
        return []
    removed = []
    temps = sorted(
        (p for p in run.iterdir() if p.is_dir() and _TEMP.match(p.name)),
        key=lambda p: not p.name.endswith("." + _OLD),
    )  # the .old copies first
    for p in temps:
        m = _TEMP.match(p.name)
        assert m is not None
        real = run / f"checkpoint_{m.group(1)}"
        if m.group(2) == _OLD and not real.exists():
            os.replace(p, real)
            _fsync_dir(run)
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """The checkpoint directories of a run, oldest first (read only: where a killed save
    left only ``.checkpoint_NNNNNN.old``, that copy stands for ``checkpoint_NNNNNN``)."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    found: dict[int, Path] = {}
    for p in run.iterdir():
        if not p.is_dir():
            continue
        if m := _NAME.match(p.name):
            found[int(m.group(1))] = p
        elif (t := _TEMP.match(p.name)) and t.group(2) == _OLD:
            found.setdefault(int(t.group(1)), p)
    return [found[i] for i in sorted(found)]


def abandon_newer_checkpoints(run_dir: str | Path, iteration: int) -> Path | None:
    """Resuming from iteration ``iteration`` while the run holds later checkpoints: moves
    them, and a copy of the whole ``progress.csv``, into ``run_dir/abandoned_<time>/`` with
    a RuntimeWarning, so that the run keeps one timeline (a later resume of the run
    directory would otherwise pick the abandoned newest checkpoint).

    Returns:
        The ``abandoned_<time>`` directory, or None when no checkpoint is newer.
    """
    run = Path(run_dir)
    newer = [p for p in list_checkpoints(run) if _iteration(p) > iteration]
    if not newer:
        return None
    stamp = time.strftime("%Y%m%d_%H%M%S")
    dest = run / f"abandoned_{stamp}"
    n = 1
    while dest.exists():
        n += 1
        dest = run / f"abandoned_{stamp}_{n}"
    dest.mkdir()
    progress = run / "progress.csv"
    if progress.is_file():
        shutil.copy2(progress, dest / "progress.csv")
    for p in newer:
        os.replace(p, dest / f"checkpoint_{_iteration(p):06d}")
    _fsync_dir(run)
    names = ", ".join(f"checkpoint_{_iteration(p):06d}" for p in newer)
    warnings.warn(
        f"resuming from iteration {iteration} abandons the later checkpoints of "
        f"{str(run)!r} ({names}): moved to {str(dest)!r}, with the old progress.csv",
        RuntimeWarning,
        stacklevel=2,
    )
    return dest


def checkpoint_run_dir(path: str | Path) -> Path:
    """The run directory of ``path``: a checkpoint's parent (also for a checkpoint name
    that a killed save left missing), else ``path`` itself."""
    p = Path(path)
    if _NAME.match(p.name) or _TEMP.match(p.name) or (p / "state.pt").is_file():
        return p.parent
    return p


def _iteration(path: Path) -> int:
    m = _NAME.match(path.name) or _TEMP.match(path.name)
    assert m is not None
    return int(m.group(1))


def find_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory: ``path`` itself, or the newest checkpoint in a run directory.

    Raises:
        ValueError: ``path`` does not exist or holds no checkpoint.
    """
    p = Path(path)
    if not p.exists():
        raise ValueError(f"checkpoint or run directory {str(p)!r} does not exist")
    if (p / "state.pt").is_file():
        return p
    found = list_checkpoints(p)
    if not found:
        raise ValueError(
            f"{str(p)!r} is neither a checkpoint (no state.pt) nor a run directory with "
            "checkpoint_NNNNNN subdirectories"
        )
    return found[-1]


def select_checkpoint(path: str | Path, which: str = "auto") -> tuple[Path, str]:
    """The checkpoint ``rlblocks evaluate`` and ``export`` load, and a line saying which.

    ``path`` a checkpoint directory: that one. A run directory: ``which`` = ``"last"`` its
    newest ``checkpoint_NNNNNN``; ``"best"`` its ``best/`` (the best score so far,
    :meth:`~rlblocks.train.trainer.Trainer.best_by`); ``"auto"`` its ``best/`` when that is
    kept by games against a random legal player (:data:`GAMES_BEST_BY`, a turn-based
    self-play run) or by exact scores against it (:data:`EXACT_BEST_BY`), else the newest.

    Raises:
        ValueError: An unknown ``which``, no checkpoint there, or ``"best"`` of a run
            directory without ``best/``.
    """
    if which not in _CHOICES:
        raise ValueError(f"--checkpoint {which!r}: choose one of {list(_CHOICES)}")
    p = Path(path)
    best = p / BEST
    has_best = (best / "state.pt").is_file()
    if (p / "state.pt").is_file() or which == "last" or (which == "auto" and not has_best):
        ckpt = find_checkpoint(p)
        newest = "" if ckpt == p else ", the newest"
        return ckpt, f"checkpoint {str(ckpt)!r} ({_described(ckpt)}{newest})"
    if not has_best:
        raise ValueError(f"--checkpoint best: run directory {str(p)!r} has no best/ checkpoint")
    meta = checkpoint_meta(best)
    if which == "auto" and meta.get("best_by") not in (GAMES_BEST_BY, EXACT_BEST_BY):
        ckpt = find_checkpoint(p)
        return ckpt, f"checkpoint {str(ckpt)!r} ({_described(ckpt)}, the newest)"
    return best, (
        f"checkpoint {str(best)!r} ({_described(best)}, the best by {meta.get('best_by', '?')}"
        f"; --checkpoint last for the newest)"
    )


def _described(ckpt: Path) -> str:
    meta = checkpoint_meta(ckpt)
    return f"iteration {meta.get('iteration')}, {meta.get('timesteps_total')} env steps"


def save_checkpoint(
    run_dir: str | Path, state: dict[str, Any], path: str | Path | None = None
) -> Path:
    """Writes ``state`` atomically to ``path`` (default ``run_dir/checkpoint_<iteration>``).

    ``state`` needs ``iteration`` and ``timesteps_total``. An existing checkpoint of the
    same name is replaced; temporary directories orphaned by an earlier, killed save are
    removed.

    Raises:
        ValueError: The checkpoint could not be written (disk full, permissions, ...); no
            partial checkpoint is left.
    """
    try:
        return _save(Path(run_dir), state, path)
    except OSError as err:
        where = err.filename or run_dir
        raise ValueError(
            f"cannot write a checkpoint to {str(where)!r}: {err.strerror or err}"
        ) from err


def _save(run: Path, state: dict[str, Any], path: str | Path | None) -> Path:
    target = Path(path) if path is not None else run / f"checkpoint_{int(state['iteration']):06d}"
    import torch

    target.parent.mkdir(parents=True, exist_ok=True)
    recover_interrupted_saves(target.parent)
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    meta = {
        "format_version": FORMAT_VERSION,
        "iteration": int(state["iteration"]),
        "timesteps_total": int(state["timesteps_total"]),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "bytes": len(payload),
        "format": str(state.get("format", "rlblocks.ppo")),
    }
    if isinstance(state.get("seed"), int):
        meta["seed"] = int(state["seed"])  # evaluate --exported reads it without torch
    if isinstance(state.get("best_by"), str):
        meta["best_by"] = state["best_by"]  # what best/ is scored by (select_checkpoint)
        meta["best_score"] = float(state.get("best_score", float("-inf")))
    last = (state.get("last_metrics") or {}).get("episode_return_mean")
    if isinstance(last, (int, float)) and not isinstance(last, bool):
        meta["episode_return_mean"] = float(last)  # NaN before the first episode
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for name, data in (("state.pt", payload), ("meta.json", json.dumps(meta).encode())):
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        _fsync_dir(tmp)
        if target.exists():
            old = target.with_name(f".{target.name}.{_OLD}")
            shutil.rmtree(old, ignore_errors=True)  # target is the valid copy meanwhile
            os.replace(target, old)  # from here until the next rename, .old is the copy
            os.replace(tmp, target)
            _fsync_dir(target.parent)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
            _fsync_dir(target.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """The ``meta.json`` of a checkpoint (or of a run directory's newest one): format
    version, ``iteration``, ``timesteps_total``, checksum.

    Raises:
        ValueError: No checkpoint there, or an unreadable or unsupported ``meta.json``.
    """
    ckpt = find_checkpoint(path)
    try:
        meta = json.loads((ckpt / "meta.json").read_text())
    except (OSError, ValueError) as err:
        raise ValueError(
            f"checkpoint {str(ckpt)!r} is corrupt: cannot read meta.json ({err})"
        ) from None
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"checkpoint {str(ckpt)!r}: unsupported format {meta!r} (expected format_version "
            f"{FORMAT_VERSION})"
        )
    return meta


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Loads a checkpoint (a checkpoint directory or a run directory: its newest one).

    Raises:
        ValueError: No checkpoint there, a missing/unreadable ``meta.json``, a checksum
            mismatch (a truncated or modified ``state.pt``), or an unreadable state.
    """
    ckpt = find_checkpoint(path)
    meta = checkpoint_meta(ckpt)
    payload = (ckpt / "state.pt").read_bytes()
    if hashlib.sha256(payload).hexdigest() != meta.get("sha256"):
        raise ValueError(
            f"checkpoint {str(ckpt)!r} is corrupt: state.pt ({len(payload)} bytes) does not "
            f"match the checksum in meta.json ({meta.get('bytes')} bytes expected)"
        )
    import torch

    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)
    except Exception as err:  # unpickling errors come in many types
        raise ValueError(
            f"checkpoint {str(ckpt)!r} is corrupt: {type(err).__name__}: {err}"
        ) from None
    if not isinstance(state, dict) or "iteration" not in state:
        raise ValueError(f"checkpoint {str(ckpt)!r} does not hold an rlblocks training state")
    state["_path"] = str(ckpt)
    return state


def prune_checkpoints(run_dir: str | Path, keep: int) -> None:
    """Deletes all but the ``keep`` newest checkpoints (``keep == 0`` keeps all)."""
    if keep <= 0:
        return
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
