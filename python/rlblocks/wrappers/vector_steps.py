"""The one step loop of training: :class:`VectorSteps` steps a vector env and keeps what every
trainer needs to know about each step.

Each step of a vector env, every trainer asks the same questions, answered here once:

* the env call: the vector env's ``step`` or, on a plain ``SyncVectorEnv``,
  :class:`~rlblocks.wrappers.sub_envs.SubEnvSteps` (the same calls on the sub-envs without
  gymnasium's batching); what the envs raise becomes one line naming the env
  (:func:`~rlblocks.wrappers.env_errors.call_env`), or passes as it is for a caller with its
  own recovery (RLlib's env runner restarts failed envs);
* a non-finite reward is refused, naming the sub-env;
* which rows are transitions (``valid``) and which observations start an episode
  (``starts``): with next-step autoreset an env that ended is reset by its next step, whose
  action is ignored and whose row is no transition; with same-step autoreset the returned
  observation of an env that ended starts the next episode and the final one is in
  ``finals``;
* the return and length of every episode that finished.

What differs per trainer stays with it: what is stored (PPO's rollout columns, the replay
buffer, RLlib's episode arrays), acting and bootstrapping. The multi-agent env steps its
copies itself (each through :func:`call_copy`) and hands each policy's lanes a
:class:`StepResult` that names the rows that acted and start a trajectory;
:meth:`VectorSteps.account` books those as it books a vector env's step.

Examples:
    >>> import gymnasium as gym
    >>> from gymnasium.vector import AutoresetMode, SyncVectorEnv
    >>> venv = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2,
    ...                      autoreset_mode=AutoresetMode.NEXT_STEP)
    >>> steps = VectorSteps(venv, "CartPole-v1")
    >>> _ = steps.reset(seed=0)
    >>> while not steps.returns:
    ...     step = steps.step(np.zeros(2, np.int64))
    >>> step.dones.tolist(), steps.returns, steps.lengths  # env 1 fell after 10 steps
    ([False, True], [10.0], [10])
    >>> step = steps.step(np.zeros(2, np.int64))  # env 1's reset step is no transition
    >>> step.valid.tolist(), step.starts.tolist()
    ([True, False], [False, True])
    >>> venv.close()
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from gymnasium.vector import AutoresetMode

from rlblocks.wrappers.env_errors import call_env
from rlblocks.wrappers.sub_envs import SubEnvSteps

__all__ = ["Preprocessed", "Step", "StepResult", "VectorSteps", "call_copy", "episode_success"]


class Preprocessed(NamedTuple):
    """A batch of observations already preprocessed into the policy's rows (by an env
    worker process, :mod:`rlblocks.multiagent.workers`): a runner takes ``rows`` as its
    preprocessor's output."""

    rows: np.ndarray


class StepResult(NamedTuple):
    """What a step returned: a vector env's ``step`` (the last four None, or ``finals`` from
    :class:`~rlblocks.wrappers.sub_envs.SubEnvSteps`), or one policy's lanes of a
    multi-agent env (all set)."""

    raw: Any
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    info: Any
    valid: np.ndarray | None = None  # lanes whose agent acted this step
    starts: np.ndarray | None = None  # lanes whose next observation starts a trajectory
    live: np.ndarray | None = None  # lanes holding an agent at the next observation
    finals: list[Any] | None = None  # same-step autoreset: each ended env's final observation


class Step(NamedTuple):
    """One step as :meth:`VectorSteps.account` books it.

    Attributes:
        result: The step as the env returned it (unmasked).
        rewards: float32 rewards (a copy), 0 where the row is no transition.
        terminated, truncated: The env's flags on the rows that are transitions.
        dones: ``terminated | truncated``.
        valid: Rows that are transitions; None when every row is one.
        starts: Rows whose returned observation starts an episode.
        finals: Same-step autoreset: the final observation of each env that ended (indexed
            by env; None if the env gives none).
        any_done: Whether any row ended an episode.
    """

    result: StepResult
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    dones: np.ndarray
    valid: np.ndarray | None
    starts: np.ndarray
    finals: Any
    any_done: bool


