""":class:`ModelViewObservations`: what the model's view requirements read from the
trajectory (past observations, actions, rewards), put next to the observation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box

from rlblocks.catalog import ModelCatalog
from rlblocks.config import ModelConfig
from rlblocks.rllib._ray import ConnectorV2
from rlblocks.rllib.connectors.observation_spaces import inner_space
from rlblocks.rllib.module import OBS_KEY, is_mask_space, model_views

__all__ = ["ModelViewObservations"]


def _repeat_space(space: gym.Space, n: int) -> gym.Space:
    """The space of ``n`` stacked values of ``space`` (oldest first)."""
    if isinstance(space, gym.spaces.Discrete):
        return gym.spaces.MultiDiscrete(
            np.full(n, int(space.n)), start=np.full(n, int(space.start))
        )
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec)
        return gym.spaces.MultiDiscrete(np.stack([nvec] * n), start=np.stack([space.start] * n))
    assert isinstance(space, Box)
    return Box(np.stack([space.low] * n), np.stack([space.high] * n), dtype=space.dtype)


class ModelViewObservations(ConnectorV2):  # type: ignore[misc]
    """Puts what the model's view requirements read from the trajectory next to the
    observation: ``{"observations": obs, name: [n, ...], ...}`` (an ``action_mask`` stays),
    e.g. ``prev_actions`` / ``prev_rewards`` (``lstm_use_prev_action`` / ``_reward``),
    ``prev_n_actions`` / ``prev_n_rewards`` (``attention_use_n_prev_*``), ``prev_n_obs``
    (the models guide's frame-stacking model). Past observations before the episode start
    repeat its first one, past actions and rewards are zeros (the trajectory view API's
    fill). Each episode's history is kept here, so chunk boundaries change nothing; the
    values are stored in the episodes, so the learner sees the same inputs. Put it after
    the flattening and filter pieces.

    Args:
        input_observation_space: Set by the pipeline.
        input_action_space: Set by the pipeline.
        model_config: rlblocks model config; the catalog model for it tells the views.
        views: Instead of ``model_config``: ``{name: (column, shifts, time_axis)}`` as
            :func:`rlblocks.rllib.module.model_views` returns them.

    Raises:
        ValueError: Both or neither of ``model_config`` / ``views``, or a view of an action
            space that cannot be stacked.
    """

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        model_config: Mapping[str, Any] | None = None,
        views: Mapping[str, tuple[str, list[int], bool]] | None = None,
        **kwargs: Any,
    ) -> None:
        if (model_config is None) == (views is None):
            raise ValueError("ModelViewObservations: give model_config or views")
        self._options = (
            None if model_config is None else ModelConfig.from_dict(model_config).to_dict()
        )
        self.views: dict[str, tuple[str, list[int], bool]] = dict(views or {})
        self._masked = False
        self._history: dict[Any, dict[str, list[Any]]] = {}
        self._seen_t: dict[Any, int] = {}
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        if input_observation_space is None or input_action_space is None:
            return input_observation_space
        self._masked = is_mask_space(input_observation_space)
        inner = inner_space(input_observation_space, self._masked)
        if self._options is not None:
            _, n = ModelCatalog.get_action_dist(input_action_space, self._options)
            model = ModelCatalog.get_model_v2(inner, input_action_space, n, self._options)
            self.views = model_views(model)
        if not self.views:
            return input_observation_space
        spaces = (
            dict(input_observation_space.spaces)
            if isinstance(input_observation_space, gym.spaces.Dict) and self._masked
            else {OBS_KEY: input_observation_space}
        )
        for name, (column, shifts, _) in self.views.items():
            if column == "obs":
                spaces[name] = _repeat_space(inner, len(shifts))
            elif column == "actions":
                if not isinstance(
                    input_action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete, Box)
                ):
                    raise ValueError(
                        f"ModelViewObservations: view {name!r} of actions needs a "
                        f"Discrete, MultiDiscrete or Box action space, got "
                        f"{input_action_space}"
                    )
                spaces[name] = _repeat_space(input_action_space, len(shifts))
            else:
                spaces[name] = Box(-np.inf, np.inf, (len(shifts),), np.float32)
        return gym.spaces.Dict(spaces)

    def recompute_output_action_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        # the views depend on both spaces, whichever of them is set last
        if input_observation_space is not None and input_action_space is not None:
            self._observation_space = self.recompute_output_observation_space(
                input_observation_space, input_action_space
            )
        return input_action_space

    def __call__(self, *, batch: dict[str, Any], episodes: list[Any], **kwargs: Any) -> Any:
        # RLlib passes rl_module, explore, shared_data, metrics...: unused here
        if not self.views:
            return batch
        space = self.observation_space
        keep = {
            c: max(-min(sh) for col, sh, _ in self.views.values() if col == c) + 1
            for c in ("obs", "actions", "rewards")
            if any(col == c for col, _, _ in self.views.values())
        }
        zero_action = np.zeros(
            self.input_action_space.shape or (), self.input_action_space.dtype or np.float32
        )
        for ep in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True):
            if self._seen_t.get(ep.id_) == ep.t:
                continue  # this observation was processed already
            hist = self._history.get(ep.id_)
            if hist is None:
                hist = self._history[ep.id_] = {"obs": [], "actions": [], "rewards": []}
            elif len(ep) > 0:
                hist["actions"].append(np.asarray(ep.get_actions(-1)))
                hist["rewards"].append(np.float32(ep.get_rewards(-1)))
            obs = ep.get_observations(-1)
            hist["obs"].append(obs[OBS_KEY] if self._masked else obs)
            for c, n in keep.items():
                del hist[c][:-n]
            new = dict(obs) if self._masked else {OBS_KEY: obs}
            for name, (column, shifts, _) in self.views.items():
                items = hist[column]
                if column == "obs":  # shift 0 is the current observation
                    picked = [items[max(0, len(items) - 1 + s)] for s in shifts]
                else:  # shift -1 is the last action / reward
                    picked = [
                        items[len(items) + s]
                        if len(items) + s >= 0
                        else (zero_action if column == "actions" else np.float32(0.0))
                        for s in shifts
                    ]
                new[name] = np.stack([np.asarray(p) for p in picked]).astype(
                    np.float32 if column == "rewards" else np.asarray(picked[0]).dtype
                )
            ep.set_observations(at_indices=-1, new_data=new)
            ep.observation_space = space
            self._seen_t[ep.id_] = ep.t
            if ep.is_done:
                del self._history[ep.id_], self._seen_t[ep.id_]
        return batch
