"""The module of an RLlib run's checkpoint as a :class:`~rlblocks.train.play.LaneActor`, so
that ``rlblocks evaluate`` plays an RLlib run through the evaluation loops of
:mod:`rlblocks.train.play`, as it plays native and exported policies.

:class:`RLModuleActor` feeds the module the observations as the run's env-to-module
connector made them (a multi-agent run's flattening gives them to the loop) and turns its
actions into the env's (unsquashed to the Box bounds or clipped, as RLlib's env runner
does); :class:`EpisodeModuleActor` adds a single-agent run's connector pieces, which read an
RLlib episode (past observations, actions and rewards): it keeps one, fed with the rewards
the loop carries as ``prev_rewards``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlblocks.nest import tree_index
from rlblocks.rllib._ray import Columns, SingleAgentEpisode

__all__ = ["EpisodeModuleActor", "RLModuleActor"]

#: The timestep ``explore=True`` explores at (the end of any epsilon schedule).
_LATE = 2**62


def _batched(value: Any, time_axis: bool) -> Any:
    """One processed observation as a batch of one (``[1, 1, ...]`` with a time axis)."""
    if isinstance(value, dict):
        return {k: _batched(v, time_axis) for k, v in value.items()}
    t = torch.as_tensor(np.asarray(value))[None]
    return t[:, None] if time_axis else t


def _stack(values: list[Any]) -> Any:
    """Batches of one, concatenated (dicts key by key)."""
    if isinstance(values[0], dict):
        return {k: _stack([v[k] for v in values]) for k in values[0]}
    return torch.cat(values)


def _numpy(actions: Any) -> Any:
    """A batch of actions (nested dicts and tuples too) as numpy."""
    if isinstance(actions, dict):
        return {k: _numpy(v) for k, v in actions.items()}
    if isinstance(actions, (tuple, list)):
        return type(actions)(_numpy(a) for a in actions)
    return actions.detach().cpu().numpy()


class RLModuleActor:
    """An RLlib module acting for its lanes on the observations its connector made.

    Args:
        module: The checkpoint's ``RLModule``.
        explore: Sample (``forward_exploration`` at the end of any epsilon schedule) rather
            than take the deterministic action.
        to_env: ``to_env(actions, struct)``: RLlib's ``unsquash_action`` or ``clip_action``
            (None: the module's actions as they are).
        struct: The action space's struct (``get_base_struct_from_space``) for ``to_env``.
    """

    def __init__(
        self,
        module: Any,
        explore: bool = False,
        to_env: Callable[[Any, Any], Any] | None = None,
        struct: Any = None,
    ) -> None:
        self.module, self.explore = module, bool(explore)
        self.to_env, self.struct = to_env, struct
        self._initial = {k: np.asarray(v) for k, v in module.get_initial_state().items()}
        self.dist_cls = (
            module.get_exploration_action_dist_cls()
            if explore
            else module.get_inference_action_dist_cls()
        )

    def initial_state(self, n: int) -> list[Any] | None:
        """The module's initial state for ``n`` lanes, key by key (None: stateless)."""
        if not self._initial:
            return None
        return [np.repeat(v[None], n, axis=0) for v in self._initial.values()]

    def initial_prev(self, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """None, None: the module reads what its connector made."""
        return None, None

    def observe(self, raw: list[Any], x: Any, fresh: np.ndarray | None) -> Any:
        """The observations as they come (the connector already ran)."""
        return raw

    def module_actions(self, x: list[Any], state: Any) -> tuple[Any, Any]:
        """One forward pass for the lanes ``x``: ``(actions, state_out)``, the module's
        actions as numpy (before ``to_env``)."""
        stateful = bool(self._initial)
        batch: dict[str, Any] = {Columns.OBS: _stack([_batched(v, stateful) for v in x])}
        if stateful:
            keys = self._initial
            batch[Columns.STATE_IN] = {
                k: torch.from_numpy(np.asarray(s)) for k, s in zip(keys, state, strict=True)
            }
        with torch.no_grad():
            out = (
                self.module.forward_exploration(batch, t=_LATE)
                if self.explore
                else self.module.forward_inference(batch)
            )
        if Columns.ACTIONS in out:  # DQN: epsilon-greedy / greedy in the module
            return _numpy(out[Columns.ACTIONS]), state
        logits = out[Columns.ACTION_DIST_INPUTS]
        if stateful:
            logits = logits[:, 0]
            state = [out[Columns.STATE_OUT][k].detach().cpu().numpy() for k in self._initial]
        dist = self.dist_cls.from_logits(logits)
        return _numpy(dist.sample() if self.explore else dist.to_deterministic().sample()), state

    def act(self, x: Any, state: Any, pa: Any, pr: Any) -> tuple[Any, Any]:
        """The env's actions for the lanes and the module's state after them."""
        actions, state_out = self.module_actions(x, state)
        if self.to_env is not None:
            actions = self.to_env(actions, self.struct)
        return actions, state_out

    def restart(self, state: list[Any], fresh: np.ndarray) -> list[Any]:
        """A copy of ``state`` with the rows ``fresh`` at the initial state."""
        out = [np.array(s) for s in state]
        for s, s0 in zip(out, self._initial.values(), strict=True):
            s[fresh] = s0
        return out


class EpisodeModuleActor(RLModuleActor):
    """A single-agent run's module behind its env-to-module connector pieces (for one lane):
    the pieces read an RLlib ``SingleAgentEpisode`` that this actor keeps, the raw
    observations, the module's actions and the rewards (the loop's ``prev_rewards``).

    Args:
        module, explore, to_env, struct: As :class:`RLModuleActor`'s.
        pieces: The connector pieces (their spaces set, a filter frozen).
        observation_space, action_space: The env's.
    """

    def __init__(
        self,
        module: Any,
        pieces: list[Any],
        observation_space: Any,
        action_space: Any,
        explore: bool = False,
        to_env: Callable[[Any, Any], Any] | None = None,
        struct: Any = None,
    ) -> None:
        super().__init__(module, explore, to_env, struct)
        self.pieces = pieces
        self.spaces = observation_space, action_space
        self.episode: Any = None
        self._pending: Any = None
        self._last: Any = None

    def initial_prev(self, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """No previous actions; a previous reward per lane (the episode's rewards)."""
        return None, np.zeros((n, 1))

    def observe(self, raw: list[Any], x: Any, fresh: np.ndarray | None) -> Any:
        """Starts the episode at a reset (``x`` None); else holds the observation until
        :meth:`act` gives the reward that came with it."""
        if x is None:
            self.episode = SingleAgentEpisode(
                observation_space=self.spaces[0], action_space=self.spaces[1]
            )
            self.episode.add_env_reset(observation=raw[0])
            self._pending = None
        else:
            self._pending = raw[0]
        return raw

    def act(self, x: Any, state: Any, pa: Any, pr: Any) -> tuple[Any, Any]:
        """Adds the last step to the episode, runs the pieces, then the module."""
        if self._pending is not None:
            self.episode.add_env_step(
                observation=self._pending, action=self._last, reward=float(pr[0, -1])
            )
            self._pending = None
        for piece in self.pieces:
            piece(
                rl_module=self.module,
                batch={},
                episodes=[self.episode],
                explore=self.explore,
                shared_data={},
            )
        actions, state_out = self.module_actions([self.episode.get_observations(-1)], state)
        self._last = tree_index(actions, 0)
        if self.to_env is not None:
            actions = self.to_env(actions, self.struct)
        return actions, state_out
