"""Building the trainer's envs from its config: ids, creators, vector envs, evaluation envs.

A config's ``env`` is a gymnasium id (``"CartPole-v1"``, ``"module:EnvId"``) or an
``env_creator(env_config)``; :func:`check_env` explains a bad one. :func:`vector_env_from_config`
builds the vector env the trainer steps (``vector_mode``: sync/async with same-step autoreset,
the env's native vector env, Ray actors, or the batched DeepMind pipeline of
:func:`rlblocks.wrappers.vector.make_vector_env` for Atari ids), :func:`evaluation_env` the
single env evaluation runs on, and :func:`config_with_env` the config of an env instance or
vector env handed to the trainer.

Examples:
    >>> from rlblocks.train.trainer_config import PPOConfig
    >>> venv = vector_env_from_config(PPOConfig(env="CartPole-v1", num_envs=2))
    >>> venv.num_envs, venv.single_action_space
    (2, Discrete(2))
    >>> venv.close()
"""

from __future__ import annotations

import copy
import difflib
import functools
import importlib
import pickle
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

from rlblocks.mask_keys import mask_form, mask_form_space
from rlblocks.train.env_ids import (
    adapt_old_api,
    family_module,
    import_registering_module,
    is_old_api_env,
    missing_package_hint,
)
from rlblocks.train.trainer_config import C, TrainerConfig
from rlblocks.wrappers.env_errors import raised_at
from rlblocks.wrappers.workers import workers_ignore_sigint

__all__ = [
    "EnvInstance",
    "EnvSnapshot",
    "SingleEnvView",
    "check_env",
    "config_with_env",
    "deepmind_atari",
    "describe_error",
    "env_spec",
    "evaluation_env",
    "evaluation_seed",
    "env_callable",
    "make_env_creator",
    "raw_env_creator",
    "registered_id",
    "vector_env_from_config",
]


def registered_id(env_id: str) -> str:
    """Imports what registers ``env_id`` and returns its key in gymnasium's registry.

    ``"module:EnvId"`` (gymnasium's own form) imports ``module`` first, then looks up
    ``EnvId``; the bundled ``rlblocks/...`` envs and ALE's ``ALE/...`` ids are registered on
    first use (also inside vector-env worker processes), and an id gymnasium does not know
    yet (``MiniGrid-DoorKey-5x5-v0``) imports the installed package that registers it
    (:func:`rlblocks.train.env_ids.import_registering_module`).

    Raises:
        ValueError: The module does not import (its error in one line).

    Examples:
        >>> registered_id("rlblocks.envs:rlblocks/RepeatAfterMe-v0")
        'rlblocks/RepeatAfterMe-v0'
    """
    module, sep, name = env_id.partition(":")
    if sep:
        if not module or not name:
            raise ValueError(
                f"env {env_id!r}: expected 'module:EnvId', e.g. 'my_pkg.envs:MyEnv-v0'"
            )
        try:
            importlib.import_module(module)
        except Exception as err:  # the user's module may fail in any way while importing
            raise ValueError(
                f"env {env_id!r}: module {module!r} could not be imported "
                f"({type(err).__name__}: {err})"
            ) from None
        env_id = name
    if env_id.startswith("rlblocks/"):
        import rlblocks.envs  # noqa: F401 - registers on import
    elif env_id.startswith("ALE/"):
        try:
            import ale_py
        except ImportError:
            return env_id  # check_env then explains that the package is needed
        gym.register_envs(ale_py)
    elif not sep and env_id not in gym.registry:
        import_registering_module(env_id)  # MiniGrid-*, highway-*, ... and entry points
    return env_id


def env_callable(env: Any) -> Callable[..., Any] | None:
    """The factory a ``"module:callable"`` env names (None for a registered id or anything
    else): ``module`` is imported and ``callable`` is one of its attributes, e.g.
    ``"mpe2.simple_spread_v3:parallel_env"``. It is called with the config's ``env_config``
    as keyword arguments.

    Examples:
        >>> env_callable("gymnasium.envs.classic_control:CartPoleEnv").__name__
        'CartPoleEnv'
        >>> env_callable("CartPole-v1") is None
        True
    """
    if not isinstance(env, str) or ":" not in env:
        return None
    key = registered_id(env)
    if key in gym.registry:
        return None
    module, _, name = env.partition(":")
    found = getattr(importlib.import_module(module), name, None)
    return found if callable(found) else None


