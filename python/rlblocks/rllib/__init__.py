"""rlblocks inside RLlib's new API stack (needs the ``ray`` extra: ``pip install "rlblocks[ray]"``).

* :class:`RLBlocksRLModule`: an RLlib ``TorchRLModule`` (with ``ValueFunctionAPI``) whose
  network is the rlblocks model ``ModelCatalog`` builds from an rlblocks model config;
  :class:`RLBlocksAPPORLModule` adds APPO's target network;
  :class:`RLBlocksDQNRLModule` and :class:`RLBlocksSACRLModule` run rlblocks' Q heads in
  RLlib's DQN and SAC.
* :class:`RLBlocksDistribution`: an RLlib ``TorchDistribution`` over any rlblocks action
  distribution.
* :func:`rl_module_spec` for ``config.rl_module(rl_module_spec=...)`` and
  :func:`env_to_module` for ``config.env_runners(env_to_module_connector=...)`` (C++
  flattening and MeanStdFilter, batched over the episodes of an env runner; with
  ``atari=True`` the DeepMind frame pipeline).
* :func:`atari_replay_buffer_config` for DQN's ``config.training(replay_buffer_config=...)``
  with ``env_to_module(..., atari=True, stack_in_episode=False)``: the episode replay
  buffers :class:`FrameStackEpisodeReplayBuffer` /
  :class:`FrameStackPrioritizedEpisodeReplayBuffer` store each frame once and stack the
  frames of each sampled transition.

Example::

    from ray.rllib.algorithms.ppo import PPOConfig
    from rlblocks.rllib import env_to_module, rl_module_spec

    model = {"fcnet_hiddens": [64, 64]}
    config = (PPOConfig().environment("CartPole-v1")
              .rl_module(rl_module_spec=rl_module_spec(model))
              .env_runners(env_to_module_connector=env_to_module(model)))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlblocks.catalog import ModelCatalog
from rlblocks.config import ModelConfig, algorithm_model_config
from rlblocks.rllib._ray import RLModuleSpec
from rlblocks.rllib.connectors import (
    AtariFramesBatched,
    EnvToModule,
    FlatRepeatedObservations,
    FlattenObservationsBatched,
    MeanStdFilterBatched,
    ModelViewObservations,
    env_to_module,
)
from rlblocks.rllib.distribution import RLBlocksDistribution
from rlblocks.rllib.module import (
    MASK_KEY,
    OBS_KEY,
    RLBlocksAPPORLModule,
    RLBlocksRLModule,
    is_mask_space,
    model_views,
)
from rlblocks.rllib.qlearning import RLBlocksDQNRLModule, RLBlocksSACRLModule
from rlblocks.rllib.replay import (
    FrameStackEpisodeReplayBuffer,
    FrameStackPrioritizedEpisodeReplayBuffer,
    atari_replay_buffer_config,
)

__all__ = [
    "AtariFramesBatched",
    "MASK_KEY",
    "OBS_KEY",
    "EnvToModule",
    "FlatRepeatedObservations",
    "FlattenObservationsBatched",
    "FrameStackEpisodeReplayBuffer",
    "FrameStackPrioritizedEpisodeReplayBuffer",
    "MODULE_CLASSES",
    "MeanStdFilterBatched",
    "ModelViewObservations",
    "RLBlocksAPPORLModule",
    "RLBlocksDQNRLModule",
    "RLBlocksDistribution",
    "RLBlocksRLModule",
    "RLBlocksSACRLModule",
    "atari_replay_buffer_config",
    "env_to_module",
    "is_mask_space",
    "model_views",
    "portable_model_config",
    "rl_module_spec",
]


def portable_model_config(model_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The full rlblocks model config, with registered custom model / distribution names
    replaced by their classes (the catalog's registries do not reach Ray worker processes).

    Raises:
        ValueError: An invalid config or an unregistered custom name.
    """
    cfg = ModelConfig.from_dict(model_config).to_dict()
    name = cfg.get("custom_model")
    if isinstance(name, str) and name in ModelCatalog._custom_models:
        cfg["custom_model"] = ModelCatalog._custom_models[name]
    elif isinstance(name, str) and ":" not in name:
        ModelCatalog._resolve_custom_model(name)  # raises the catalog's clear ValueError
    dist = cfg.get("custom_action_dist")
    if isinstance(dist, str) and dist in ModelCatalog._custom_action_dists:
        cfg["custom_action_dist"] = ModelCatalog._custom_action_dists[dist]
    elif isinstance(dist, str) and ":" not in dist:
        raise ValueError(f"custom_action_dist {dist!r} is not registered; registered names: "
                         f"{sorted(ModelCatalog._custom_action_dists)}")
    return cfg


#: The rlblocks module class of each RLlib algorithm ``rl_module_spec`` builds for.
MODULE_CLASSES: dict[str, type] = {
    "PPO": RLBlocksRLModule, "IMPALA": RLBlocksRLModule, "APPO": RLBlocksAPPORLModule,
    "DQN": RLBlocksDQNRLModule, "SAC": RLBlocksSACRLModule,
}


def rl_module_spec(model_config: Mapping[str, Any] | None = None, *,
                   appo: bool = False, algo: str | None = None) -> Any:
    """An ``RLModuleSpec`` of the rlblocks module for ``algo`` and ``model_config``.

    Args:
        model_config: rlblocks model config (``MODEL_DEFAULTS`` keys); None: defaults.
            PPO, APPO and IMPALA default to ``vf_share_layers=False`` (separate value layers,
            as RLlib's new stack; difference 25) unless the config sets the key.
            RLlib's algorithm keys (DQN's ``dueling``, ``double_q``, ``num_atoms``, ...,
            SAC's ``twin_q``) come from the algorithm config itself.
        appo: Same as ``algo="APPO"``.
        algo: ``"PPO"`` (default), ``"IMPALA"``: :class:`RLBlocksRLModule`; ``"APPO"``:
            :class:`RLBlocksAPPORLModule`; ``"DQN"``: :class:`RLBlocksDQNRLModule`;
            ``"SAC"``: :class:`RLBlocksSACRLModule`.

    Raises:
        ValueError: An invalid config (see :meth:`rlblocks.config.ModelConfig.from_dict`)
            or an unknown ``algo``.

    Examples:
        >>> rl_module_spec({"fcnet_hiddens": [64]}, algo="DQN").module_class.__name__
        'RLBlocksDQNRLModule'
    """
    name = "APPO" if appo and algo is None else (algo or "PPO")
    if name not in MODULE_CLASSES or (appo and name != "APPO"):
        raise ValueError(f"rl_module_spec: algo must be one of {sorted(MODULE_CLASSES)}, got "
                         f"{algo!r}{' with appo=True' if appo else ''}")
    return RLModuleSpec(module_class=MODULE_CLASSES[name],
                        model_config=portable_model_config(algorithm_model_config(
                            model_config, name)))
