"""Tuned configs: PPO settings per environment that reach a stated return in a stated budget.

Each is a YAML file in ``rlblocks/train/tuned_configs/`` holding RLlib-style PPO keys (what
``rlblocks train --config`` takes) plus a ``stop:`` block (``episode_return_mean`` to reach
within ``timesteps_total`` steps) and a one-line ``description``. ``rlblocks train --tuned
NAME`` runs one; ``rlblocks tuned`` lists them with the figures that
``benchmarks/bench_tuned.py --record`` last measured (``measured.json`` beside them), or else
what ``benchmarks/bench_suites.py --write-docs`` last measured against rl-baselines3-zoo
(``suites.json``).
``MODEL_DEFAULTS`` stays RLlib's; these files are where good settings live.

Examples:
    >>> cfg = load_tuned("stateless_cartpole_lstm")
    >>> cfg.env, cfg.stop_reward, cfg.config["model"]["use_lstm"]
    ('rlblocks/StatelessCartPole-v0', 150.0, True)
    >>> tuned_for("rlblocks/StatelessCartPole-v0", "use_attention")
    ['stateless_cartpole_attention']
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ALIASES",
    "STOP_KEYS",
    "TUNED_DIR",
    "TunedConfig",
    "list_tuned",
    "load_tuned",
    "split_stop",
    "stop_value",
    "tuned_for",
]

#: Where the YAML files (and ``measured.json``, ``suites.json``) live.
TUNED_DIR = Path(__file__).with_name("tuned_configs")
_MEASURED = TUNED_DIR / "measured.json"
_SUITES = TUNED_DIR / "suites.json"
# Keys of a config file that are not PPO config keys.
_META_KEYS = ("stop", "description", "hardware", "algo", "zoo", "extra")
#: Names the tuned configs had before they were named ``<env>_<algo>`` (still accepted).
ALIASES = {"cartpole": "cartpole_ppo", "acrobot": "acrobot_ppo", "pendulum": "pendulum_ppo"}
#: The algorithms a tuned config (or a config file's ``algo:``) may name for the native trainer.
NATIVE_ALGOS = ("PPO", "DQN", "SAC", "TD3", "DDPG")


@dataclass(frozen=True)
class TunedConfig:
    """One tuned config: its PPO keys and what it must reach."""

    name: str
    description: str
    config: dict[str, Any]
    stop_reward: float | None
    stop_timesteps: int | None
    hardware: str = "CPU"
    """Where the budget is meant to be run (``CPU``; or a GPU / long CPU run for Atari)."""
    algo: str = "PPO"
    """The algorithm (``PPO``, ``DQN`` or ``SAC``)."""
    zoo: tuple[float, int] | None = None
    """rl-baselines3-zoo's published ``(return, step budget)`` for this env and algorithm (the
    file's ``zoo: {episode_return_mean, timesteps_total}``; None: the zoo publishes none)."""
    measured: dict[str, Any] = field(default_factory=dict)
    """The last ``bench_tuned.py --record`` figures (empty if never measured)."""
    suite: dict[str, Any] = field(default_factory=dict)
    """The suites table's figures (``bench_suites.py --write-docs``: the deterministic
    evaluations' ``mean`` and ``std`` over ``seeds`` seeds, how many of them ``reached`` its
    ``target`` (the zoo's return; MiniGrid: 0.9), the mean ``steps`` run; empty: not in the
    table or not run)."""
    extra: str | None = None
    """The rlblocks extra the env needs (``pip install "rlblocks[<extra>]"``), if any."""

    @property
    def env(self) -> str:
        return str(self.config["env"])

    @property
    def path(self) -> Path:
        return TUNED_DIR / f"{self.name}.yaml"

    @property
    def model_summary(self) -> str:
        """``"custom: ParametricActionsModel"``, ``"lstm 64 on fc [64]"``, ``"fc [64, 64]"``."""
        model = self.config.get("model", {})
        if model.get("custom_model"):
            return f"custom: {str(model['custom_model']).rpartition(':')[2]}"
        base = f"fc {model.get('fcnet_hiddens', [256, 256])}"
        if model.get("use_lstm"):
            return f"lstm {model.get('lstm_cell_size', 256)} on {base}"
        if model.get("use_attention"):
            return f"attention {model.get('attention_dim', 64)} on {base}"
        if model.get("conv_filters") is not None or "Pong" in self.env or "Breakout" in self.env:
            return "vision"
        return base


#: The keys a ``stop`` block may hold.
STOP_KEYS = ("episode_return_mean", "timesteps_total")


