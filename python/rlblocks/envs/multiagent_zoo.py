"""A small heterogeneous multi-agent task: PettingZoo's parallel API, in the spirit of the zoo.

Needs PettingZoo: ``pip install "rlblocks[multiagent]"`` (this module is not imported by
:mod:`rlblocks.envs`).

:class:`HeterogeneousBandit` is a contextual bandit for two kinds of agent with different
observation AND action spaces. Every step each live agent sees a freshly drawn observation
and is rewarded for the right function of THAT observation (as in :mod:`rlblocks.envs.zoo`),
so an agent that acts on a stale observation, or on another agent's, scores what a random
agent scores:

* ``scout_<i>``: observation ``Box(-1, 1, (3,), float32)``, action ``Discrete(3)``; the right
  answer is ``argmax(obs)``.
* ``pilot_<i>``: observation ``Dict(cue=Discrete(4), noise=Box(-1, 1, (2,), float32))``,
  action ``Discrete(5)``; the right answer is ``(cue + 1) % 4`` (action 4 is always wrong).

How many scouts and pilots take part changes from episode to episode, and agents enter and
leave mid-episode (see :meth:`HeterogeneousBandit.reset`). A right answer earns
``1 / (steps the agent is live)``, so every agent's episode return lies in ``[0, 1]``: 1 for
a perfect agent, 1/3 (scouts) or 1/5 (pilots) in expectation for a random one. An action
outside the acting agent's own space raises a ValueError that names the agent.

Examples:
    >>> par = parallel_env()
    >>> par.possible_agents
    ['scout_0', 'scout_1', 'pilot_0', 'pilot_1']
    >>> par.action_space("scout_0"), par.action_space("pilot_1")
    (Discrete(3), Discrete(5))
    >>> obs, infos = par.reset(seed=3)
    >>> returns = dict.fromkeys(par.possible_agents, 0.0)
    >>> while par.agents:  # a perfect policy: every participant's return is 1
    ...     actions = {agent: par.answer(agent, obs[agent]) for agent in par.agents}
    ...     obs, rewards, terminated, truncated, infos = par.step(actions)
    ...     for agent, reward in rewards.items():
    ...         returns[agent] += reward
    >>> all(abs(returns[agent] - 1.0) < 1e-12 for agent in par.schedule)
    True
    >>> par.random_agent_return("scout_0"), par.random_agent_return("pilot_0")
    (0.3333333333333333, 0.2)
    >>> aec = env(max_scouts=1, max_pilots=1)  # the AEC version of the same task
    >>> aec.reset(seed=0)
    >>> aec.agent_selection
    'scout_0'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

try:
    from pettingzoo import AECEnv, ParallelEnv
    from pettingzoo.utils.conversions import parallel_to_aec
except ImportError as e:  # pragma: no cover - exercised by tests/test_dependencies.py
    raise ImportError(
        f'rlblocks.envs.multiagent_zoo needs PettingZoo: pip install "rlblocks[multiagent]" ({e})'
    ) from e

__all__ = ["HeterogeneousBandit", "env", "parallel_env"]

_SCOUT, _PILOT = "scout", "pilot"


def _positive_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"HeterogeneousBandit: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _as_int_action(action: Any) -> int | None:
    """The int an action stands for, or None when it is not an integer scalar."""
    if isinstance(action, (bool, np.bool_)):
        return None
    if isinstance(action, (int, np.integer)):
        return int(action)
    if (
        isinstance(action, np.ndarray)
        and action.ndim == 0
        and np.issubdtype(action.dtype, np.integer)
    ):
        return int(action)
    return None


class HeterogeneousBandit(ParallelEnv[str, Any, Any]):
    """Scouts and pilots with different spaces; agents enter and leave mid-episode.

    Args:
        max_scouts: How many ``scout_<i>`` ids exist (each episode draws 1..max_scouts of them).
        max_pilots: How many ``pilot_<i>`` ids exist (each episode draws 1..max_pilots).
        episode_len: The step at which every agent still live is truncated (>= 2).
        render_mode: Only ``None`` (there is nothing to draw).

    Raises:
        ValueError: A count below 1, an episode length below 2 or a render mode.

    Examples:
        >>> env = HeterogeneousBandit(max_scouts=1, max_pilots=1, episode_len=4)
        >>> obs, _ = env.reset(seed=0)
        >>> env.observation_space("pilot_0")
        Dict('cue': Discrete(4), 'noise': Box(-1.0, 1.0, (2,), float32))
        >>> env.step({"scout_0": 4, "pilot_0": 0})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        ValueError: HeterogeneousBandit: actions['scout_0'] = 4 is outside ... [0, 2]
    """

    metadata: dict[str, Any] = {
        "name": "rlblocks_heterogeneous_bandit_v0",
        "render_modes": [],
        "is_parallelizable": True,
    }
    #: The episode return of an agent that always answers right (any agent, any schedule).
    max_agent_return: float = 1.0

    def __init__(
        self,
        max_scouts: int = 2,
        max_pilots: int = 2,
        episode_len: int = 8,
        render_mode: str | None = None,
    ):
        self.max_scouts = _positive_int("max_scouts", max_scouts, 1)
        self.max_pilots = _positive_int("max_pilots", max_pilots, 1)
        self.episode_len = _positive_int("episode_len", episode_len, 2)
        if render_mode is not None:
            raise ValueError(
                f"HeterogeneousBandit: render_mode must be None (nothing to draw), "
                f"got {render_mode!r}"
            )
        self.render_mode = render_mode
        scouts = [f"{_SCOUT}_{i}" for i in range(self.max_scouts)]
        pilots = [f"{_PILOT}_{i}" for i in range(self.max_pilots)]
        self.possible_agents: list[str] = scouts + pilots
        scout_obs = spaces.Box(-1.0, 1.0, (3,), np.float32)
        pilot_obs = spaces.Dict(
            {"cue": spaces.Discrete(4), "noise": spaces.Box(-1.0, 1.0, (2,), np.float32)}
        )
        scout_act, pilot_act = spaces.Discrete(3), spaces.Discrete(5)
        # One space object per kind: observation_space(agent) is the same object every call.
        self.observation_spaces: dict[str, spaces.Space[Any]] = {
            **dict.fromkeys(scouts, scout_obs),
            **dict.fromkeys(pilots, pilot_obs),
        }
        self.action_spaces: dict[str, spaces.Space[Any]] = {
            **dict.fromkeys(scouts, scout_act),
            **dict.fromkeys(pilots, pilot_act),
        }
        self.agents: list[str] = []
        self._schedule: dict[str, tuple[int, int]] = {}
        self._obs: dict[str, Any] = {}
        self._t = 0
        self._np_random: np.random.Generator | None = None

    # -- spaces and the answer rule -------------------------------------------------------

    def _check_agent(self, agent: Any) -> str:
        if agent not in self.observation_spaces:
            raise ValueError(
                f"HeterogeneousBandit: unknown agent {agent!r}; "
                f"the agents are {self.possible_agents}"
            )
        return str(agent)

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        """The agent's observation space (the same object on every call)."""
        return self.observation_spaces[self._check_agent(agent)]

    def action_space(self, agent: str) -> spaces.Space[Any]:
        """The agent's action space (the same object on every call)."""
        return self.action_spaces[self._check_agent(agent)]

    def answer(self, agent: str, obs: Any) -> int:
        """The action that earns the reward for ``obs`` (a perfect policy).

        Examples:
            >>> env = HeterogeneousBandit()
            >>> env.answer("scout_1", np.array([0.1, 0.5, -0.2], np.float32))
            1
            >>> env.answer("pilot_0", {"cue": 3, "noise": np.zeros(2, np.float32)})
            0
        """
        if self._check_agent(agent).startswith(_SCOUT):
            return int(np.argmax(obs))
        return (int(obs["cue"]) + 1) % 4

    def random_agent_return(self, agent_id: str) -> float:
        """The expected episode return of uniformly random actions for this agent.

        Examples:
            >>> HeterogeneousBandit().random_agent_return("pilot_1")
            0.2
        """
        space = self.action_space(agent_id)
        assert isinstance(space, spaces.Discrete)
        return 1.0 / int(space.n)

    # -- the episode --------------------------------------------------------------------

    @property
    def np_random(self) -> np.random.Generator:
        """The generator of schedules and observations (seeded by ``reset(seed=...)``)."""
        if self._np_random is None:
            self._np_random, _ = seeding.np_random()
        return self._np_random

    @property
    def schedule(self) -> dict[str, tuple[int, int]]:
        """This episode's participants: ``agent -> (entry step, exit step)``.

        The agent observes from step ``entry`` on, acts ``exit - entry`` times and leaves
        in the step that brings the count to ``exit`` (terminated, or truncated when
        ``exit == episode_len``); ids missing here sit this episode out.
        """
        return dict(self._schedule)

    def _draw_schedule(self) -> dict[str, tuple[int, int]]:
        rng, length = self.np_random, self.episode_len
        late_max = min(length // 2, length - 2)  # a late entrant still acts twice
        schedule: dict[str, tuple[int, int]] = {}
        anchors = []
        for kind, count in ((_SCOUT, self.max_scouts), (_PILOT, self.max_pilots)):
            n = int(rng.integers(1, count + 1))
            chosen = sorted(int(i) for i in rng.choice(count, size=n, replace=False))
            anchor = chosen[int(rng.integers(n))]
            anchors.append(f"{kind}_{anchor}")
            for i in chosen:
                entry = 0
                if i != anchor and late_max >= 1 and rng.random() < 0.5:
                    entry = int(rng.integers(1, late_max + 1))
                exit_ = length
                if entry + 2 < length and rng.random() < 0.5:
                    exit_ = int(rng.integers(entry + 2, length))
                schedule[f"{kind}_{i}"] = (entry, exit_)
        # No gap with nobody live before the last entrant arrives: the scout anchor (live
        # from step 0) stays until then; every other interval starts within its own.
        last_entry = max(entry for entry, _ in schedule.values())
        if schedule[anchors[0]][1] <= last_entry:
            schedule[anchors[0]] = (0, length)
        return {agent: schedule[agent] for agent in self.possible_agents if agent in schedule}

    def _observe(self, agent: str) -> Any:
        rng = self.np_random
        if agent.startswith(_SCOUT):
            return rng.uniform(-1.0, 1.0, 3).astype(np.float32)
        return {
            "cue": np.int64(rng.integers(4)),
            "noise": rng.uniform(-1.0, 1.0, 2).astype(np.float32),
        }

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Start an episode: draw who takes part and when each enters and leaves.

        1..max_scouts scouts and 1..max_pilots pilots (a random subset of the ids) take
        part; at least one of each kind enters at step 0, the others at step 0 or
        1..episode_len // 2; about half leave early (terminated, at least two steps after
        entering), the rest are truncated at ``episode_len``. ``options`` is not used.
        """
        if seed is not None:
            self._np_random, _ = seeding.np_random(seed)
        self._t = 0
        self._schedule = self._draw_schedule()
        self.agents = [agent for agent, (entry, _) in self._schedule.items() if entry == 0]
        self._obs = {agent: self._observe(agent) for agent in self.agents}
        return dict(self._obs), {agent: {} for agent in self.agents}

    def _check_actions(self, actions: Any) -> dict[str, int]:
        if not isinstance(actions, Mapping):
            raise ValueError(
                f"HeterogeneousBandit: actions must be a dict agent -> action, "
                f"got {type(actions).__name__}"
            )
        live = set(self.agents)
        for agent in actions:
            if agent not in live:
                raise ValueError(
                    f"HeterogeneousBandit: actions[{agent!r}]: {agent!r} is not live at step "
                    f"{self._t} (live agents: {self.agents}); act only for env.agents"
                )
        checked: dict[str, int] = {}
        for agent in self.agents:
            space = self.action_spaces[agent]
            assert isinstance(space, spaces.Discrete)
            n = int(space.n)
            if agent not in actions:
                raise ValueError(
                    f"HeterogeneousBandit: no action for live agent {agent!r} at step "
                    f"{self._t}; every agent in env.agents acts, {agent} with an int in "
                    f"[0, {n - 1}]"
                )
            action = _as_int_action(actions[agent])
            if action is None or not 0 <= action < n:
                raise ValueError(
                    f"HeterogeneousBandit: actions[{agent!r}] = {actions[agent]!r} is outside "
                    f"{agent}'s action space {space}: allowed an int in [0, {n - 1}]"
                )
            checked[agent] = action
        return checked

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[
        dict[str, Any],
        dict[str, float],
        dict[str, bool],
        dict[str, bool],
        dict[str, dict[str, Any]],
    ]:
        """Reward every live agent's action, then move one step on.

        The returned dicts hold the agents that acted (those leaving now included, with
        ``terminated`` or ``truncated`` True and a last observation) and the agents that
        enter now (reward 0, their first observation).

        Raises:
            ValueError: An action outside the agent's space, a live agent without an
                action, or an action for an agent that is not live.
            RuntimeError: Stepping before ``reset()`` or after the episode ended.
        """
        if not self.agents:
            raise RuntimeError(
                "HeterogeneousBandit: no live agents; call reset() before step() "
                "(and again after an episode ends)"
            )
        checked = self._check_actions(actions)
        rewards: dict[str, float] = {}
        for agent, action in checked.items():
            entry, exit_ = self._schedule[agent]
            right = action == self.answer(agent, self._obs[agent])
            rewards[agent] = 1.0 / (exit_ - entry) if right else 0.0
        self._t += 1
        t = self._t
        entering = [agent for agent, (entry, _) in self._schedule.items() if entry == t]
        shown = [agent for agent in self.possible_agents if agent in checked or agent in entering]
        terminated: dict[str, bool] = {}
        truncated: dict[str, bool] = {}
        for agent in shown:
            exit_ = self._schedule[agent][1]
            terminated[agent] = exit_ == t and t < self.episode_len
            truncated[agent] = exit_ == t and t == self.episode_len
            rewards.setdefault(agent, 0.0)
        self._obs = {agent: self._observe(agent) for agent in shown}
        obs = dict(self._obs)
        self.agents = [agent for agent in shown if not (terminated[agent] or truncated[agent])]
        self._obs = {agent: self._obs[agent] for agent in self.agents}
        rewards = {agent: rewards[agent] for agent in shown}
        return obs, rewards, terminated, truncated, {agent: {} for agent in shown}

    def render(self) -> None:
        """Nothing to draw (``render_mode`` is always None)."""
        return None

    def close(self) -> None:
        """Nothing to release."""


def parallel_env(**kwargs: Any) -> HeterogeneousBandit:
    """The task as a PettingZoo ``ParallelEnv`` (keyword arguments: :class:`HeterogeneousBandit`).

    Examples:
        >>> parallel_env(max_pilots=3).possible_agents
        ['scout_0', 'scout_1', 'pilot_0', 'pilot_1', 'pilot_2']
    """
    return HeterogeneousBandit(**kwargs)


def env(**kwargs: Any) -> AECEnv:
    """The task as a PettingZoo ``AECEnv`` (``parallel_to_aec`` of :func:`parallel_env`).

    Examples:
        >>> aec = env(max_scouts=1)
        >>> aec.reset(seed=0)
        >>> aec.last()[0].dtype
        dtype('float32')
    """
    return parallel_to_aec(parallel_env(**kwargs))
