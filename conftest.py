"""pytest, repository-wide: without Ray, the ``rlblocks.rllib`` package (the ``ray`` extra)
is not collected for doctests; its tests in ``tests/rllib`` skip themselves."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_HAVE_RAY = importlib.util.find_spec("ray") is not None


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    parts = collection_path.parts
    in_rllib = any(parts[i:i + 2] == ("rlblocks", "rllib") for i in range(len(parts) - 1))
    return True if in_rllib and not _HAVE_RAY else None
