"""Multi-agent envs for the native trainer: PettingZoo and RLlib adapters, and
:class:`MultiAgentVectorEnv`, which steps many copies of one and lays every agent out in a
*lane* of its policy.

Adapters. :func:`as_parallel_env` turns what a user's maker returns into the PettingZoo
parallel API the trainer steps: a ``ParallelEnv`` as it is (PettingZoo's ``aec_to_parallel``
of an AEC env, as MPE's, through :mod:`rlblocks.multiagent.aec_parallel`), an ``AECEnv`` made by
``parallel_to_aec`` back into its parallel env, an RLlib ``MultiAgentEnv`` through
:class:`RLlibParallelEnv` (its ``"__all__"`` flags end the episode for every agent; an agent
that is alive but left out of a step's observations, as in turn-based envs, is refused).
A turn-based ``AECEnv`` is stepped as it is by
:class:`~rlblocks.multiagent.turns.TurnBasedVectorEnv`.

Lanes. Each policy gets one lane per (env copy, agent mapped to it): lane
``e * len(agents) + j`` for agent ``j`` of copy ``e``. Every step, each live agent's
observation becomes its :class:`~rlblocks.multiagent.union.UnionSpec` value in its lane
(idle lanes hold a blank value and are recorded as not valid), so a policy's lanes are a
vector env of fixed size whose per-lane trajectories never mix agents: GAE runs per lane, a
lane's trajectory ends when its agent terminates or is truncated (truncated: bootstrapped
from its final observation) and a new one starts when an agent (re)appears.

Examples:
    >>> from rlblocks.envs.multiagent_zoo import parallel_env
    >>> hub = MultiAgentVectorEnv(parallel_env, num_envs=2, policy_mapping="by_space")
    >>> hub.policy_ids, hub.lanes("scout").num_envs  # 2 copies x 2 scouts
    (('scout', 'pilot'), 4)
    >>> raw = hub.reset_lanes("scout", seed=0)  # union values; idle lanes hold a blank
    >>> live = hub.live_lanes("scout")
    >>> results = hub.step({"scout": np.zeros(4, np.int64), "pilot": np.zeros(4, np.int64)})
    >>> bool((results["scout"].valid == live).all())  # exactly the lanes holding a scout acted
    True
    >>> hub.close()
"""

from __future__ import annotations

import pickle
import sys
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from rlblocks.multiagent.mapping import resolve_mapping
from rlblocks.multiagent.returns import checked_reset, checked_step
from rlblocks.multiagent.union import UnionSpec
from rlblocks.nest import tree_index
from rlblocks.spaces import clip_actions
from rlblocks.wrappers.vector_steps import StepResult, call_copy

__all__ = [
    "MultiAgentVectorEnv",
    "PolicyLanes",
    "RLlibParallelEnv",
    "StepResult",
    "as_parallel_env",
    "ezpickled",
    "is_multiagent_env",
]


def _pettingzoo_kind(obj: Any) -> str | None:
    if "pettingzoo" not in sys.modules:
        return None
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    if isinstance(obj, ParallelEnv):
        return "parallel"
    if isinstance(obj, AECEnv):
        return "aec"
    return None


def _is_rllib_multiagent(obj: Any) -> bool:
    module = sys.modules.get("ray.rllib.env.multi_agent_env")
    return module is not None and isinstance(obj, module.MultiAgentEnv)


def is_multiagent_env(obj: Any) -> bool:
    """Whether ``obj`` is a PettingZoo ``ParallelEnv`` / ``AECEnv`` or an RLlib
    ``MultiAgentEnv`` (found without importing either library: an object of theirs means
    its library is already imported).

    Examples:
        >>> import gymnasium as gym
        >>> is_multiagent_env(gym.make("CartPole-v1"))
        False
    """
    return _pettingzoo_kind(obj) is not None or _is_rllib_multiagent(obj)


