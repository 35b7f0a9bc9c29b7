"""``rlblocks train --help`` lists the config keys of the chosen algorithm's config with their
defaults and one-line docs, read from the config table itself (``option()`` rows and the
docstrings under them): a key added to a table is listed without another edit."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import rlblocks
from rlblocks.cli.train_help import config_keys_help, table_help
from rlblocks.config_fields import as_int, option, option_rows
from rlblocks.train.offpolicy_config import DQNConfig, SACConfig
from rlblocks.train.trainer_config import PPOConfig


def _help(*argv: str) -> str:
    where = str(Path(rlblocks.__file__).resolve().parents[1])
    res = subprocess.run(
        [sys.executable, "-c", "from rlblocks.cli import main; main()", "train", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": where, "COLUMNS": "100"},
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(
    ("argv", "cls"),
    [
        ((), PPOConfig),
        (("--algo", "DQN"), DQNConfig),
        (("--algo", "SAC"), SACConfig),
        # --algo X means the same config class on both backends
        (("--backend", "rllib", "--algo", "DQN"), DQNConfig),
        (("--algo", "SAC", "--backend", "rllib"), SACConfig),
        (("--backend", "rllib", "--algo", "APPO"), PPOConfig),
    ],
)
def test_train_help_lists_every_row_of_the_algorithms_table(argv, cls) -> None:
    text = _help(*argv, "--help")
    assert text.startswith("usage: rlblocks train")
    body = _flat(text.split(f"config keys of {cls.__name__}", 1)[1])
    rows = option_rows(cls)
    assert len(rows) > 20
    for key, default, doc in rows:
        assert _flat(f"{key} (default {default!r})" + (f": {doc}" if doc else "")) in body, key
    assert all(doc for _, _, doc in rows), "a row without its doc"
    model = _flat(text.split("model keys", 1)[1])
    for key, value in cls.MODEL_DEFAULTS.items():
        assert f"{key}={value!r}" in model


def test_the_help_names_the_chosen_algorithms_defaults() -> None:
    assert "lr (default 0.0005)" in _flat(_help("--algo", "DQN", "-h"))
    assert "lr (default 0.0003)" in _flat(_help("-h"))
    assert "--set KEY=VALUE" in _help("-h")


@dataclass
class _Grown(PPOConfig):
    """PPO's table with one more row, as a contributor adds one."""

    warmup_iterations: int = option(7, as_int)
    """Iterations before the first update. Later sentences stay out of --help."""

    ALGORITHM: ClassVar[str] = "PPO"


def test_a_key_added_to_a_table_is_listed() -> None:
    text = _flat("\n".join(table_help(_Grown, width=90)))
    assert "warmup_iterations (default 7): Iterations before the first update." in text
    assert "Later sentences" not in text
    # rows inherited and overridden keep their own docs and defaults
    assert "lambda (default 0.95): GAE lambda (RLlib key lambda)." in text
    assert "grad_clip (default 0.5): Max global gradient norm" in text


def test_config_keys_help_has_no_rst_markup() -> None:
    for algo in ("PPO", "DQN", "SAC"):
        text = config_keys_help(algo, width=100)
        for raw in ("``", ":class:", ":mod:", ":func:", ":meth:", ":data:", ":attr:"):
            assert raw not in text, (algo, raw)
