"""Finding the package behind an env id, and envs written for the old gym API.

A gymnasium id that no imported module has registered yet (``MiniGrid-DoorKey-5x5-v0``,
``highway-fast-v0``, ``PointMaze_UMaze-v3``) is looked up in the ``gymnasium.envs`` entry
points of the installed packages and in :data:`FAMILIES`, a small table of the known id
families and the module that registers them; that module is imported and the id looked up
again (:func:`import_registering_module`). Where the package is not installed,
:func:`missing_package_hint` names the ``pip install`` and the ``module:EnvId`` form.
:func:`importable_id` is the ``module:EnvId`` form other processes (Ray's workers) can
``gym.make`` without this lookup.

An env object that is no ``gymnasium.Env`` but has ``reset`` and ``step`` (an old gym API
env: a ``gym.Env`` of the ``gym`` package, or a class like ``crafter.Env`` whose ``step``
returns 4 values), or a ``gymnasium.Env`` whose ``reset`` takes no ``seed``, is wrapped
through shimmy's compatibility env when shimmy is installed, else refused with the hint
(:func:`adapt_old_api`); ``gym`` itself is never imported to tell.

Examples:
    >>> family_module("MiniGrid-DoorKey-5x5-v0"), family_module("CartPole-v1")
    (('minigrid', 'minigrid'), None)
    >>> importable_id("rlblocks/RepeatAfterMe-v0")
    'rlblocks.envs:rlblocks/RepeatAfterMe-v0'
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import re
from typing import Any

import gymnasium as gym

__all__ = [
    "FAMILIES",
    "adapt_old_api",
    "family_module",
    "import_registering_module",
    "importable_id",
    "is_old_api_env",
    "missing_package_hint",
]

#: ``(id pattern, module that registers the ids, pip package)`` of the known families.
FAMILIES: tuple[tuple[str, str, str], ...] = (
    (r"(MiniGrid|BabyAI)-", "minigrid", "minigrid"),
    (
        r"(highway|parking|intersection|racetrack|roundabout|merge|exit|u-turn|two-way|lane-keeping)",
        "highway_env",
        '"rlblocks[highway]"',  # the extra pins the highway-env its tuned config was measured on
    ),
    (
        r"(PointMaze|AntMaze|Fetch|HandManipulate|HandReach|Adroit|FrankaKitchen)",
        "gymnasium_robotics",
        '"rlblocks[robotics]"',  # the extra pins a MuJoCo that its Fetch envs reset with
    ),
    (r"ALE/", "ale_py", "ale-py"),
)

#: PettingZoo's MPE ids (``simple_spread_v3``): a ``module:callable`` of mpe2, not an id.
_MPE = re.compile(r"simple(_[a-z]+)*_v\d+$")


def family_module(env_id: str) -> tuple[str, str] | None:
    """``(module, pip package)`` of the known family ``env_id`` belongs to, or None."""
    for pattern, module, package in FAMILIES:
        if re.match(pattern, env_id):
            return module, package
    return None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _import(module: str, env_id: str) -> None:
    try:
        importlib.import_module(module)
    except Exception as err:  # a third-party package may fail in any way while importing
        text = " ".join(str(err).split())
        raise ValueError(
            f"env {env_id!r}: module {module!r}, which registers it, could not be imported "
            f"({type(err).__name__}: {text})"
        ) from None


def _entry_points() -> list[Any]:
    """The installed packages' ``gymnasium.envs`` entry points (gymnasium's plugin group)."""
    try:
        return list(importlib.metadata.entry_points(group="gymnasium.envs"))
    except Exception:  # a broken distribution's metadata: no plugins to try
        return []


def _load_plugin(point: Any, env_id: str) -> None:
    """Imports an entry point's module; a ``module:function`` point's function is called
    (it registers the ids, as gymnasium's plugins did)."""
    try:
        loaded = point.load()
        if point.attr and callable(loaded):
            loaded()
    except Exception as err:  # a third-party plugin may fail in any way
        text = " ".join(str(err).split())
        raise ValueError(
            f"env {env_id!r}: the gymnasium.envs entry point {point.value!r} of an installed "
            f"package failed ({type(err).__name__}: {text})"
        ) from None


def import_registering_module(env_id: str) -> str | None:
    """Imports what registers ``env_id`` (not in gymnasium's registry yet): the module of
    its known family (:data:`FAMILIES`), else the installed packages' ``gymnasium.envs``
    entry points, until the id is registered. Returns the module that registered it, or
    None (nothing installed registers it).

    Raises:
        ValueError: The registering module is installed but fails to import.

    Examples:
        >>> import_registering_module("CartPole-v1") is None   # gymnasium knows it already
        True
    """
    if env_id in gym.registry:
        return None
    family = family_module(env_id)
    if family is not None and family[0] != "ale_py" and _installed(family[0]):
        _import(family[0], env_id)  # (ALE ids: registered_id registers ale_py's ids)
        if env_id in gym.registry:
            return family[0]
    for point in _entry_points():
        _load_plugin(point, env_id)
        if env_id in gym.registry:
            return str(point.value).partition(":")[0]
    return None


def importable_id(env_id: str) -> str:
    """``env_id`` as ``module:EnvId`` when a module has to be imported for gymnasium to know
    it (the bundled ``rlblocks/...`` envs, a known family's ids): the form a fresh process
    (a Ray worker) can pass to ``gym.make``; other ids as they are.

    Examples:
        >>> importable_id("my_pkg.envs:MyEnv-v0"), importable_id("CartPole-v1")
        ('my_pkg.envs:MyEnv-v0', 'CartPole-v1')
    """
    if ":" in env_id:
        return env_id
    if env_id.startswith("rlblocks/"):
        return f"rlblocks.envs:{env_id}"
    family = family_module(env_id)
    if family is not None and family[0] != "ale_py" and _installed(family[0]):
        return f"{family[0]}:{env_id}"
    return env_id


def missing_package_hint(env_id: str) -> str:
    """Why ``env_id`` is unknown when its package is not installed, naming the ``pip
    install`` and the ``module:EnvId`` form; "" when the id's package is not known.

    Examples:
        >>> missing_package_hint("CartPole-v1")
        ''
        >>> missing_package_hint("simple_spread_v3")
        " (simple_spread_v3 is a PettingZoo MPE env, not a gymnasium id: write \
'mpe2.simple_spread_v3:parallel_env' (pip install mpe2))"
    """
    if _MPE.match(env_id):
        return (
            f" ({env_id} is a PettingZoo MPE env, not a gymnasium id: write "
            f"'mpe2.{env_id}:parallel_env' (pip install mpe2))"
        )
    family = family_module(env_id)
    if family is None or _installed(family[0]):
        return ""
    module, package = family
    if module == "ale_py":
        return ' (ALE ids need the atari extra: pip install "rlblocks[atari]")'
    return (
        f" ({env_id} is registered by the {module} package, which is not installed: pip "
        f"install {package}, then --env {env_id} or '{module}:{env_id}')"
    )


def _from_gym_package(env: Any) -> bool:
    """Whether ``env``'s class comes from the ``gym`` package (read from the class's
    modules: ``gym`` is never imported here)."""
    return any(
        (getattr(cls, "__module__", "") or "").split(".")[0] == "gym" for cls in type(env).__mro__
    )


def is_old_api_env(env: Any) -> bool:
    """Whether ``env`` is written for the old gym API: not a ``gymnasium.Env`` but a class
    with ``reset`` and ``step`` (a ``gym.Env``, or a plain class like ``crafter.Env``), or a
    ``gymnasium.Env`` whose ``reset`` takes no ``seed`` keyword.

    Examples:
        >>> is_old_api_env(gym.make("CartPole-v1"))
        False
        >>> class Old:
        ...     def reset(self): ...
        ...     def step(self, action): ...
        >>> is_old_api_env(Old())
        True
    """
    if isinstance(env, gym.Env):
        try:
            params = inspect.signature(env.unwrapped.reset).parameters
        except (TypeError, ValueError):
            return False
        return not ("seed" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()))
    if _from_gym_package(env):
        return True
    return callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))