def as_parallel_env(env: Any) -> Any:
    """``env`` in PettingZoo's parallel API (see the module docstring).

    Raises:
        ValueError: ``env`` is not a multi-agent env.
    """
    kind = _pettingzoo_kind(env)
    if kind == "parallel":
        from rlblocks.multiagent.aec_parallel import fast_parallel

        return fast_parallel(env)  # PettingZoo's aec_to_parallel, minus its overhead
    if isinstance(env, RLlibParallelEnv):
        return env
    if kind == "aec":
        from pettingzoo.utils.conversions import aec_to_parallel, parallel_to_aec_wrapper
        from pettingzoo.utils.wrappers import OrderEnforcingWrapper

        if isinstance(env, OrderEnforcingWrapper) and isinstance(env.env, parallel_to_aec_wrapper):
            return aec_to_parallel(env)  # a parallel env seen through parallel_to_aec
        raise ValueError(
            f"{type(env).__name__} is a turn-based PettingZoo AECEnv: it is not converted to "
            "the parallel API; the native trainer steps it turn by turn "
            "(rlblocks.multiagent.turns.TurnBasedVectorEnv)"
        )
    if _is_rllib_multiagent(env):
        return RLlibParallelEnv(env)
    raise ValueError(
        f"expected a PettingZoo ParallelEnv / AECEnv or an RLlib MultiAgentEnv, got "
        f"{type(env).__name__}"
    )


class RLlibParallelEnv:
    """An RLlib ``MultiAgentEnv`` in PettingZoo's parallel API (simultaneous moves).

    Args:
        env: The RLlib env; it must list ``possible_agents``.

    Raises:
        ValueError: No ``possible_agents``; at ``step``, an agent that is alive but has no
            observation (a turn-based env).
    """

    metadata: dict[str, Any] = {"name": "rlblocks_rllib_parallel"}

    def __init__(self, env: Any) -> None:
        possible = list(getattr(env, "possible_agents", None) or [])
        if not possible:
            raise ValueError(
                f"RLlib MultiAgentEnv {type(env).__name__} lists no possible_agents; the "
                "native trainer needs them to give every agent its lane"
            )
        self.env = env
        self.possible_agents = possible
        self.agents: list[Any] = []

    @property
    def unwrapped(self) -> RLlibParallelEnv:
        return self

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        return len(self.possible_agents)

    def render(self) -> Any:
        render = getattr(self.env, "render", None)
        return None if render is None else render()

    def observation_space(self, agent: Any) -> gym.Space:
        return self.env.get_observation_space(agent)  # type: ignore[no-any-return]

    def action_space(self, agent: Any) -> gym.Space:
        return self.env.get_action_space(agent)  # type: ignore[no-any-return]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, Any]]:
        obs, infos = self.env.reset(seed=seed, options=options)
        self.agents = [a for a in self.possible_agents if a in obs]
        infos = infos or {}
        return dict(obs), {a: infos.get(a, {}) for a in obs}

    def step(self, actions: dict[Any, Any]) -> tuple[dict[Any, Any], ...]:
        out = self.env.step(actions)
        if not (
            isinstance(out, tuple) and len(out) == 5 and all(isinstance(p, Mapping) for p in out)
        ):
            return out  # malformed: refused by the caller, naming the env
        obs, rewards, terms, truncs, infos = out
        obs, rewards = dict(obs), dict(rewards)
        terms, truncs = dict(terms), dict(truncs)
        end_all, cut_all = bool(terms.pop("__all__", False)), bool(truncs.pop("__all__", False))
        for a in self.agents:
            if end_all and not truncs.get(a, False):
                terms[a] = terms.get(a, False) or not cut_all
            if cut_all and not terms.get(a, False):
                truncs[a] = True
        done = {a for a in self.agents if terms.get(a, False) or truncs.get(a, False)}
        waiting = [a for a in self.agents if a not in done and a not in obs]
        if waiting:
            raise ValueError(
                f"RLlib MultiAgentEnv {type(self.env).__name__}: agent {waiting[0]!r} is "
                "alive but has no observation this step (a turn-based env); the native "
                "trainer steps every live agent each step: give turn-based games as a "
                "PettingZoo AECEnv"
            )
        acted = self.agents
        self.agents = [a for a in self.possible_agents if a in obs and a not in done]
        keys = [a for a in self.possible_agents if a in obs or a in acted]
        infos = infos or {}
        return (
            obs,
            {a: rewards.get(a, 0.0) for a in keys},
            {a: bool(terms.get(a, False)) for a in keys},
            {a: bool(truncs.get(a, False)) for a in keys},
            {a: infos.get(a, {}) for a in keys},
        )

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()