def check_env(env: Any) -> None:
    """Raises a clear ValueError for an env that is neither a registered id nor a callable.

    Examples:
        >>> check_env("CartPol-v1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: unknown gymnasium environment 'CartPol-v1'; did you mean 'CartPole-v1'...
    """
    if env is None:
        raise ValueError("config.env is not set: give a gymnasium id or an env_creator callable")
    if callable(env):
        return
    if not isinstance(env, str):
        raise ValueError(f"env must be a gymnasium id or a callable, got {env!r}")
    key = registered_id(env)
    if key in gym.registry or env_callable(env) is not None:
        return
    close = difflib.get_close_matches(key, list(gym.registry), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    where = missing_package_hint(key) or _not_registered(env, key)
    raise ValueError(f"unknown gymnasium environment {key!r}{where}{hint}")


def _not_registered(env: str, key: str) -> str:
    """Why ``key`` (of the config's ``env``) is not registered, where the package is there."""
    family = family_module(key)
    if key != env:
        return f" (importing {env.partition(':')[0]!r} did not register it)"
    if family is not None and family[0] != "ale_py":
        return f" (importing {family[0]!r} did not register it)"
    if env.startswith("ALE/"):
        return ' (ALE ids need the atari extra: pip install "rlblocks[atari]")'
    if "/" in env:
        return (
            f" (ids in the {env.split('/')[0]!r} namespace need their package "
            "installed and imported, e.g. ale-py for 'ALE/...'; for your own package "
            "write 'module:EnvId')"
        )
    return ""


def env_spec(env: Any) -> gym.envs.registration.EnvSpec | None:
    """The registry entry of a gymnasium id (``module:EnvId`` included); None for a callable
    (``module:callable`` included).

    Examples:
        >>> env_spec("CartPole-v1").reward_threshold
        475.0
    """
    if not isinstance(env, str) or env_callable(env) is not None:
        return None
    check_env(env)
    return gym.registry[registered_id(env)]


def describe_error(err: BaseException) -> str:
    """``"KeyError: 'b'"``: an exception's type and message on one line."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def raw_env_creator(config: TrainerConfig, render_mode: str | None = None) -> Callable[[], Any]:
    """A no-argument function building one env of ``config`` as its maker returns it (a
    gymnasium env, or a multi-agent env: :mod:`rlblocks.multiagent`).

    The function raises ValueError, naming the env and its ``env_config``, for anything the
    env's constructor raises (a bad keyword, a missing optional package, ...).
    """
    check_env(config.env)
    env, env_config = config.env, dict(config.env_config)
    factory = env_callable(env)

    def create() -> Any:
        try:
            if factory is not None:
                kwargs = dict(env_config)
                if render_mode is not None:
                    kwargs["render_mode"] = render_mode
                return factory(**kwargs)
            if isinstance(env, str):
                kwargs = dict(env_config)
                if render_mode is not None:
                    kwargs["render_mode"] = render_mode
                return gym.make(registered_id(env), **kwargs)
            assert env is not None
            return env(env_config)
        except Exception as err:  # the user's constructor may fail in any way
            frame = raised_at(err)
            at = f" at {frame}" if frame else ""
            raise ValueError(
                f"env {config.env_name!r} could not be made with env_config "
                f"{env_config}{at}: {describe_error(err)}"
            ) from err

    return create


def make_env_creator(
    config: TrainerConfig, render_mode: str | None = None
) -> Callable[[], gym.Env]:
    """A no-argument function building one gymnasium env of ``config`` (for vector envs).

    The function raises ValueError, naming the env and its ``env_config``, for anything the
    env's constructor raises, and for a maker that returns no ``gymnasium.Env`` (a
    multi-agent env names the trainer that takes it).
    """
    raw = raw_env_creator(config, render_mode)

    def create() -> gym.Env:
        made = raw()
        if not isinstance(made, gym.Env) or is_old_api_env(made):
            from rlblocks.multiagent.envs import is_multiagent_env

            multiagent = is_multiagent_env(made)
            if not multiagent and is_old_api_env(made):
                return adapt_old_api(made, str(config.env_name))  # shimmy, or its hint
            hint = (
                "; it is a multi-agent env: train it with MultiAgentPPOTrainer (rlblocks "
                "train picks it by itself)"
                if multiagent
                else ""
            )
            raise ValueError(
                f"env_creator {config.env_name} must return a gymnasium.Env, got "
                f"{type(made).__name__}{hint}"
            )
        space = made.observation_space
        if mask_form_space(space) is not space:  # PettingZoo's form of the action mask
            return gym.wrappers.TransformObservation(made, mask_form, mask_form_space(space))
        return made

    return create


def _returning(env: gym.Env) -> Callable[[], gym.Env]:
    def get() -> gym.Env:
        return env

    return get


class EnvSnapshot(gym.Wrapper):
    """A pass-through wrapper around each sub-env of an async vector env, so that the
    trainer can fetch a pickled copy of the env from its worker process
    (``venv.call("rlblocks_snapshot")``) for checkpoints that resume exactly."""

    def rlblocks_snapshot(self) -> bytes | None:
        """The pickled inner env, or None if it cannot be pickled."""
        try:
            return pickle.dumps(self.env)
        except Exception:  # any env attribute may refuse pickling (sockets, emulators, ...)
            return None


def _snapshotting(make: Callable[[], gym.Env]) -> gym.Env:
    return EnvSnapshot(make())


def vector_env_from_config(
    config: TrainerConfig, num_envs: int | None = None, envs: list[gym.Env] | None = None
) -> VectorEnv:
    """The vector env of a config (``vector_mode``: sync/async with same-step autoreset, or
    the env's native vector env; Atari ids with ``preprocessor_pref="deepmind"``: the
    batched DeepMind pipeline, next-step autoreset).

    Args:
        config: The PPO config.
        num_envs: Number of envs (default ``config.num_envs``).
        envs: Sub-envs restored from a checkpoint (sync: used as they are; async: a copy
            of each goes to its worker process).
    """
    workers = getattr(config, "num_env_workers", 0)  # a PPO key ("auto": none here)
    if workers and workers != "auto":
        raise ValueError(
            f"num_env_workers={workers}: env worker processes step the copies "
            f"of a multi-agent env; env {config.env_name!r} is single-agent: use "
            "vector_mode='async' (one subprocess per env) or num_env_workers=0"
        )
    with workers_ignore_sigint():  # a Ctrl-C is the trainer's to handle (it saves, then closes)
        return _vector_env(config, config.num_envs if num_envs is None else int(num_envs), envs)


def _vector_env(config: TrainerConfig, n: int, envs: list[gym.Env] | None) -> VectorEnv:
    if envs is not None:
        if config.vector_mode == "async":
            copies = [functools.partial(pickle.loads, pickle.dumps(e)) for e in envs]
            return AsyncVectorEnv(
                [functools.partial(_snapshotting, c) for c in copies],
                autoreset_mode=AutoresetMode.SAME_STEP,
            )
        return SyncVectorEnv([_returning(e) for e in envs], autoreset_mode=AutoresetMode.SAME_STEP)
    if deepmind_atari(config):
        from rlblocks.wrappers.vector import make_vector_env

        mode = "atari" if config.vector_mode == "native" else config.vector_mode
        return make_vector_env(
            registered_id(str(config.env)),
            n,
            config.model,
            "deepmind",
            vectorization_mode=mode,
            **config.env_config,
        )
    if config.vector_mode == "native":
        return _native_vector_env(config, n)
    fns = [make_env_creator(config) for _ in range(n)]
    if config.vector_mode == "ray":
        try:
            from rlblocks.wrappers.ray_vector import RayVectorEnv
        except ImportError as err:
            raise ValueError(f"vector_mode='ray': {err}") from None
        return RayVectorEnv(fns)
    if config.vector_mode == "async":
        return AsyncVectorEnv(
            [functools.partial(_snapshotting, fn) for fn in fns],
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
    return SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)


def deepmind_atari(config: TrainerConfig) -> bool:
    """Whether the config's env is an Atari id that gets the DeepMind pipeline."""
    return (
        config.preprocessor_pref == "deepmind"
        and isinstance(config.env, str)
        and config.env.startswith(("ALE/", "ale_py:"))
    )


