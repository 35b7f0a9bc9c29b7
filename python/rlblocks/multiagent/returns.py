"""What a multi-agent env's ``reset`` / ``step`` returned, checked before the trainer reads it:
every malformed part is one line naming the env (and its copy), the agent and the value, in
the words :mod:`rlblocks.wrappers.env_errors` uses for single-agent envs.

Examples:
    >>> checked_step("Tag-v0", 0, ({}, {"a": None}, {"a": False}, {"a": False}, {}),
    ...              ["a"], ("a", "b"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: env 'Tag-v0' (copy 0) returned a reward for agent 'a' that is not a number: None
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["checked_reset", "checked_step"]

_STEP_PARTS = ("observations", "rewards", "terminations", "truncations", "infos")


def _short(value: Any, limit: int = 120) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(name: str, copy: int) -> str:
    return f"env {name!r} (copy {copy})"


def _parts(name: str, copy: int, method: str, out: Any, parts: Sequence[str]) -> tuple[Any, ...]:
    """``out`` as a tuple of one dict per part, or a ValueError naming what is not."""
    if not isinstance(out, tuple) or len(out) != len(parts):
        raise ValueError(
            f"{_where(name, copy)} returned from {method} {_short(out)}; expected a tuple "
            f"({', '.join(parts)}) of dicts keyed by agent"
        )
    for part, value in zip(parts, out, strict=True):
        if not isinstance(value, Mapping):
            raise ValueError(
                f"{_where(name, copy)} returned {part} {_short(value)} from {method}; "
                f"expected a dict keyed by agent"
            )
    return out


def checked_reset(name: str, copy: int, out: Any, live: Sequence[Any] | None) -> dict[Any, Any]:
    """The observations of a reset's ``(observations, infos)`` ``out``; refuses another
    shape, and a reset that starts no agent (``live``: the env's ``agents`` after it, or
    None if it lists none), on which the episode could never step."""
    obs, _ = _parts(name, copy, "reset", out, ("observations", "infos"))
    if not obs or (live is not None and not list(live)):
        shown = f"observations {_short(dict(obs))}"
        if live is not None:
            shown += f", agents {_short(list(live))}"
        raise ValueError(
            f"{_where(name, copy)} returned no agents from reset ({shown}); a multi-agent "
            "env must start each episode with at least one live agent"
        )
    return dict(obs)


def _reward(name: str, copy: int, agent: Any, value: Any) -> float:
    real = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        real = True
    if not real:
        raise ValueError(
            f"{_where(name, copy)} returned a reward for agent {agent!r} that is not a "
            f"number: {_short(value)}"
        )
    try:
        r = float(value)
    except OverflowError:  # an int beyond float's range
        r = math.inf
    if not math.isfinite(r):
        raise ValueError(
            f"{_where(name, copy)} returned a non-finite reward for agent {agent!r}: {value}"
        )
    return r


def checked_step(
    name: str, copy: int, out: Any, live: Sequence[Any], known: Sequence[Any]
) -> tuple[dict[Any, Any], dict[Any, float], dict[Any, bool], dict[Any, bool], dict[Any, Any]]:
    """A step's ``(observations, rewards, terminations, truncations, infos)`` ``out`` with
    each live agent's reward a finite float and its flags bools. Refuses another shape, a
    part that is not a dict, an agent outside ``known`` (the possible agents), a live agent
    (of ``live``, those that acted) missing from the rewards or flags, a reward that is not
    a real number or not finite, a flag that is not a bool, and a nonzero reward for an
    agent that did not act."""
    obs, rew, terms, truncs, infos = _parts(name, copy, "step", out, _STEP_PARTS)
    agents = set(known)
    for part, values in zip(_STEP_PARTS[:4], (obs, rew, terms, truncs), strict=True):
        for a in values:
            if a not in agents:
                raise ValueError(
                    f"{_where(name, copy)} returned {part} for agent {a!r}, which is not one "
                    f"of its possible_agents {list(known)}"
                )
        if part == "observations":
            continue
        for a in live:
            if a not in values:
                raise ValueError(
                    f"{_where(name, copy)} returned no {part} entry for live agent {a!r}: "
                    f"its {part} are {_short(dict(values))}"
                )
    rewards = {a: _reward(name, copy, a, rew[a]) for a in live}
    acted = set(live)
    for a, value in rew.items():
        if a not in acted and _reward(name, copy, a, value) != 0.0:
            raise ValueError(
                f"{_where(name, copy)} returned a reward for agent {a!r}, which did not act "
                f"this step: {_short(value)}"
            )
    flags: list[dict[Any, bool]] = [{}, {}]
    for i, (part, values) in enumerate((("termination", terms), ("truncation", truncs))):
        for a in live:
            flag = values[a]
            if not isinstance(flag, (bool, np.bool_)):
                raise ValueError(
                    f"{_where(name, copy)} returned a {part} flag for agent {a!r} that is not "
                    f"True or False: {_short(flag)}"
                )
            flags[i][a] = bool(flag)
    return dict(obs), rewards, flags[0], flags[1], dict(infos)