class PolicyLanes:
    """One policy's lanes of a :class:`MultiAgentVectorEnv`, seen as the vector env an
    :class:`~rlblocks.train.runner.EnvRunner` expects (reset only: the multi-agent runner
    steps the shared envs)."""

    def __init__(self, hub: MultiAgentVectorEnv, policy_id: str) -> None:
        self.hub, self.policy_id = hub, policy_id
        spec = hub.specs[policy_id]
        self.num_envs = hub.num_envs * len(spec.agents)
        self.single_observation_space = spec.observation_space
        self.single_action_space = spec.action_space
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def reset(self, seed: int | None = None, **_: Any) -> tuple[list[Any], dict[str, Any]]:
        return self.hub.reset_lanes(self.policy_id, seed), {}

    def live_lanes(self) -> np.ndarray:
        return self.hub.live_lanes(self.policy_id)

    def step(self, actions: Any) -> Any:
        raise RuntimeError("a policy's lanes are stepped together by MultiAgentVectorEnv.step")

    def close(self) -> None:
        """The shared envs are closed by :meth:`MultiAgentVectorEnv.close`."""


def ezpickled(env: Any) -> bool:
    """Whether ``env`` or an env it wraps pickles as a ``gymnasium.utils.EzPickle`` (its
    constructor's arguments only: unpickled, it is a new env that was never reset)."""
    from gymnasium.utils import EzPickle

    pending, seen = [env], set()
    while pending:
        obj = pending.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, EzPickle):
            return True
        pending.extend(getattr(obj, k, None) for k in ("env", "aec_env", "par_env", "unwrapped"))
    return False


