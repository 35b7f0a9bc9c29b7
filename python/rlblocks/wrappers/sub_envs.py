"""Stepping the sub-envs of gymnasium's ``SyncVectorEnv`` directly: :class:`SubEnvSteps`.

``SyncVectorEnv.step`` batches every step: the observations go through ``concatenate``
into its array and are deep-copied, the infos are merged key by key. At one or a few
small envs (CartPole's step is about 10 microseconds) that costs about as much as the
envs themselves. :class:`SubEnvSteps` makes the same calls on the sub-envs in the vector
env's autoreset mode (next-step: an env that ended is reset by its next step, with reward
0; same-step: reset right after the step that ended it) and returns the observations per
env: rlblocks' C++ preprocessors batch such a list in one call. The vector env's
autoreset flags are kept, so its own ``step`` and ``reset`` carry on from here.

Examples:
    >>> import gymnasium as gym
    >>> from gymnasium.vector import AutoresetMode, SyncVectorEnv
    >>> venv = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2,
    ...                      autoreset_mode=AutoresetMode.SAME_STEP)
    >>> _ = venv.reset(seed=0)
    >>> obs, rewards, terminated, truncated, infos, finals = SubEnvSteps(venv).step([0, 1])
    >>> len(obs), rewards.tolist(), finals
    (2, [1.0, 1.0], [None, None])
"""

from __future__ import annotations

from typing import Any, TypeGuard

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import iterate

__all__ = ["SubEnvSteps"]


def _per_env(space: gym.Space, actions: Any) -> Any:
    """The batched ``actions`` env by env, as gymnasium's ``iterate(space, actions)`` gives
    them (array rows; tuples and dicts of those), without its per-call dispatch and its
    item-by-item walk over a Tuple space."""
    if isinstance(space, (Box, Discrete, MultiDiscrete, MultiBinary)) and isinstance(
        actions, np.ndarray
    ):
        return iter(actions)
    if type(space) is Tuple and isinstance(actions, tuple):
        parts = [_per_env(s, a) for s, a in zip(space.spaces, actions, strict=True)]
        return zip(*parts, strict=True)
    if type(space) is Dict and isinstance(actions, dict):
        keys = list(space.spaces)
        rows = zip(*(_per_env(space.spaces[k], actions[k]) for k in keys), strict=True)
        return (dict(zip(keys, row, strict=True)) for row in rows)
    return iterate(space, actions)


class SubEnvSteps:
    """Steps ``vec``'s sub-envs as its ``step`` does (see the module docstring).

    Args:
        vec: A ``SyncVectorEnv`` in next-step or same-step autoreset (:meth:`supports`).
    """

    def __init__(self, vec: SyncVectorEnv) -> None:
        if not self.supports(vec):
            raise ValueError(
                f"SubEnvSteps steps a SyncVectorEnv in NEXT_STEP or SAME_STEP autoreset, "
                f"got {vec!r}"
            )
        self.vec = vec
        self.next_step = vec.autoreset_mode == AutoresetMode.NEXT_STEP

    @staticmethod
    def supports(venv: Any) -> TypeGuard[SyncVectorEnv]:
        """Whether ``venv`` is a ``SyncVectorEnv`` itself (not a subclass or a wrapper) in
        next-step or same-step autoreset."""
        return type(venv) is SyncVectorEnv and venv.autoreset_mode in (
            AutoresetMode.NEXT_STEP,
            AutoresetMode.SAME_STEP,
        )

    def step(
        self, actions: Any
    ) -> tuple[list[Any], np.ndarray, np.ndarray, np.ndarray, list[dict], list[Any]]:
        """One step of every sub-env.

        Returns:
            ``(observations, rewards, terminated, truncated, infos, finals)``: the
            observations and infos per env; ``finals[i]`` is env ``i``'s final
            observation where same-step autoreset just reset it (its observation is then
            the new episode's first, its info the reset's with the ended step's info
            under ``"final_info"``), else None.
        """
        vec = self.vec
        n = vec.num_envs
        obs: list[Any] = [None] * n
        infos: list[Any] = [None] * n
        finals: list[Any] = [None] * n
        # Python lists, batched once at the end by np.fromiter (each item converted as an
        # array's item assignment converts it)
        rewards: list[Any] = [0.0] * n
        terminated: list[Any] = [False] * n
        truncated: list[Any] = [False] * n
        resets = vec._autoreset_envs.tolist() if self.next_step else [False] * n
        per_env = zip(vec.envs, _per_env(vec.action_space, actions), strict=True)
        for i, (env, action) in enumerate(per_env):
            if resets[i]:
                obs[i], infos[i] = env.reset()
                continue
            obs[i], rewards[i], terminated[i], truncated[i], infos[i] = env.step(action)
            if not self.next_step and (terminated[i] or truncated[i]):
                finals[i], last = obs[i], infos[i]
                obs[i], infos[i] = env.reset()
                infos[i] = {**infos[i], "final_info": last}  # the ended step's, as gymnasium
        term = np.fromiter(terminated, bool, n)
        trunc = np.fromiter(truncated, bool, n)
        vec._autoreset_envs = term | trunc
        return obs, np.fromiter(rewards, np.float64, n), term, trunc, infos, finals