def _native_vector_env(config: TrainerConfig, n: int) -> VectorEnv:
    check_env(config.env)
    env, env_config = config.env, dict(config.env_config)
    if isinstance(env, str):
        spec = env_spec(env)
        assert spec is not None
        if spec.vector_entry_point is None:
            raise ValueError(
                f"vector_mode='native': {env!r} registers no vector_entry_point; "
                "use vector_mode 'sync' or 'async'"
            )
        venv = gym.make_vec(
            spec.id, num_envs=n, vectorization_mode="vector_entry_point", **env_config
        )
    else:
        assert env is not None  # check_env
        venv = env({**env_config, "num_envs": n})
    if not isinstance(venv, VectorEnv) or venv.num_envs != n:
        raise ValueError(
            f"vector_mode='native': {config.env_name} must give a gymnasium VectorEnv of "
            f"num_envs={n}, got {type(venv).__name__} "
            f"(num_envs={getattr(venv, 'num_envs', None)})"
        )
    return venv


class SingleEnvView(gym.Env):
    """A one-env vector env seen as a plain env (evaluation of native vector envs).

    Each ``reset`` resets the vector env, so its autoreset never shows.
    """

    def __init__(self, venv: VectorEnv) -> None:
        if venv.num_envs != 1:
            raise ValueError(f"SingleEnvView needs num_envs=1, got {venv.num_envs}")
        self.venv = venv
        self.observation_space = venv.single_observation_space
        self.action_space = venv.single_action_space
        self._actions: Any = gym.vector.utils.create_empty_array(self.action_space, 1)

    def _first(self, batched: Any) -> Any:
        return next(iter(gym.vector.utils.iterate(self.venv.observation_space, batched)))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.venv.reset(seed=seed, options=options)
        return self._first(obs), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        actions = gym.vector.utils.concatenate(self.action_space, [action], self._actions)
        obs, reward, terminated, truncated, info = self.venv.step(actions)
        return (
            self._first(obs),
            float(np.asarray(reward)[0]),
            bool(np.asarray(terminated)[0]),
            bool(np.asarray(truncated)[0]),
            info,
        )

    def close(self) -> None:
        self.venv.close()


