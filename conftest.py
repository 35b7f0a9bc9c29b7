"""pytest, repository-wide: without Ray, the ``rlblocks.rllib`` package (the ``ray`` extra)
is not collected for doctests, wherever rlblocks is imported from (``--pyargs rlblocks``
collects it from site-packages, outside this directory, where directory-scoped hooks do not
reach: its folder is added to ``--ignore``); its tests in ``tests/rllib`` skip themselves."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any


def pytest_configure(config: Any) -> None:
    if importlib.util.find_spec("ray") is not None:
        return
    spec = importlib.util.find_spec("rlblocks")
    if spec is None or not spec.submodule_search_locations:
        return
    rllib = [str(Path(p) / "rllib") for p in spec.submodule_search_locations]
    config.option.ignore = [*(config.getoption("ignore") or []), *rllib]
