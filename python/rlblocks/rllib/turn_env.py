"""A turn-based PettingZoo ``AECEnv`` as an RLlib ``MultiAgentEnv``, stepped as it is (never
converted to the parallel API).

RLlib's multi-agent env protocol asks for actions only of the agents that got an observation,
which is the turn-based protocol: :class:`TurnBasedMultiAgentEnv` returns the observation of
the agent to move (``env.agent_selection``) alone, so only it acts. Each agent's rewards
(``env.rewards`` after every move, the other agents' included) are summed until the agent
is next to move, or until it is done, and reported then, with its observation: an agent's
transition runs from one of its moves to its next, as in the native trainer
(:mod:`rlblocks.multiagent.turns`). When an agent is done (at the game's end: every agent
that moved) it gets its last observation, its summed rewards and its flags; ``"__all__"`` ends
the episode once no agent is left. Rewards that arrive before an agent's first move belong
to no transition of its own and are dropped, as natively.

Observations are the policy's union values of PettingZoo's ``Dict(observation,
action_mask)`` read as RLlib's ``Dict(action_mask, observations)``, which the rlblocks RLlib
module masks; a move outside the mover's mask is still played (the game decides what it
costs) and counted in :attr:`TurnBasedMultiAgentEnv.illegal_moves`, which
:class:`IllegalMoveCounter` writes to the results as ``illegal_moves_total``.

Examples:
    >>> from rlblocks.envs.turn_zoo import env
    >>> game = TurnBasedMultiAgentEnv(env())
    >>> obs, _ = game.reset(seed=0)
    >>> list(obs), game.policy_mapping
    (['player_0'], {'player_0': 'shared', 'player_1': 'shared'})
    >>> legal = int(np.argmax(obs["player_0"]["action_mask"]))
    >>> obs, rewards, terminated, truncated, _ = game.step({"player_0": legal})
    >>> list(obs), rewards, terminated["__all__"], game.illegal_moves
    (['player_1'], {}, False, 0)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlblocks.mask_keys import mask_form
from rlblocks.masks import MASK_KEY
from rlblocks.rllib._ray import RLlibCallback
from rlblocks.rllib.multiagent_env import UnionMultiAgentEnv

__all__ = ["ILLEGAL_MOVES", "IllegalMoveCounter", "TurnBasedMultiAgentEnv"]

#: The results key (under ``env_runners``) of the moves played outside the mask.
ILLEGAL_MOVES = "illegal_moves_total"


class TurnBasedMultiAgentEnv(UnionMultiAgentEnv):
    """A turn-based PettingZoo ``AECEnv`` as an RLlib ``MultiAgentEnv`` (module docstring);
    the arguments are :class:`~rlblocks.rllib.multiagent_env.UnionMultiAgentEnv`'s.

    Attributes:
        aec_env: The PettingZoo env (also ``par_env``, for ``render`` / ``close``).
        illegal_moves: Moves outside the mover's ``action_mask`` since the env was made.
    """

    def __init__(
        self,
        env: Any,
        policy_mapping: str | Mapping[Any, Any] = "shared",
        agent_id_one_hot: bool = False,
    ) -> None:
        super(UnionMultiAgentEnv, self).__init__()
        self.aec_env = self.par_env = env
        self._map(env, policy_mapping, agent_id_one_hot)
        self.illegal_moves = 0
        self._pending: dict[Any, float] = {}  # rewards of the agents that moved, not yet paid
        self._shown: dict[Any, Any] = {}  # the observation each agent last got (mask form)

    def _value(self, agent: Any) -> Any:
        shown = mask_form(self.aec_env.observe(agent))
        self._shown[agent] = shown
        return self.unions[self.policy_mapping[agent]].value(agent, shown)

    def _settle(self) -> None:
        """Plays PettingZoo's ``None`` moves of the agents that are done."""
        env = self.aec_env
        for _ in range(4 * len(self.possible_agents) + 4):
            a = env.agent_selection if env.agents else None
            if a is None or not (env.terminations.get(a) or env.truncations.get(a)):
                return
            env.step(None)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """Resets the game; the observation of the agent to move."""
        env = self.aec_env
        env.reset(seed=seed, options=options)
        self._pending, self._shown = {}, {}
        self._settle()
        self.agents = list(env.agents)
        if not self.agents:
            raise ValueError("the turn-based env has no agent to move after reset")
        mover = env.agent_selection
        return {mover: self._value(mover)}, {}

    def step(
        self, action_dict: Mapping[Any, Any]
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
        """Plays the move of the agent to move; the next mover's observation and its rewards
        since its last move, and each agent that is done with its last observation, rewards
        and flags (module docstring).

        Raises:
            ValueError: ``action_dict`` has no move for the agent to move.
        """
        env = self.aec_env
        mover = env.agent_selection
        if mover not in action_dict:
            raise ValueError(
                f"the turn-based env asks for a move of {mover!r} (the agent to move), got "
                f"actions for {list(action_dict)}"
            )
        act = self.unions[self.policy_mapping[mover]].agent_action(mover, action_dict[mover])
        mask = self._shown.get(mover, {}).get(MASK_KEY) if np.ndim(act) == 0 else None
        if mask is not None:
            flat = np.asarray(mask).reshape(-1)
            if not (0 <= int(act) < flat.size and flat[int(act)]):
                self.illegal_moves += 1
        before = list(env.agents)
        self._pending.setdefault(mover, 0.0)
        env.step(act)
        for a in before:
            if a in self._pending:
                self._pending[a] += float(env.rewards.get(a, 0.0))
        done = [
            a
            for a in before
            if a in self._pending and (env.terminations.get(a) or env.truncations.get(a))
        ]
        flags = {a: (bool(env.terminations.get(a)), bool(env.truncations.get(a))) for a in done}
        self._settle()
        self.agents = list(env.agents)
        if not self.agents:  # the game is over: every agent that moved is done
            for a in self._pending:
                if a not in flags:
                    flags[a] = (True, False)
                    done.append(a)
        obs: dict[Any, Any] = {}
        rewards: dict[Any, float] = {}
        terminated: dict[Any, bool] = {}
        truncated: dict[Any, bool] = {}
        for a in done:
            obs[a] = self._value(a)
            rewards[a] = self._pending.pop(a)
            terminated[a], cut = flags[a]
            truncated[a] = cut and not terminated[a]
        if self.agents:
            nxt = env.agent_selection
            obs[nxt] = self._value(nxt)
            terminated[nxt] = truncated[nxt] = False
            if nxt in self._pending:
                rewards[nxt] = self._pending[nxt]
                self._pending[nxt] = 0.0
        over = not self.agents
        cut = any(truncated[a] for a in done)
        terminated["__all__"] = over and not cut
        truncated["__all__"] = over and cut
        return obs, rewards, terminated, truncated, {}


class IllegalMoveCounter(RLlibCallback):  # type: ignore[misc]
    """Writes each finished episode's moves outside the mask to the results
    (``env_runners/illegal_moves_total``, summed over the run)."""

    def on_episode_end(self, *, env: Any = None, metrics_logger: Any = None, **_: Any) -> None:
        """Logs the moves outside the mask since the env's last report."""
        inner = getattr(env, "unwrapped", env)
        count = getattr(inner, "illegal_moves", 0)
        reported = getattr(inner, "_illegal_reported", 0)
        if metrics_logger is not None:
            metrics_logger.log_value(ILLEGAL_MOVES, count - reported, reduce="lifetime_sum")
        if inner is not None:
            inner._illegal_reported = count
