"""The PPO keys of ``rlblocks train``: a ``--config`` file or a ``--tuned`` config, then
``--env`` and the ``--set key=value`` overrides (later ones win), and the ``stop`` block.

``--set`` values are parsed as YAML; dotted keys reach into the mapping keys (``model``,
``env_config``, ``rllib``, ``stop``). Config files read ``1e5`` and ``1e-3`` as numbers
(YAML 1.2), as ``--set`` does.

Examples:
    >>> parse_overrides(["lr=1e-3", "model.fcnet_hiddens=[32, 32]", "num_envs=4"])
    {'lr': 0.001, 'model': {'fcnet_hiddens': [32, 32]}, 'num_envs': 4}
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["config_data", "load_config_file", "parse_overrides"]

#: Config keys whose value is a mapping of further keys (``--set model.KEY=VALUE``).
_MAPPING_KEYS = {
    "model": "model.fcnet_hiddens=[64,64]",
    "env_config": "env_config.size=8",
    "rllib": "rllib.training.n_step=3",
    "stop": "stop.timesteps_total=100000",
}


def _yaml_value(text: str) -> Any:
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _yaml_load(text: str) -> Any:
    """``yaml.safe_load``, but ``1e5`` and ``1e-3`` are numbers (YAML 1.2), as ``--set``
    reads them, not the strings of YAML 1.1."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    return yaml.load(text, Loader=Loader)  # noqa: S506 (a SafeLoader subclass)


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["a=1", "model.b=[2]"]`` -> ``{"a": 1, "model": {"b": [2]}}`` (values as YAML).

    Raises:
        ValueError: An item without ``=`` or with an empty key, or a key given twice (also
            ``model=...`` with ``model.KEY=...``): one of the values would be dropped.
    """
    out: dict[str, Any] = {}
    seen: dict[str, tuple[str, Any]] = {}  # dotted key -> the item that set it, its value
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ValueError(
                f"--set expects key=value (e.g. lr=1e-3 or "
                f"model.fcnet_hiddens=[64,64]), got {item!r}"
            )
        parsed = _yaml_value(value)
        for other, (given, given_value) in seen.items():
            # a mapping set whole and one of its keys: one would be dropped (a plain value
            # there is refused below, or as the wrong type of its key)
            whole = parsed if other.startswith(key + ".") else given_value
            if other == key or (
                (other.startswith(key + ".") or key.startswith(other + "."))
                and isinstance(whole, dict)
            ):
                raise ValueError(
                    f"--set {item}: {min(key, other, key=len)} is already set by --set "
                    f"{given}; give each key once"
                )
        seen[key] = (item, parsed)
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"--set {item!r}: {part!r} was already set to a plain value")
            node = child
        node[parts[-1]] = parsed
    return out


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Reads a YAML or JSON config file (a mapping of PPO keys).

    Raises:
        ValueError: Missing file, unparsable content, or not a mapping.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"config file {str(p)!r} does not exist")
    text = p.read_text()
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = _yaml_load(text)
    except Exception as err:  # json and yaml raise different error types
        raise _parse_error(p, err) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(
            f"config file {str(p)!r} must hold a mapping of config keys, got {type(data).__name__}"
        )
    return data


def _parse_error(path: Path, err: Exception) -> ValueError:
    """The ValueError of an unparsable config file: the problem and its line and column on
    one line; a YAML error's lines (the source line and the ``^`` under the position) in
    its ``detail``, shown as they are."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None)
    if mark is None or problem is None:
        return ValueError(f"config file {str(path)!r} could not be parsed: {err}")
    context = getattr(err, "context", None)
    what = f"{context}: {problem}" if context else str(problem)
    out = ValueError(
        f"config file {str(path)!r} could not be parsed: {what} "
        f"(line {mark.line + 1}, column {mark.column + 1})"
    )
    snippet = mark.get_snippet() if hasattr(mark, "get_snippet") else None
    out.detail = snippet or ""  # type: ignore[attr-defined]
    return out


def _flag_overrides(args: argparse.Namespace, overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` with the keys of ``--num-envs`` and ``--seed``; a key also given by
    ``--set`` is refused (one of the two values would be dropped)."""
    out = dict(overrides)
    for flag, key in (("--num-envs", "num_envs"), ("--seed", "seed")):
        value = getattr(args, key, None)
        if value is None:
            continue
        if key in out:
            raise ValueError(
                f"{flag} {value} and --set {key}={out[key]!r} both set {key}; give it once"
            )
        out[key] = value
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def config_data(args: argparse.Namespace) -> tuple[dict[str, Any], tuple[Any, Any], str | None]:
    """The config keys of ``--tuned`` / ``--config`` / ``--env`` / ``--set`` (later ones win),
    the ``stop`` block (of the file or tuned config, changed by ``--set stop.KEY=V``) and the
    ``algo`` the file or tuned config names (None: not named)."""
    from rlblocks.train.tuned import NATIVE_ALGOS, load_tuned, split_stop

    if args.tuned and (args.config or args.env):
        raise ValueError(
            "--tuned NAME brings its own env and config: use --set to change "
            "keys of it, or --config / --env without --tuned"
        )
    if args.tuned:
        tuned = load_tuned(args.tuned)
        stop = {"episode_return_mean": tuned.stop_reward, "timesteps_total": tuned.stop_timesteps}
        base = {
            **tuned.config,
            "algo": tuned.algo,
            "stop": {k: v for k, v in stop.items() if v is not None},
        }
    else:
        base = load_config_file(args.config) if args.config else {}
    overrides = _flag_overrides(args, parse_overrides(args.set or []))
    merged = _merge(base, overrides)
    for key, example in _MAPPING_KEYS.items():
        value = merged.get(key)
        if value is not None and not isinstance(value, dict):
            where = "--set" if key in overrides else "the config's"
            raise ValueError(
                f"{where} {key}={value!r}: {key} must be a mapping of keys "
                f"(e.g. --set {example}), got {type(value).__name__}"
            )
    algo = merged.get("algo")
    if algo is not None and (not isinstance(algo, str) or algo.upper() not in NATIVE_ALGOS):
        raise ValueError(f"algo must be one of {NATIVE_ALGOS}, got {algo!r}")
    data, reward, steps = split_stop(merged)
    if args.env:
        data["env"] = args.env
    if not data.get("env"):
        raise ValueError(
            "give an environment: --env ENV, --tuned NAME (`rlblocks tuned` "
            "lists them) or 'env' in the --config file"
        )
    if not args.tuned and not args.config:
        _hint_tuned(str(data["env"]), data.get("model") or {})
    return data, (reward, steps), None if algo is None else algo.upper()


def _hint_tuned(env: str, model: dict[str, Any]) -> None:
    """``use_lstm`` / ``use_attention`` alone get RLlib's defaults, which learn slowly: one
    line names the tuned config for that env and memory, if there is one."""
    from rlblocks.train.tuned import tuned_for

    for wrapper in ("use_lstm", "use_attention"):
        if model.get(wrapper) and set(model) <= {"use_lstm", "use_attention"}:
            names = tuned_for(env, wrapper)
            if names:
                print(
                    f"rlblocks train: hint: {wrapper} alone uses RLlib's defaults; the tuned "
                    f"config for {env} is `rlblocks train --tuned {names[0]}`",
                    file=sys.stderr,
                    flush=True,
                )
