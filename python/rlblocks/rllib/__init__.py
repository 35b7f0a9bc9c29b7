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
* :class:`VectorEnvRunner` for ``config.env_runners(env_runner_cls=...)``: RLlib's
  single-agent env runner with a sampling loop on batched arrays (one C++ preprocessing
  call and one module call per step, the episodes built once per ``sample()``).
* :class:`RLBlocksPPOTorchLearner` for ``config.learners(learner_class=...)``: RLlib's PPO
  learner whose update runs in closed form for the default fully connected model.
* :class:`RLBlocksDQN` / :class:`RLBlocksSAC` for ``DQNConfig(algo_class=...)`` /
  ``SACConfig(algo_class=...)``: RLlib's DQN / SAC iteration with the replay on rlblocks' C++
  ring buffer and the train batch handed to the learner as arrays.
* :func:`multi_rl_module_spec` (an rlblocks module per policy) and
  :class:`MultiAgentEnvToModule` (one C++ flattening call per policy over all agents of all
  episodes) for multi-agent configs; :mod:`~rlblocks.rllib.multiagent_env` wraps a
  PettingZoo env so that agents of one policy whose spaces differ share its union space.
* :func:`atari_replay_buffer_config` for DQN's ``config.training(replay_buffer_config=...)``
  with ``env_to_module(..., atari=True, stack_in_episode=False)``: the episode replay
  buffers :class:`FrameStackEpisodeReplayBuffer` /
  :class:`FrameStackPrioritizedEpisodeReplayBuffer` store each frame once and stack the
  frames of each sampled transition.

``rlblocks train --backend rllib`` lives in modules this face does not import:
:mod:`~rlblocks.rllib.algo_config` (an rlblocks config as an RLlib ``AlgorithmConfig``),
:mod:`~rlblocks.rllib.trainer` (running it), :mod:`~rlblocks.rllib.checkpoints` (the run
directory) and :mod:`~rlblocks.rllib.evaluate` (Ray-less evaluation of a run).

Example::

    from ray.rllib.algorithms.ppo import PPOConfig
    from rlblocks.rllib import env_to_module, rl_module_spec

    model = {"fcnet_hiddens": [64, 64]}
    config = (PPOConfig().environment("CartPole-v1")
              .rl_module(rl_module_spec=rl_module_spec(model))
              .env_runners(env_to_module_connector=env_to_module(model)))
"""

from __future__ import annotations

from rlblocks.rllib.connectors import (
    AtariFramesBatched,
    EnvToModule,
    FlatRepeatedObservations,
    FlattenObservationsBatched,
    MeanStdFilterBatched,
    ModelViewObservations,
    MultiAgentEnvToModule,
    MultiAgentFlattenObservations,
    env_to_module,
)
from rlblocks.rllib.distribution import RLBlocksDistribution
from rlblocks.rllib.env_runner import VectorEnvRunner
from rlblocks.rllib.learner import (
    RLBlocksDQNTorchLearner,
    RLBlocksPPOTorchLearner,
    RLBlocksSACTorchLearner,
)
from rlblocks.rllib.module import (
    MASK_KEY,
    OBS_KEY,
    RLBlocksAPPORLModule,
    RLBlocksRLModule,
    is_mask_space,
    model_views,
)
from rlblocks.rllib.offpolicy import RLBlocksDQN, RLBlocksSAC
from rlblocks.rllib.qlearning import RLBlocksDQNRLModule, RLBlocksSACRLModule
from rlblocks.rllib.replay import (
    FrameStackEpisodeReplayBuffer,
    FrameStackPrioritizedEpisodeReplayBuffer,
    atari_replay_buffer_config,
)
from rlblocks.rllib.spec import (
    MODULE_CLASSES,
    multi_rl_module_spec,
    portable_model_config,
    rl_module_spec,
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
    "MultiAgentEnvToModule",
    "MultiAgentFlattenObservations",
    "RLBlocksAPPORLModule",
    "RLBlocksDQNRLModule",
    "RLBlocksDistribution",
    "RLBlocksRLModule",
    "RLBlocksDQN",
    "RLBlocksDQNTorchLearner",
    "RLBlocksPPOTorchLearner",
    "RLBlocksSAC",
    "RLBlocksSACTorchLearner",
    "RLBlocksSACRLModule",
    "VectorEnvRunner",
    "atari_replay_buffer_config",
    "env_to_module",
    "is_mask_space",
    "model_views",
    "multi_rl_module_spec",
    "portable_model_config",
    "rl_module_spec",
]