def adapt_old_api(env: Any, name: str) -> gym.Env:
    """An old-gym-API ``env`` (:func:`is_old_api_env`) as a gymnasium env through shimmy's
    compatibility env (``GymV26CompatibilityV0`` for a ``gym`` >= 0.26 env, else
    ``GymV21CompatibilityV0``).

    Raises:
        ValueError: shimmy is not installed (the message names ``pip install shimmy``), or
            its compatibility env refuses ``env``.
    """
    kind = type(getattr(env, "unwrapped", env)).__name__
    if not _installed("shimmy"):
        raise ValueError(
            f"env {name!r} makes a {kind}, written for the old gym API (reset returns the "
            "observation alone, step returns 4 values): pip install shimmy, which wraps it "
            "as a gymnasium env, or port it to gymnasium's API"
        )
    shimmy = importlib.import_module("shimmy")
    compat = "GymV21CompatibilityV0"
    if _from_gym_package(env):
        try:
            major, minor = (int(p) for p in importlib.metadata.version("gym").split(".")[:2])
        except (importlib.metadata.PackageNotFoundError, ValueError):
            major, minor = 0, 0
        if (major, minor) >= (0, 26):
            compat = "GymV26CompatibilityV0"
    try:
        wrapped = getattr(shimmy, compat)(env=env)
    except Exception as err:  # shimmy (or gym under it) may refuse the env in any way
        text = " ".join(str(err).split())
        raise ValueError(
            f"env {name!r}: shimmy's {compat} could not wrap its {kind} "
            f"({type(err).__name__}: {text})"
        ) from None
    if not isinstance(wrapped, gym.Env):
        raise ValueError(f"env {name!r}: shimmy's {compat} gave no gymnasium.Env")
    return wrapped