def episode_success(info: Any, e: int) -> float | None:
    """Env ``e``'s success flag at the step that ended its episode: ``info["is_success"]``
    (gymnasium-robotics) or ``info["success"]`` (PointMaze), from a list of per-env infos or
    a vector env's batched info (same-step autoreset: its ``final_info``); None when the
    env gives neither.

    Examples:
        >>> episode_success([{"is_success": 1.0}, {}], 0), episode_success([{}], 0)
        (1.0, None)
    """
    if isinstance(info, (list, tuple)):
        one: dict[str, Any] = info[e] if e < len(info) and isinstance(info[e], dict) else {}
        last = one.get("final_info")
        if isinstance(last, dict):
            one = last
        for key in ("is_success", "success"):
            if key in one:
                return float(one[key])
        return None
    if not isinstance(info, dict):
        return None
    final = info.get("final_info")
    mask = info.get("_final_info")
    if isinstance(final, dict) and mask is not None and bool(np.asarray(mask)[e]):
        info = final
    for key in ("is_success", "success"):
        if key in info:
            mask = info.get(f"_{key}")
            if mask is not None and not bool(np.asarray(mask).reshape(-1)[e]):
                continue
            return float(np.asarray(info[key]).reshape(-1)[e])
    return None


def call_copy(
    name: str, copy: int, method: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """``fn(*args, **kwargs)``, copy ``copy``'s ``method`` of a multi-agent env; what the user's env
    raises becomes one ValueError naming the env and the copy."""
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # the user's env may fail in any way
        raise ValueError(
            f"env {name!r} (copy {copy}) failed in {method}: {type(err).__name__}: {err}"
        ) from err


class VectorSteps:
    """Steps ``venv`` and books each step (module docstring).

    Args:
        venv: A vector env in next-step or same-step autoreset.
        env_name: The env's name in error messages.
        sub_envs: Step a plain ``SyncVectorEnv``'s sub-envs directly
            (:class:`~rlblocks.wrappers.sub_envs.SubEnvSteps`; the observations then come
            as a list per env).
        wrap_errors: What the envs raise becomes a ValueError naming the env; False: it
            passes as it is (a caller with its own recovery).
        check_rewards: Refuse a non-finite reward.
        next_step: The autoreset mode (None: the vector env's ``metadata``).
        needs: The end of the refusal of another autoreset mode.

    Attributes:
        resetting: Next-step autoreset: the envs whose next step is a reset step.
        returns, lengths: The episodes finished since :meth:`take_finished`.
    """

    def __init__(
        self,
        venv: Any,
        env_name: str,
        *,
        sub_envs: bool = False,
        wrap_errors: bool = True,
        check_rewards: bool = True,
        next_step: bool | None = None,
        needs: str = "use SAME_STEP or NEXT_STEP",
    ) -> None:
        if next_step is None:
            mode = venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
            if mode not in (AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP):
                raise ValueError(f"the vector env's autoreset_mode is {mode}; {needs}")
            next_step = mode == AutoresetMode.NEXT_STEP
        self.venv, self.env_name, self.next_step = venv, env_name, next_step
        self.wrap_errors, self.check_rewards = wrap_errors, check_rewards
        n = int(venv.num_envs)
        self.num_envs = n
        #: Whether the sub-envs are stepped directly (:class:`SubEnvSteps`).
        self.sub_envs = bool(sub_envs) and SubEnvSteps.supports(venv)
        self._step_fn: Callable[[Any], Any] = SubEnvSteps(venv).step if self.sub_envs else venv.step
        self.resetting = np.zeros(n, bool)
        self.ep_return = np.zeros(n, np.float64)
        self.ep_len = np.zeros(n, np.int64)
        self.returns: list[float] = []
        self.lengths: list[int] = []
        #: The success flags of the finished episodes whose env gives one (``is_success``
        #: or ``success`` in the info of their last step), since :meth:`take_successes`.
        self.successes: list[float] = []

    def _call(self, method: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self.wrap_errors:
            return fn(*args, **kwargs)
        space = self.venv.single_observation_space
        return call_env(self.env_name, space, method, fn, *args, **kwargs)

    def reset(self, seed: int | None = None) -> tuple[Any, Any]:
        """The vector env's ``reset`` (an int seeds sub-env ``i`` with ``seed + i``); every
        env starts an episode."""
        out = self._call("reset", self.venv.reset, seed=seed)
        self.resetting[:] = False
        self.ep_return[:] = 0.0
        self.ep_len[:] = 0
        return out  # type: ignore[no-any-return]

    def env_step(self, actions: Any) -> StepResult:
        """One step of the envs, as they returned it (not yet booked)."""
        if self.sub_envs:
            raw, rewards, terminated, truncated, infos, finals = self._call(
                "step", self._step_fn, actions
            )
            return StepResult(raw, rewards, terminated, truncated, infos, finals=finals)
        raw, rewards, terminated, truncated, info = self._call("step", self._step_fn, actions)
        return StepResult(raw, rewards, terminated, truncated, info)

    def step(self, actions: Any) -> Step:
        """:meth:`env_step` booked by :meth:`account`."""
        return self.account(self.env_step(actions))

    def account(self, result: StepResult) -> Step:
        """Books one step: refuses a non-finite reward, finds the rows that are transitions
        and those that start an episode, and adds each finished episode's return and length
        to :attr:`returns` / :attr:`lengths`. ``result.valid`` set (a multi-agent policy's
        lanes): those rows acted and ``result.starts`` start a trajectory."""
        rewards = np.array(result.rewards, np.float32)
        if (
            self.check_rewards
            and not math.isfinite(rewards.sum())
            and not np.isfinite(rewards).all()
        ):
            bad = int(np.flatnonzero(~np.isfinite(rewards))[0])
            raise ValueError(
                f"env {self.env_name!r} (sub-env {bad}) returned a non-finite reward: "
                f"{rewards[bad]}"
            )
        terminated = np.asarray(result.terminated, bool)
        truncated = np.asarray(result.truncated, bool)
        valid: np.ndarray | None
        if result.valid is not None:  # a policy's lanes: only the lanes whose agent acted
            valid = np.asarray(result.valid, bool)
            rewards[~valid] = 0.0
            terminated, truncated = terminated & valid, truncated & valid
            starts = np.asarray(result.starts, bool)
        elif self.next_step:
            # an env that ended last step takes its reset step now: no transition
            valid = ~self.resetting
            starts = self.resetting
            rewards[starts] = 0.0
            terminated, truncated = terminated & valid, truncated & valid
        else:
            valid = None
        dones = terminated | truncated
        if valid is None:
            starts = dones
            self.ep_len += 1
        else:
            self.ep_len += valid
            if result.valid is None:
                self.resetting = dones
        self.ep_return += rewards
        any_done = bool(dones.any())
        if any_done:
            for e in np.flatnonzero(dones):
                self.returns.append(float(self.ep_return[e]))
                self.lengths.append(int(self.ep_len[e]))
                success = episode_success(result.info, int(e))
                if success is not None:
                    self.successes.append(success)
            self.ep_return[dones] = 0.0
            self.ep_len[dones] = 0
        finals = result.finals
        if finals is None and not self.next_step and isinstance(result.info, dict):
            finals = result.info.get("final_obs")
        return Step(result, rewards, terminated, truncated, dones, valid, starts, finals, any_done)

    def take_finished(self) -> tuple[list[float], list[int]]:
        """The returns and lengths of the episodes finished since the last call."""
        out = self.returns, self.lengths
        self.returns, self.lengths = [], []
        return out

    def take_successes(self) -> list[float]:
        """The success flags of the episodes finished since the last call (those that
        have one)."""
        out, self.successes = self.successes, []
        return out

    def state_dict(self) -> dict[str, Any]:
        """The episodes in progress (the envs themselves are not included)."""
        return {
            "resetting": self.resetting.copy(),
            "ep_return": self.ep_return.copy(),
            "ep_len": self.ep_len.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues the episodes of :meth:`state_dict` (on the restored envs)."""
        self.resetting = np.asarray(state.get("resetting", self.resetting), bool).copy()
        self.ep_return = np.asarray(state["ep_return"], np.float64).copy()
        self.ep_len = np.asarray(state["ep_len"], np.int64).copy()