def split_stop(data: dict[str, Any]) -> tuple[dict[str, Any], float | None, int | None]:
    """A config file's mapping -> ``(PPO keys, stop reward, stop timesteps)``.

    Raises:
        ValueError: A ``stop`` block that is not ``{episode_return_mean, timesteps_total}``
            or holds a bad value (see :func:`stop_value`).

    Examples:
        >>> split_stop({"env": "CartPole-v1", "stop": {"episode_return_mean": 475}})
        ({'env': 'CartPole-v1'}, 475.0, None)
    """
    config = {k: v for k, v in data.items() if k not in _META_KEYS}
    stop = data.get("stop")
    if stop is None:
        stop = {}
    if not isinstance(stop, dict):
        raise ValueError(
            f"stop must be a mapping like {{episode_return_mean: 475, "
            f"timesteps_total: 100000}}, got {stop!r}"
        )
    unknown = [k for k in stop if k not in STOP_KEYS]
    if unknown:
        raise ValueError(f"stop: unknown keys {unknown} (known: {', '.join(STOP_KEYS)})")
    reward = stop.get("episode_return_mean")
    steps = stop.get("timesteps_total")
    return (
        config,
        None if reward is None else float(stop_value("episode_return_mean", reward)),
        None if steps is None else int(stop_value("timesteps_total", steps)),
    )


def stop_value(key: str, value: Any, name: str | None = None) -> float | int:
    """A validated stop condition (the one check for config files, tuned configs and the
    command line): ``episode_return_mean`` a finite number, ``timesteps_total`` a whole
    number of steps > 0 (``1e5`` is 100000; ``64.9`` and ``true`` are refused).

    Args:
        key: ``"episode_return_mean"`` or ``"timesteps_total"``.
        value: The value to check.
        name: How the message names it (default ``stop.<key>``).

    Raises:
        ValueError: A bad value; the message names the key, the value and what is allowed.

    Examples:
        >>> stop_value("timesteps_total", 1e5)
        100000
        >>> stop_value("timesteps_total", 64.9)
        Traceback (most recent call last):
        ...
        ValueError: stop.timesteps_total must be a whole number of steps > 0, got 64.9
    """
    label = name or f"stop.{key}"
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if key == "timesteps_total":
        if whole and not isinstance(value, bool) and value > 0:
            return int(value)
        raise ValueError(f"{label} must be a whole number of steps > 0, got {value!r}")
    if key == "episode_return_mean":
        try:
            number = float(value) if isinstance(value, (int, float)) else math.nan
        except OverflowError:  # an int beyond float's range
            number = math.inf
        if not isinstance(value, bool) and math.isfinite(number):
            return number
        raise ValueError(f"{label} must be a finite number, got {value!r}")
    raise ValueError(f"stop: unknown key {key!r} (known: {', '.join(STOP_KEYS)})")


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def list_tuned() -> list[TunedConfig]:
    """Every tuned config, by name."""
    return [load_tuned(p.stem) for p in sorted(TUNED_DIR.glob("*.yaml"))]


def load_tuned(name: str) -> TunedConfig:
    """The tuned config ``name`` (a file stem in ``tuned_configs/``, or an old name in
    :data:`ALIASES`).

    Raises:
        ValueError: No such tuned config (the message lists the close names).

    Examples:
        >>> load_tuned("cartpole").name
        'cartpole_ppo'
    """
    name = ALIASES.get(name, name)
    path = TUNED_DIR / f"{name}.yaml"
    if not path.is_file():
        names = [p.stem for p in sorted(TUNED_DIR.glob("*.yaml"))]
        close = difflib.get_close_matches(name, [*names, *ALIASES], n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ValueError(
            f"no tuned config {name!r}{hint} (`rlblocks tuned` lists them: {', '.join(names)})"
        )
    import yaml

    data = yaml.safe_load(path.read_text())
    config, reward, steps = split_stop(data)
    return TunedConfig(
        name=name,
        description=str(data.get("description", "")),
        config=config,
        stop_reward=reward,
        stop_timesteps=steps,
        hardware=str(data.get("hardware", "CPU")),
        zoo=_zoo(data.get("zoo")),
        algo=str(data.get("algo", "PPO")),
        measured=_read_json(_MEASURED).get(name, {}),
        suite=_read_json(_SUITES).get(name, {}),
        extra=str(data["extra"]) if data.get("extra") else None,
    )


def _zoo(block: Any) -> tuple[float, int] | None:
    """A config file's ``zoo:`` block -> ``(return, steps)`` (validated as a stop block)."""
    if block is None:
        return None
    _, reward, steps = split_stop({"stop": block})
    if reward is None or steps is None:
        raise ValueError(f"zoo must hold episode_return_mean and timesteps_total, got {block!r}")
    return reward, steps


def tuned_for(env: str, wrapper: str | None = None) -> list[str]:
    """Names of the tuned configs for ``env`` (whose model sets ``wrapper``, e.g.
    ``"use_lstm"``, if given)."""
    return [
        t.name
        for t in list_tuned()
        if t.env == env and (wrapper is None or t.config.get("model", {}).get(wrapper))
    ]
