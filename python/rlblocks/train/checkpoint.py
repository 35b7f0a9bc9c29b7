"""Checkpoints: one directory ``checkpoint_NNNNNN`` per save, written atomically.

A checkpoint holds ``state.pt`` (model, optimizer, filter, RNG states, counters, env
snapshot; a ``torch.save`` pickle, so only load checkpoints you trust) and ``meta.json``
(format version, iteration, timesteps, a checksum of ``state.pt``). Both are written into a
temporary directory next to the final one, flushed, then the directory is renamed into place:
a crash mid-save never leaves a half-written checkpoint under the final name.

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
from pathlib import Path
from typing import Any

import torch

__all__ = ["FORMAT_VERSION", "checkpoint_meta", "find_checkpoint", "list_checkpoints",
           "load_checkpoint", "prune_checkpoints", "remove_orphaned_temp_dirs", "save_checkpoint"]

FORMAT_VERSION = 1
_NAME = re.compile(r"^checkpoint_(\d{6,})$")
# Temporary directories of save_checkpoint: ".checkpoint_NNNNNN.<random>" while writing,
# ".checkpoint_NNNNNN.old" while replacing.
_TEMP = re.compile(r"^\.checkpoint_\d{6,}\..+$")


def remove_orphaned_temp_dirs(run_dir: str | Path) -> list[Path]:
    """Deletes the temporary directories that a killed :func:`save_checkpoint` left behind
    (one process writes a run's checkpoints) and returns them."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    orphans = [p for p in run.iterdir() if p.is_dir() and _TEMP.match(p.name)]
    for p in orphans:
        shutil.rmtree(p, ignore_errors=True)
    return orphans


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """The checkpoint directories of a run, oldest first."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in run.iterdir()
             if p.is_dir() and (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


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


def save_checkpoint(run_dir: str | Path, state: dict[str, Any], path: str | Path | None = None
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
        raise ValueError(f"cannot write a checkpoint to {str(where)!r}: {err.strerror or err}"
                         ) from err


def _save(run: Path, state: dict[str, Any], path: str | Path | None) -> Path:
    target = Path(path) if path is not None else run / f"checkpoint_{int(state['iteration']):06d}"
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_orphaned_temp_dirs(target.parent)
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    meta = {
        "format_version": FORMAT_VERSION,
        "iteration": int(state["iteration"]),
        "timesteps_total": int(state["timesteps_total"]),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "bytes": len(payload),
    }
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for name, data in (("state.pt", payload), ("meta.json", json.dumps(meta).encode())):
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
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
        raise ValueError(f"checkpoint {str(ckpt)!r} is corrupt: cannot read meta.json ({err})"
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
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)
    except Exception as err:  # unpickling errors come in many types
        raise ValueError(f"checkpoint {str(ckpt)!r} is corrupt: {type(err).__name__}: {err}"
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
