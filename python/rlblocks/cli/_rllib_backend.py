"""The ``--backend rllib`` door of ``train`` and ``evaluate``: which runs are RLlib's
(read from ``config.json``, no Ray import), and :mod:`rlblocks.rllib.trainer` and
:mod:`rlblocks.rllib.evaluate` behind a user's error naming the extra.

Examples:
    >>> rllib_run("no/such/run")
    False
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def rllib_run(path: str) -> bool:
    """Whether ``path`` (a run or checkpoint directory) is a ``--backend rllib`` run; reads
    its ``config.json`` only (no Ray import)."""
    for candidate in (Path(path), Path(path).parent):
        cfg = candidate / "config.json"
        if cfg.is_file():
            try:
                backend = json.loads(cfg.read_text()).get("backend")
            except ValueError:
                return False
            return isinstance(backend, dict) and backend.get("name") == "rllib"
    return False


def rllib_trainer() -> Any:
    """``rlblocks.rllib.trainer``; without Ray a user's error (ValueError) naming the extra."""
    try:
        from rlblocks.rllib import trainer
    except ImportError as err:
        raise ValueError(str(err)) from None
    return trainer


def rllib_evaluate_run() -> Any:
    """:func:`rlblocks.rllib.evaluate.evaluate_run`; without Ray a user's error (ValueError)
    naming the extra."""
    try:
        from rlblocks.rllib.evaluate import evaluate_run
    except ImportError as err:
        raise ValueError(str(err)) from None
    return evaluate_run