class MultiAgentVectorEnv:
    """``num_envs`` copies of a multi-agent env, stepped together (module docstring).

    Args:
        make: Builds one env (any kind :func:`as_parallel_env` takes).
        num_envs: Env copies.
        policy_mapping: A ``multiagent.policy_mapping`` value.
        agent_id_one_hot: Show shared policies the agent's index.
        clip_actions: Clip each agent's action into its own Box bounds.
        name: The env's name in error messages.
        smoothing: Finished episodes the return statistics average over.
        envs: Env copies to step instead of making them (restored from
            :meth:`snapshot`).
        first_copy: The index of this object's first copy in error messages (a worker
            process's share of the copies: :mod:`rlblocks.multiagent.workers`).
    """

    def __init__(
        self,
        make: Callable[[], Any],
        num_envs: int,
        policy_mapping: str = "shared",
        agent_id_one_hot: bool = False,
        clip_actions: bool = True,
        name: str = "env",
        smoothing: int = 100,
        envs: list[Any] | None = None,
        first_copy: int = 0,
    ) -> None:
        self.name = name
        self.first_copy = first_copy
        self.envs: list[Any] = [] if envs is None else list(envs)
        try:
            while len(self.envs) < num_envs:
                self.envs.append(self._adapt(make()))
        except BaseException:
            self.close()
            raise
        first = self.envs[0]
        self.num_envs = num_envs
        self.agents: tuple[Any, ...] = tuple(first.possible_agents)
        if not self.agents:
            raise ValueError(f"env {name!r} lists no possible_agents")
        self.obs_spaces = {a: self._obs_space(first, a) for a in self.agents}
        self.action_spaces = {a: first.action_space(a) for a in self.agents}
        self.mapping = resolve_mapping(
            self.agents, self.obs_spaces, self.action_spaces, policy_mapping
        )
        self.policy_ids: tuple[str, ...] = tuple(dict.fromkeys(self.mapping.values()))
        self.specs: dict[str, UnionSpec] = {}
        for pid in self.policy_ids:
            members = [a for a in self.agents if self.mapping[a] == pid]
            try:
                self.specs[pid] = UnionSpec.build(
                    {a: self.obs_spaces[a] for a in members},
                    {a: self.action_spaces[a] for a in members},
                    agent_id_one_hot,
                )
            except ValueError as err:
                raise ValueError(f"env {name!r}, policy {pid!r}: {err}") from None
        # agent -> (policy id, its index among the policy's agents)
        self._slot = {a: (pid, self.specs[pid].agents.index(a)) for a, pid in self.mapping.items()}
        self.clip_actions = clip_actions
        self._obs: list[dict[Any, Any]] = [{} for _ in self.envs]
        self._live: list[list[Any]] = [[] for _ in self.envs]
        self._pending: dict[str, list[Any]] = {}
        self._ep_returns: list[dict[Any, float]] = [{} for _ in self.envs]
        self._ep_len = np.zeros(num_envs, np.int64)
        self.episode_returns: deque[float] = deque(maxlen=smoothing)
        self.episode_lengths: deque[int] = deque(maxlen=smoothing)
        self.agent_returns: dict[Any, deque[float]] = {
            a: deque(maxlen=smoothing) for a in self.agents
        }
        self.module_returns: dict[str, deque[float]] = {
            p: deque(maxlen=smoothing) for p in self.policy_ids
        }
        self.episodes_total = 0
        self.episodes_this_iter = 0

    def _adapt(self, env: Any) -> Any:
        """One made env as this class steps it."""
        return as_parallel_env(env)

    def _obs_space(self, env: Any, agent: Any) -> gym.Space:
        return env.observation_space(agent)  # type: ignore[no-any-return]

    def lanes(self, policy_id: str) -> PolicyLanes:
        """The vector-env view of one policy's lanes."""
        return PolicyLanes(self, policy_id)

    # --- observations -------------------------------------------------------------------------
    def _lane(self, env: int, agent: Any) -> tuple[str, int]:
        try:
            pid, j = self._slot[agent]
        except KeyError:
            raise ValueError(
                f"env {self.name!r} (copy {self.first_copy + env}): agent {agent!r} is not one "
                f"of its possible_agents {list(self.agents)}"
            ) from None
        return pid, env * len(self.specs[pid].agents) + j

    def _raw(self) -> dict[str, list[Any]]:
        raw = {
            pid: [spec.blank()] * (self.num_envs * len(spec.agents))
            for pid, spec in self.specs.items()
        }
        for e, (obs, live) in enumerate(zip(self._obs, self._live, strict=True)):
            for a in live:
                pid, lane = self._lane(e, a)
                try:
                    raw[pid][lane] = self.specs[pid].value(a, obs[a])
                except ValueError as err:
                    raise ValueError(
                        f"env {self.name!r} (copy {self.first_copy + e}) returned an observation "
                        f"for agent {a!r} "
                        f"that does not fit its observation space: {err}"
                    ) from None
        return raw

    def live_lanes(self, policy_id: str) -> np.ndarray:
        """Bool per lane of ``policy_id``: an agent is in it now."""
        out = np.zeros(self.num_envs * len(self.specs[policy_id].agents), bool)
        for e, live in enumerate(self._live):
            for a in live:
                pid, lane = self._lane(e, a)
                if pid == policy_id:
                    out[lane] = True
        return out

    def _reset_env(self, e: int, seed: int | None) -> None:
        copy = self.first_copy + e
        out = call_copy(self.name, copy, "reset", self.envs[e].reset, seed=seed)
        obs = checked_reset(self.name, copy, out, getattr(self.envs[e], "agents", None))
        self._obs[e] = obs
        self._live[e] = self._present(e, obs)
        self._ep_returns[e] = {}
        self._ep_len[e] = 0

    def _present(self, e: int, obs: dict[Any, Any]) -> list[Any]:
        agents = getattr(self.envs[e], "agents", None)
        live = [a for a in (obs if agents is None else agents)]
        missing = [a for a in live if a not in obs]
        if missing:
            raise ValueError(
                f"env {self.name!r} (copy {self.first_copy + e}): live agent {missing[0]!r} has "
                "no observation"
            )
        for a in live:
            self._lane(e, a)  # an unknown agent id raises
        return live

    def reset_lanes(self, policy_id: str, seed: int | None) -> list[Any]:
        """The union values of ``policy_id``'s lanes after a reset of every copy (copy ``e``
        seeded with ``seed + e``); the first policy asking resets, the others share it."""
        if policy_id not in self._pending:
            for e in range(self.num_envs):
                self._reset_env(e, None if seed is None else seed + e)
            self._pending = self._raw()
        return self._pending.pop(policy_id)

    # --- stepping -----------------------------------------------------------------------------
    def step(self, actions: dict[str, Any]) -> dict[str, StepResult]:
        """Steps every copy with each policy's lane actions; finished episodes reset at once.

        Raises:
            ValueError: The env fails, returns a non-finite reward or an unknown agent.
        """
        lanes = {p: self.num_envs * len(s.agents) for p, s in self.specs.items()}
        rewards = {p: np.zeros(n, np.float32) for p, n in lanes.items()}
        terminated = {p: np.zeros(n, bool) for p, n in lanes.items()}
        truncated = {p: np.zeros(n, bool) for p, n in lanes.items()}
        valid = {p: np.zeros(n, bool) for p, n in lanes.items()}
        starts = {p: np.zeros(n, bool) for p, n in lanes.items()}
        final: dict[str, list[Any]] = {p: [None] * n for p, n in lanes.items()}
        arrays = {p: isinstance(actions[p], np.ndarray) for p in lanes}  # one row: arr[lane]
        for e, env in enumerate(self.envs):
            live = self._live[e]
            acts: dict[Any, Any] = {}
            for a in live:
                pid, lane = self._lane(e, a)
                valid[pid][lane] = True
                given = actions[pid]
                row = given[lane] if arrays[pid] else tree_index(given, lane)
                own = self.specs[pid].agent_action(a, row)
                acts[a] = clip_actions(own, self.action_spaces[a]) if self.clip_actions else own
            copy = self.first_copy + e
            out = call_copy(self.name, copy, "step", env.step, acts)
            obs, rew, terms, truncs, _ = checked_step(self.name, copy, out, live, self.agents)
            self._ep_len[e] += 1
            returns = self._ep_returns[e]
            done: set[Any] = set()
            for a in live:
                pid, lane = self._lane(e, a)
                r = rew[a]
                rewards[pid][lane] = r
                returns[a] = returns.get(a, 0.0) + r
                term, trunc = terms[a], truncs[a]
                if term or trunc:
                    done.add(a)
                    terminated[pid][lane] = term
                    truncated[pid][lane] = trunc and not term
                    if trunc and not term:  # bootstrapped from its last observation
                        last = obs[a] if a in obs else self._obs[e][a]
                        final[pid][lane] = self.specs[pid].value(a, last)
            obs = dict(obs)
            new_live = self._present(e, obs)
            # an agent that left without a done flag: truncated, bootstrapped from its last
            # observation
            for a in live:
                if a not in done and a not in new_live:
                    pid, lane = self._lane(e, a)
                    truncated[pid][lane] = True
                    last = obs[a] if a in obs else self._obs[e][a]
                    final[pid][lane] = self.specs[pid].value(a, last)
                    done.add(a)
            if not new_live:
                self._finish_episode(e)
                self._reset_env(e, None)
                new_live = self._live[e]
                done.update(live)
            else:
                self._obs[e], self._live[e] = obs, new_live
            for a in self._live[e]:
                if a in done or a not in live:
                    pid, lane = self._lane(e, a)
                    starts[pid][lane] = True
        raw = self._raw()
        out = {}
        for pid in self.specs:
            live_now = self.live_lanes(pid)
            out[pid] = StepResult(
                raw[pid],
                rewards[pid],
                terminated[pid],
                truncated[pid],
                {"final_obs": final[pid]},
                valid[pid],
                starts[pid],
                live_now,
                final[pid],
            )
        return out

    def _finish_episode(self, e: int) -> None:
        self.record_episode(self._ep_returns[e], int(self._ep_len[e]))

    def record_episode(self, returns: dict[Any, float], length: int) -> None:
        """Adds one finished episode (each agent's return, its length in env steps) to the
        return statistics."""
        self.episode_returns.append(float(sum(returns.values())))
        self.episode_lengths.append(length)
        for a, r in returns.items():
            self.agent_returns[a].append(r)
        for pid in self.policy_ids:
            members = [a for a in returns if self.mapping[a] == pid]
            if members:
                self.module_returns[pid].append(float(sum(returns[a] for a in members)))
        self.episodes_total += 1
        self.episodes_this_iter += 1

    # --- statistics ---------------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """RLlib's return columns over the last finished episodes (nan before any ends)."""

        def mean(xs: Iterable[float]) -> float:
            values = list(xs)
            return float(np.mean(values)) if values else float("nan")

        out = {
            "episode_return_mean": mean(self.episode_returns),
            "episode_return_min": min(self.episode_returns, default=float("nan")),
            "episode_return_max": max(self.episode_returns, default=float("nan")),
            "episode_len_mean": mean(self.episode_lengths),
        }
        for a in self.agents:
            out[f"agent_episode_return_mean/{a}"] = mean(self.agent_returns[a])
        for pid in self.policy_ids:
            out[f"module_episode_return_mean/{pid}"] = mean(self.module_returns[pid])
        return out

    def snapshot(self) -> bytes | None:
        """The pickled env copies and what they are in the middle of (current observations,
        live agents, episode returns so far); None when an env cannot be pickled, or
        pickles as gymnasium's ``EzPickle`` does (its constructor's arguments only: the
        copy would come back as a new, never reset env, e.g. PettingZoo classic and MPE)."""
        if any(ezpickled(env) for env in self.envs):
            return None
        try:
            return pickle.dumps(
                {
                    "envs": self.envs,
                    "obs": self._obs,
                    "live": self._live,
                    "ep_returns": self._ep_returns,
                    "ep_len": self._ep_len,
                }
            )
        except Exception:  # any env attribute may refuse pickling (sockets, renderers, ...)
            return None

    def resume(self, data: dict[str, Any]) -> None:
        """Continues the episodes of a :meth:`snapshot` (its ``envs`` given to the
        constructor)."""
        self._obs, self._live = data["obs"], data["live"]
        self._ep_returns, self._ep_len = data["ep_returns"], np.asarray(data["ep_len"])

    def state_dict(self) -> dict[str, Any]:
        """The return statistics (the envs are in :meth:`snapshot`)."""
        return {
            "episode_returns": list(self.episode_returns),
            "episode_lengths": list(self.episode_lengths),
            "agent_returns": {a: list(v) for a, v in self.agent_returns.items()},
            "module_returns": {p: list(v) for p, v in self.module_returns.items()},
            "episodes_total": self.episodes_total,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`."""
        self.episode_returns.extend(state["episode_returns"])
        self.episode_lengths.extend(state["episode_lengths"])
        for a, values in state["agent_returns"].items():
            if a in self.agent_returns:
                self.agent_returns[a].extend(values)
        for p, values in state["module_returns"].items():
            if p in self.module_returns:
                self.module_returns[p].extend(values)
        self.episodes_total = int(state["episodes_total"])

    def close(self) -> None:
        """Closes every copy."""
        for env in self.envs:
            close = getattr(env, "close", None)
            if close is not None:
                close()
