"""The ``--backend rllib`` door of ``train`` and ``evaluate``: which runs are RLlib's
(read from ``config.json``, no Ray import), and :mod:`rlblocks.rllib.trainer` and
:mod:`rlblocks.rllib.evaluate` behind a user's error naming the extra.

Examples:
    >>> rllib_run("no/such/run")
    False
"""

from __future__ import annotations

from typing import Any


def rllib_run(path: str) -> bool:
    """:func:`rlblocks.export.rllib_run`, imported when a command runs (``--help`` imports
    none of the library)."""
    from rlblocks.export import rllib_run as is_rllib_run

    return is_rllib_run(path)


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
