"""A small turn-based game in PettingZoo's AEC API, with an action mask as PettingZoo classic
games have one.

Needs PettingZoo: ``pip install "rlblocks[multiagent]"`` (this module is not imported by
:mod:`rlblocks.envs`).

:class:`CallTheMove` is played by ``player_0`` and ``player_1`` in turn, ``turns`` moves each.
The player to move observes ``Dict(observation=Box(0, 1, (n,)), action_mask=Box(0, 1, (n,),
int8))``: the observation is the one-hot of the move it is asked to make, the mask allows
that move and one other; a waiting player observes zeros and an all-zero mask (as in
PettingZoo classic). The game ends after the last move, when each player is rewarded the
share of its turns where it made the asked move: 1 for a perfect player, 1/2 in expectation
for one that plays random legal moves, and a player acting on a waiting player's
observation (out of turn) scores as random. A move outside the mask ends the game at once:
the player that made it gets -1, the other 0 (PettingZoo's rule for illegal moves).

Examples:
    >>> game = env()
    >>> game.reset(seed=0)
    >>> returns = dict.fromkeys(game.possible_agents, 0.0)
    >>> for agent in game.agent_iter():  # a perfect player on both seats
    ...     obs, reward, terminated, truncated, _ = game.last()
    ...     returns[agent] += reward
    ...     move = None if terminated or truncated else int(np.argmax(obs["observation"]))
    ...     game.step(move)
    >>> returns
    {'player_0': 1.0, 'player_1': 1.0}
    >>> game.observation_space("player_0")["action_mask"]
    Box(0, 1, (4,), int8)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

try:
    from pettingzoo import AECEnv
except ImportError as e:  # pragma: no cover - exercised by tests/test_dependencies.py
    raise ImportError(
        f'rlblocks.envs.turn_zoo needs PettingZoo: pip install "rlblocks[multiagent]" ({e})'
    ) from e

__all__ = ["CallTheMove", "env"]


class CallTheMove(AECEnv):  # type: ignore[misc]
    """The game of the module docstring.

    Args:
        num_actions: Moves a player can make (>= 2).
        turns: Moves of each player per game (>= 1).
    """

    metadata: dict[str, Any] = {"name": "rlblocks_call_the_move_v0", "is_parallelizable": False}

    def __init__(self, num_actions: int = 4, turns: int = 3) -> None:
        super().__init__()
        if num_actions < 2 or turns < 1:
            raise ValueError(f"need num_actions >= 2 and turns >= 1, got {num_actions}, {turns}")
        self.num_actions, self.turns = int(num_actions), int(turns)
        self.possible_agents = ["player_0", "player_1"]
        self.agents: list[str] = []
        n = self.num_actions
        space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(0.0, 1.0, (n,), np.float32),
                "action_mask": gym.spaces.Box(0, 1, (n,), np.int8),
            }
        )
        self._obs_spaces = dict.fromkeys(self.possible_agents, space)
        self._act_spaces: dict[str, gym.Space] = {
            a: gym.spaces.Discrete(n) for a in self.possible_agents
        }
        self._rng = np.random.default_rng()
        self.agent_selection = self.possible_agents[0]

    def observation_space(self, agent: str) -> gym.Space:
        """Every player's: the module docstring's Dict."""
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        """``Discrete(num_actions)``."""
        return self._act_spaces[agent]

    def _deal(self) -> None:
        """Draws the asked move and the legal moves of the player to move."""
        n = self.num_actions
        self._target = int(self._rng.integers(n))
        other = (self._target + 1 + int(self._rng.integers(n - 1))) % n
        self._mask = np.zeros(n, np.int8)
        self._mask[[self._target, other]] = 1

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Starts a game; ``player_0`` moves first."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        self._hits = dict.fromkeys(self.agents, 0)
        self._moves = 0
        self.agent_selection = self.agents[0]
        self._deal()

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        """The asked move and the mask for the player to move; zeros for the other."""
        obs = np.zeros(self.num_actions, np.float32)
        mask = np.zeros(self.num_actions, np.int8)
        if agent == self.agent_selection and not self.terminations.get(agent, True):
            obs[self._target] = 1.0
            mask[:] = self._mask
        return {"observation": obs, "action_mask": mask}

    def step(self, action: Any) -> None:
        """The player to move makes ``action`` (None once the game is over)."""
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if action is None or not self.action_space(agent).contains(int(action)):
            raise ValueError(f"{agent}: move {action!r} is not in {self.action_space(agent)}")
        self._cumulative_rewards[agent] = 0.0
        self.rewards = dict.fromkeys(self.agents, 0.0)
        move = int(action)
        if not self._mask[move]:  # illegal: the game ends, the offender loses
            self.rewards[agent] = -1.0
            self.terminations = dict.fromkeys(self.agents, True)
        else:
            self._hits[agent] += int(move == self._target)
            self._moves += 1
            if self._moves == 2 * self.turns:
                self.rewards = {a: self._hits[a] / self.turns for a in self.agents}
                self.terminations = dict.fromkeys(self.agents, True)
        self._accumulate_rewards()
        self.agent_selection = self.agents[1 - self.agents.index(agent)]
        if not self.terminations[self.agent_selection]:
            self._deal()

    def render(self) -> None:
        """Nothing to draw."""

    def close(self) -> None:
        """Nothing to release."""


def env(**kwargs: Any) -> CallTheMove:
    """The game (keyword arguments: :class:`CallTheMove`'s)."""
    return CallTheMove(**kwargs)
