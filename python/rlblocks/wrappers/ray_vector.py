"""``RayVectorEnv``: a gymnasium vector env whose sub-envs live in Ray actors.

The native trainer's ``vector_mode="ray"``: the ``N`` envs are split into chunks, one chunk
per actor; each actor steps its chunk as a same-step-autoreset ``SyncVectorEnv`` and sends
back batched arrays, so an expensive env can be sampled across a cluster while the learner
stays in this process. Env ``i`` gets seed ``seed + i`` as in ``SyncVectorEnv``, so the same
seed gives the same trajectories as ``vector_mode="sync"``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space

# Ray (and RLlib) come through rlblocks.rllib._ray in the driver's RayVectorEnv only: the actors
# import this module to build _EnvChunk without them
try:
    if importlib.util.find_spec("ray") is None:
        raise ModuleNotFoundError("No module named 'ray'", name="ray")
except ImportError as e:  # tests/test_ray_extra_missing.py
    raise ImportError(f'RayVectorEnv needs Ray: pip install "rlblocks[ray]" ({e})') from e

__all__ = ["RayVectorEnv"]


class _EnvChunk:
    """One actor's envs: a same-step-autoreset SyncVectorEnv (runs inside the actor)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        self.venv = SyncVectorEnv(list(env_fns), autoreset_mode=AutoresetMode.SAME_STEP)

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return self.venv.single_observation_space, self.venv.single_action_space

    def reset(self, seed: Any, options: Any) -> tuple[Any, dict[str, Any]]:
        return self.venv.reset(seed=seed, options=options)

    def step(self, actions: Any) -> tuple[Any, ...]:
        return self.venv.step(actions)

    def close(self) -> None:
        self.venv.close()


def _concat(space: gym.Space, parts: list[Any]) -> Any:
    """Joins batched values of ``space`` along the batch axis (nested Dict/Tuple too)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _concat(s, [p[k] for p in parts]) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_concat(s, [p[i] for p in parts]) for i, s in enumerate(space.spaces))
    return np.concatenate([np.asarray(p) for p in parts], axis=0)


def _split(space: gym.Space, actions: Any, bounds: list[tuple[int, int]]) -> list[Any]:
    """Slices batched actions of ``space`` into the actors' chunks."""
    if isinstance(space, gym.spaces.Dict):
        per_key = {k: _split(s, actions[k], bounds) for k, s in space.spaces.items()}
        return [{k: v[j] for k, v in per_key.items()} for j in range(len(bounds))]
    if isinstance(space, gym.spaces.Tuple):
        per = [_split(s, actions[i], bounds) for i, s in enumerate(space.spaces)]
        return [tuple(p[j] for p in per) for j in range(len(bounds))]
    arr = np.asarray(actions)
    return [arr[a:b] for a, b in bounds]


def _merge_infos(infos: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """Joins gymnasium vector infos (arrays plus ``_key`` masks) of consecutive chunks."""
    keys: list[str] = []
    for info in infos:
        keys.extend(k for k in info if k not in keys)
    merged: dict[str, Any] = {}
    for key in keys:
        sample = next(info[key] for info in infos if key in info)
        if isinstance(sample, dict):
            merged[key] = _merge_infos([info.get(key, {}) for info in infos], sizes)
            continue
        sample = np.asarray(sample)
        parts = []
        for info, n in zip(infos, sizes, strict=True):
            if key in info:
                parts.append(np.asarray(info[key]))
            elif sample.dtype == object:
                parts.append(np.full(n, None, dtype=object))
            else:
                parts.append(np.zeros((n, *sample.shape[1:]), dtype=sample.dtype))
        merged[key] = np.concatenate(parts, axis=0)
    return merged


class RayVectorEnv(VectorEnv):
    """``N`` envs in Ray actors (same-step autoreset, like the trainer's sync vector envs).

    Args:
        env_fns: One function per env building it (sent to the actors: must pickle).
        num_actors: Actors to spread the envs over (default: as many as the Ray cluster has
            CPUs, at most ``N``).
        num_cpus_per_actor: CPUs each actor reserves.

    Raises:
        ValueError: No env functions, or a bad actor count.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_actors: int | None = None,
        num_cpus_per_actor: float = 1.0,
    ) -> None:
        self._actors: list[Any] = []
        from rlblocks.rllib._ray import init_ray, ray

        self._ray = ray
        n = len(env_fns)
        if n < 1:
            raise ValueError("RayVectorEnv needs at least one env function")
        init_ray(None)  # RAY_ADDRESS's cluster, or a local Ray at the driver's priority
        if num_actors is None:
            cpus = int(ray.cluster_resources().get("CPU", 1) // max(num_cpus_per_actor, 1e-9))
            num_actors = max(1, min(n, cpus))
        if isinstance(num_actors, bool) or not 1 <= int(num_actors) <= n:
            raise ValueError(f"RayVectorEnv: num_actors must be in 1..{n}, got {num_actors}")
        chunks = np.array_split(np.arange(n), int(num_actors))
        self._bounds = [(int(c[0]), int(c[-1]) + 1) for c in chunks]
        self._sizes = [b - a for a, b in self._bounds]
        remote = ray.remote(num_cpus=num_cpus_per_actor)(_EnvChunk)
        self._actors = [remote.remote([env_fns[i] for i in range(a, b)]) for a, b in self._bounds]
        obs_space, act_space = ray.get(self._actors[0].spaces.remote())
        self.num_envs = n
        self.single_observation_space = obs_space
        self.single_action_space = act_space
        self.observation_space = batch_space(obs_space, n)
        self.action_space = batch_space(act_space, n)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.closed = False

    @property
    def num_actors(self) -> int:
        """How many actors hold the envs."""
        return len(self._actors)

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Resets every env (env ``i`` gets ``seed + i``, or ``seed[i]`` for a list)."""
        if seed is None or isinstance(seed, (int, np.integer)):
            seeds: list[Any] = [None if seed is None else int(seed) + a for a, _ in self._bounds]
        else:
            if len(seed) != self.num_envs:
                raise ValueError(f"reset: {len(seed)} seeds for {self.num_envs} envs")
            seeds = [list(seed[a:b]) for a, b in self._bounds]
        results = self._ray.get(
            [actor.reset.remote(s, options) for actor, s in zip(self._actors, seeds, strict=True)]
        )
        obs = _concat(self.single_observation_space, [r[0] for r in results])
        return obs, _merge_infos([r[1] for r in results], self._sizes)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Steps every env with its action (the batched action structure)."""
        parts = _split(self.single_action_space, actions, self._bounds)
        results = self._ray.get(
            [actor.step.remote(p) for actor, p in zip(self._actors, parts, strict=True)]
        )
        obs = _concat(self.single_observation_space, [r[0] for r in results])
        rewards = np.concatenate([np.asarray(r[1], np.float64) for r in results])
        terminated = np.concatenate([np.asarray(r[2], bool) for r in results])
        truncated = np.concatenate([np.asarray(r[3], bool) for r in results])
        return (
            obs,
            rewards,
            terminated,
            truncated,
            _merge_infos([r[4] for r in results], self._sizes),
        )

    def close_extras(self, **kwargs: Any) -> None:
        """Closes the envs and ends the actors."""
        for actor in self._actors:
            try:
                self._ray.get(actor.close.remote())
            except Exception:  # an actor that already died has nothing left to close
                pass
            self._ray.kill(actor)
        self._actors = []
