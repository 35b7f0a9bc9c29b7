"""``rlblocks train --help``: the options, then every config key of the chosen algorithm's
config with its default and one-line doc, read from the config's own table
(:func:`rlblocks.config_fields.option_rows`), so a key added to the table is listed here.

``rlblocks train --algo DQN --help`` lists DQN's keys (``--algo`` given before ``--help``;
the same keys on both backends); PPO's otherwise. Only the config tables are imported (no
torch).

Examples:
    >>> text = config_keys_help("DQN", width=100)
    >>> text.splitlines()[0]
    'config keys of DQNConfig (--set KEY=VALUE or a --config file):'
    >>> "  double_q (default True): Double Q-learning" in text
    True
"""

from __future__ import annotations

import argparse
import shutil
import textwrap
from typing import Any

__all__ = ["ConfigHelp", "config_class", "config_keys_help", "table_help"]


def config_class(algo: str | None) -> Any:
    """The config class of a new run of ``algo`` (None: PPO), the same on both backends:
    ``DQNConfig`` / ``SACConfig`` / ``TD3Config`` / ``DDPGConfig`` for DQN / SAC / TD3 /
    DDPG, ``PPOConfig`` for PPO, APPO and IMPALA."""
    from rlblocks.train.offpolicy_config import DDPGConfig, DQNConfig, SACConfig, TD3Config
    from rlblocks.train.trainer_config import PPOConfig

    classes = {"DQN": DQNConfig, "SAC": SACConfig, "TD3": TD3Config, "DDPG": DDPGConfig}
    return classes.get(algo or "PPO", PPOConfig)


def table_help(cls: Any, width: int = 100, prefix: str = "") -> list[str]:
    """One wrapped entry per row of the config table ``cls``:
    ``KEY (default VALUE): doc``."""
    from rlblocks.config_fields import option_rows

    lines: list[str] = []
    for key, default, doc in option_rows(cls):
        entry = f"{prefix}{key} (default {default!r})" + (f": {doc}" if doc else "")
        lines += textwrap.wrap(
            entry, width, initial_indent="  ", subsequent_indent="      ", break_on_hyphens=False
        )
    return lines


def config_keys_help(algo: str | None, width: int | None = None) -> str:
    """The config keys of a new ``algo`` run (:func:`config_class`), then the ``model`` keys
    with the algorithm's model defaults."""
    from rlblocks.config import ModelConfig

    width = width or max(60, min(120, shutil.get_terminal_size().columns))
    cls = config_class(algo)
    lines = [f"config keys of {cls.__name__} (--set KEY=VALUE or a --config file):"]
    lines += table_help(cls, width)
    model = ModelConfig.from_dict(dict(cls.MODEL_DEFAULTS))
    lines.append("")
    lines.append(f"model keys (--set model.KEY=VALUE; the defaults {cls.ALGORITHM} starts from):")
    entries = ", ".join(f"{key}={model[key]!r}" for key in model)
    lines += textwrap.wrap(entries, width, initial_indent="  ", subsequent_indent="  ")
    return "\n".join(lines)


class ConfigHelp(argparse.Action):
    """``-h``/``--help`` of ``rlblocks train``: the usual help, then
    :func:`config_keys_help` for the ``--algo`` parsed so far."""

    def __init__(
        self,
        option_strings: list[str],
        dest: str = argparse.SUPPRESS,
        default: Any = argparse.SUPPRESS,
        help: str | None = None,
    ) -> None:
        super().__init__(option_strings, dest, default=default, nargs=0, help=help)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None
    ) -> None:
        """Prints the help and the config keys, then exits (code 0)."""
        keys = config_keys_help(getattr(namespace, "algo", None))
        print(f"{parser.format_help()}\n{keys}")
        parser.exit()
