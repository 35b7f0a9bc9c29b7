"""Turn-based games: :class:`TurnBasedVectorEnv` steps copies of a PettingZoo ``AECEnv`` as
it is (never converted to the parallel API), one move per copy per step.

Each step, only the agent to move (``env.agent_selection``) acts: its lane is the step's one
transition of that copy (``valid``); every other agent's lane is idle. What the others
receive while it moves (``env.rewards`` after the move, and the end of the game) belongs to
*their* last move: it is reported on their lanes with ``late`` set in the step's ``info``
(``info["late"]``, the lanes whose reward and terminated / truncated flags on this step
close their previous transition), and the trainer stitches it onto that transition
(:func:`~rlblocks.train.turn_batches.stitch_turns`). So an agent's transition runs from its
observation when it is to move to its next one, with every reward it got in between; when
the game ends every agent gets its final transition with the game's flags.

Lanes show the observation an agent had when it was last to move (a blank before its first
move): PettingZoo classic games mask every action of an agent that is not to move, so the
current observation of a waiting agent is never one a policy can act on. PettingZoo's
``Dict(observation, action_mask)`` is read as RLlib's ``Dict(action_mask, observations)``
(:mod:`rlblocks.masks`), so the mask of the agent to move is honoured; a move outside it is
still played (the env decides what an illegal move costs) and counted in
:attr:`TurnBasedVectorEnv.illegal_moves`.

Examples:
    >>> from rlblocks.envs.turn_zoo import env
    >>> hub = TurnBasedVectorEnv(env, num_envs=2)
    >>> raw = hub.reset_lanes("shared", seed=0)  # one policy plays both seats
    >>> hub.live_lanes("shared").tolist()  # player_0 moves first in both copies
    [True, False, True, False]
    >>> legal = np.array([np.argmax(v["action_mask"]) for v in raw])  # a legal move each
    >>> res = hub.step({"shared": legal})["shared"]
    >>> res.valid.tolist(), hub.live_lanes("shared").tolist(), hub.illegal_moves
    ([True, False, True, False], [False, True, False, True], 0)
    >>> hub.close()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlblocks.masks import MASK_KEY, mask_form
from rlblocks.multiagent.envs import (
    MultiAgentVectorEnv,
    StepResult,
    _pettingzoo_kind,
    as_parallel_env,
)
from rlblocks.multiagent.returns import checked_step
from rlblocks.nest import tree_index
from rlblocks.spaces import clip_actions
from rlblocks.wrappers.vector_steps import call_copy

__all__ = [
    "TurnBasedVectorEnv",
    "is_turn_based_env",
    "multiagent_vector_env",
]


def is_turn_based_env(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo ``AECEnv`` that is not a parallel env seen through
    ``parallel_to_aec`` (those are stepped in the parallel API)."""
    if _pettingzoo_kind(env) != "aec":
        return False
    from pettingzoo.utils.conversions import parallel_to_aec_wrapper
    from pettingzoo.utils.wrappers import OrderEnforcingWrapper

    return not (
        isinstance(env, OrderEnforcingWrapper) and isinstance(env.env, parallel_to_aec_wrapper)
    )


def multiagent_vector_env(
    make: Callable[[], Any],
    num_envs: int,
    policy_mapping: str = "shared",
    agent_id_one_hot: bool = False,
    clip_actions: bool = True,
    name: str = "env",
    smoothing: int = 100,
    envs: list[Any] | None = None,
) -> MultiAgentVectorEnv:
    """A :class:`TurnBasedVectorEnv` for a turn-based ``AECEnv``, else a
    :class:`~rlblocks.multiagent.envs.MultiAgentVectorEnv` (the same arguments)."""
    first = envs[0] if envs else make()
    cls: type[MultiAgentVectorEnv] = MultiAgentVectorEnv
    if is_turn_based_env(first):
        cls = TurnBasedVectorEnv
    elif not envs:
        try:
            first = as_parallel_env(first)
        except BaseException:
            _close(first)
            raise
    return cls(
        make,
        num_envs,
        policy_mapping,
        agent_id_one_hot,
        clip_actions,
        name,
        smoothing,
        envs=envs if envs else [first],
    )