def evaluation_seed(run_seed: int, seed: int | None = None) -> int:
    """The seed of an evaluation's first episode: ``seed``, or by default the run's seed +
    1,000,003 (episodes no training env was reset with).

    Examples:
        >>> evaluation_seed(3), evaluation_seed(3, 7)
        (1000006, 7)
    """
    return run_seed + 1_000_003 if seed is None else int(seed)


def evaluation_env(config: TrainerConfig) -> gym.Env:
    """A fresh single env of ``config``, wrapped as the trainer's own envs are (native vector
    envs and the DeepMind Atari pipeline: a one-env vector env seen as a plain env).

    Examples:
        >>> from rlblocks.train.trainer_config import PPOConfig
        >>> evaluation_env(PPOConfig(env="CartPole-v1")).spec.id
        'CartPole-v1'
    """
    if config.vector_mode == "native" or deepmind_atari(config):
        return SingleEnvView(vector_env_from_config(config, num_envs=1))
    return make_env_creator(config)()


class EnvInstance:
    """The ``env`` of a config made from an env instance or a vector env given to the
    trainer: called, it returns a deep copy of one env (evaluation, restoring).

    Args:
        env: A ``gymnasium.Env``, or None when the given vector env has no copyable sub-env
            (calling it then raises ValueError).
        name: The name runs and logs use.
    """

    def __init__(self, env: gym.Env | None, name: str) -> None:
        self.env = env
        self.__name__ = name

    def __call__(self, env_config: dict[str, Any]) -> gym.Env:
        if self.env is None:
            raise ValueError(
                f"{self.__name__}: this vector env has no single env to copy for "
                "evaluation; give PPOTrainer an env id or creator instead"
            )
        return copy.deepcopy(self.env)


def _env_name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return str(spec.id)
    return type(getattr(env, "unwrapped", env)).__name__


def config_with_env(config: C, env: Any) -> tuple[C, VectorEnv | None]:
    """``(config, vector env or None)`` for an env handed to the trainer: an id or
    ``env_creator(env_config)`` replaces the config's ``env``; a ``gymnasium.Env`` becomes a
    one-env sync vector env and a ``VectorEnv`` is used as it is, each with an
    :class:`EnvInstance` as the config's ``env`` and ``num_envs`` set to fit.

    Raises:
        ValueError: ``env`` is none of these.

    Examples:
        >>> from rlblocks.train.trainer_config import PPOConfig
        >>> config, venv = config_with_env(PPOConfig(), gym.make("CartPole-v1"))
        >>> config.env_name, config.num_envs, venv.num_envs
        ('CartPole-v1', 1, 1)
    """
    if isinstance(env, VectorEnv):
        subs = getattr(env, "envs", None)
        first = subs[0] if subs else None
        source = EnvInstance(first, _env_name(first if first is not None else env))
        return config.replace(env=source, num_envs=int(env.num_envs)), env
    if isinstance(env, gym.Env):
        source = EnvInstance(env, _env_name(env))
        venv = SyncVectorEnv([lambda: env], autoreset_mode=AutoresetMode.SAME_STEP)
        return config.replace(env=source, num_envs=1), venv
    if isinstance(env, str) or callable(env):
        return config.replace(env=env), None
    raise ValueError(
        f"env must be an id, an env_creator(env_config), a gymnasium.Env or a "
        f"gymnasium VectorEnv, got {type(env).__name__}"
    )