def _close(env: Any) -> None:
    close = getattr(env, "close", None)
    if close is not None:
        close()


class TurnBasedVectorEnv(MultiAgentVectorEnv):
    """``num_envs`` copies of a turn-based ``AECEnv`` (module docstring); the arguments are
    :class:`~rlblocks.multiagent.envs.MultiAgentVectorEnv`'s.

    Attributes:
        illegal_moves: Moves outside the mover's ``action_mask``, over the whole run.
        finished_games: None, or a list the caller set, to which ``(copy, {agent:
            return})`` is appended as each game ends (the caller takes them out).
    """

    illegal_moves = 0

    #: ``(copy, {agent: return})`` of each game that ended, when a caller set a list here.
    finished_games: list[tuple[int, dict[Any, float]]] | None = None

    def _adapt(self, env: Any) -> Any:
        if not is_turn_based_env(env):
            raise ValueError(
                f"env {self.name!r} gave a {type(env).__name__}, not a turn-based PettingZoo "
                "AECEnv, after a first copy that was one"
            )
        return env

    def _observe(self, e: int, agent: Any) -> Any:
        return mask_form(call_copy(self.name, e, "observe", self.envs[e].observe, agent))

    # --- lanes ------------------------------------------------------------------------------
    def _mover(self, e: int) -> Any:
        return self._live[e][0] if self._live[e] else None

    def _raw(self) -> dict[str, list[Any]]:
        raw = {
            pid: [spec.blank()] * (self.num_envs * len(spec.agents))
            for pid, spec in self.specs.items()
        }
        for e, obs in enumerate(self._obs):
            for a, value in obs.items():
                pid, lane = self._lane(e, a)
                try:
                    raw[pid][lane] = self.specs[pid].value(a, value)
                except ValueError as err:
                    raise ValueError(
                        f"env {self.name!r} (copy {e}) returned an observation for agent {a!r} "
                        f"that does not fit its observation space: {err}"
                    ) from None
        return raw

    def lane_obs(self, policy_id: str, lane: int) -> tuple[Any, Any]:
        """``(agent, observation)`` of lane ``lane`` of ``policy_id`` now: the agent's
        observation (mask form) when it was last to move, None before its first move."""
        spec = self.specs[policy_id]
        e, j = divmod(lane, len(spec.agents))
        agent = spec.agents[j]
        return agent, self._obs[e].get(agent)

    def live_lanes(self, policy_id: str) -> np.ndarray:
        """Bool per lane of ``policy_id``: its agent is to move now."""
        out = np.zeros(self.num_envs * len(self.specs[policy_id].agents), bool)
        for e in range(self.num_envs):
            mover = self._mover(e)
            if mover is not None:
                pid, lane = self._lane(e, mover)
                if pid == policy_id:
                    out[lane] = True
        return out

    # --- stepping ---------------------------------------------------------------------------
    def _settle(self, e: int) -> list[Any]:
        """Plays the ``None`` moves of agents that are done (PettingZoo's dead steps) and
        shows the agent to move its observation; the agents still in the game."""
        env = self.envs[e]
        for _ in range(4 * len(self.agents) + 4):
            agents = list(getattr(env, "agents", []))
            if not agents:
                break
            a = env.agent_selection
            if not (env.terminations.get(a, False) or env.truncations.get(a, False)):
                break
            call_copy(self.name, e, "step", env.step, None)
        agents = list(getattr(env, "agents", []))
        if agents:
            mover = env.agent_selection
            self._lane(e, mover)  # an unknown agent id raises
            self._obs[e][mover] = self._observe(e, mover)
            self._live[e] = [mover]
        else:
            self._live[e] = []
        return agents

    def _reset_env(self, e: int, seed: int | None) -> None:
        call_copy(self.name, e, "reset", self.envs[e].reset, seed=seed)
        self._obs[e] = {}
        self._ep_returns[e] = {}
        self._ep_len[e] = 0
        if not self._settle(e):
            raise ValueError(f"env {self.name!r} (copy {e}) has no agent to move after reset")

    def step(self, actions: dict[str, Any]) -> dict[str, StepResult]:
        """Each copy's agent to move plays its lane's action; games that end reset at once.

        Raises:
            ValueError: The env fails, returns a non-finite reward or an unknown agent.
        """
        lanes = {p: self.num_envs * len(s.agents) for p, s in self.specs.items()}
        rewards = {p: np.zeros(n, np.float32) for p, n in lanes.items()}
        terminated = {p: np.zeros(n, bool) for p, n in lanes.items()}
        truncated = {p: np.zeros(n, bool) for p, n in lanes.items()}
        valid = {p: np.zeros(n, bool) for p, n in lanes.items()}
        late = {p: np.zeros(n, bool) for p, n in lanes.items()}
        starts = {p: np.zeros(n, bool) for p, n in lanes.items()}
        final: dict[str, list[Any]] = {p: [None] * n for p, n in lanes.items()}
        for e, env in enumerate(self.envs):
            mover = self._mover(e)
            before = list(env.agents)
            pid, lane = self._lane(e, mover)
            valid[pid][lane] = True
            act = self.specs[pid].agent_action(mover, tree_index(actions[pid], lane))
            if self.clip_actions:
                act = clip_actions(act, self.action_spaces[mover])
            shown = self._obs[e][mover]
            if isinstance(shown, Mapping) and MASK_KEY in shown and np.ndim(act) == 0:
                mask = np.asarray(shown[MASK_KEY]).reshape(-1)
                if not (0 <= int(act) < mask.size and mask[int(act)]):
                    self.illegal_moves += 1
            call_copy(self.name, e, "step", env.step, act)
            out: tuple[dict[Any, Any], ...] = (
                {},
                dict(env.rewards),
                dict(env.terminations),
                dict(env.truncations),
                {},
            )
            _, rew, terms, truncs, _ = checked_step(self.name, e, out, before, self.agents)
            self._ep_len[e] += 1
            returns = self._ep_returns[e]
            done = set()
            for a in before:
                pid, lane = self._lane(e, a)
                late[pid][lane] = a != mover
                rewards[pid][lane] = rew[a]
                returns[a] = returns.get(a, 0.0) + rew[a]
                term, trunc = terms[a], truncs[a]
                if term or trunc:
                    done.add(a)
                    terminated[pid][lane] = term
                    truncated[pid][lane] = trunc and not term
                    if trunc and not term:  # bootstrapped from its last observation
                        last = self._obs[e].get(a)
                        spec = self.specs[pid]
                        final[pid][lane] = spec.blank() if last is None else spec.value(a, last)
            for a in done:
                self._obs[e].pop(a, None)
            if not self._settle(e):
                self._finish_episode(e)
                self._reset_env(e, None)
                fresh = list(self.envs[e].agents)
            else:
                fresh = [a for a in self.envs[e].agents if a not in before or a in done]
            for a in fresh:
                pid, lane = self._lane(e, a)
                starts[pid][lane] = True
        raw = self._raw()
        return {
            pid: StepResult(
                raw[pid],
                rewards[pid],
                terminated[pid],
                truncated[pid],
                {"final_obs": final[pid], "late": late[pid]},
                valid[pid],
                starts[pid],
                self.live_lanes(pid),
                final[pid],
            )
            for pid in self.specs
        }

    # --- statistics -------------------------------------------------------------------------
    def _finish_episode(self, e: int) -> None:
        super()._finish_episode(e)
        if self.finished_games is not None:
            self.finished_games.append((e, dict(self._ep_returns[e])))

    def metrics(self) -> dict[str, float]:
        """:meth:`MultiAgentVectorEnv.metrics` and ``illegal_moves_total``."""
        return {**super().metrics(), "illegal_moves_total": float(self.illegal_moves)}

    def state_dict(self) -> dict[str, Any]:
        """:meth:`MultiAgentVectorEnv.state_dict` and the illegal move count."""
        return {**super().state_dict(), "illegal_moves": self.illegal_moves}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`."""
        super().load_state_dict(state)
        self.illegal_moves = int(state.get("illegal_moves", 0))
