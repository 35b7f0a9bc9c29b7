"""The one module of rlblocks that imports Ray: everything else (``rlblocks.rllib``, and the
native trainer's ``vector_mode="ray"`` in :mod:`rlblocks.wrappers.ray_vector`) takes Ray's
names from here (tests/test_import_graph.py fails on any other ``import ray``), and starts
Ray through :func:`init_ray`.

Without the ``ray`` extra, importing it raises an ImportError that names the extra.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

try:
    import ray
    from ray.exceptions import RayError, RayTaskError
    from ray.rllib.algorithms.appo import APPOConfig as RLlibAPPOConfig
    from ray.rllib.algorithms.dqn import DQNConfig as RLlibDQNConfig
    from ray.rllib.algorithms.dqn.dqn import DQN, calculate_rr_weights
    from ray.rllib.algorithms.dqn.dqn_learner import DQNLearner
    from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
    from ray.rllib.algorithms.impala import IMPALAConfig as RLlibIMPALAConfig
    from ray.rllib.algorithms.ppo import PPOConfig as RLlibPPOConfig
    from ray.rllib.algorithms.ppo.ppo import (
        LEARNER_RESULTS_KL_KEY,
        LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY,
        LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY,
    )
    from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
    from ray.rllib.algorithms.sac import SACConfig as RLlibSACConfig
    from ray.rllib.algorithms.sac.sac import SAC
    from ray.rllib.algorithms.sac.sac_learner import (
        LOGPS_KEY,
        QF_LOSS_KEY,
        QF_MAX_KEY,
        QF_MEAN_KEY,
        QF_MIN_KEY,
        QF_TWIN_LOSS_KEY,
        TD_ERROR_MEAN_KEY,
    )
    from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner
    from ray.rllib.callbacks.callbacks import RLlibCallback
    from ray.rllib.connectors.connector_v2 import ConnectorV2
    from ray.rllib.core import ALL_MODULES, COMPONENT_ENV_TO_MODULE_CONNECTOR, DEFAULT_MODULE_ID
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.distribution.torch.torch_distribution import TorchDistribution
    from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner
    from ray.rllib.core.learner.training_data import TrainingData
    from ray.rllib.core.rl_module.apis import (
        TARGET_NETWORK_ACTION_DIST_INPUTS,
        InferenceOnlyAPI,
        QNetAPI,
        TargetNetworkAPI,
        ValueFunctionAPI,
    )
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec
    from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
    from ray.rllib.env.env_runner import ENV_STEP_FAILURE, NUM_ENV_STEP_FAILURES_LIFETIME
    from ray.rllib.env.multi_agent_env import MultiAgentEnv
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
    from ray.rllib.env.single_agent_episode import _REWARDS_BOX_SPACE as REWARDS_SPACE
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode
    from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer
    from ray.rllib.evaluation.postprocessing import Postprocessing
    from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
    from ray.rllib.utils.metrics import (
        DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY,
        ENV_RUNNER_RESULTS,
        ENV_RUNNER_SAMPLING_TIMER,
        ENV_STEP_TIMER,
        LAST_TARGET_UPDATE_TS,
        LEARNER_RESULTS,
        LEARNER_UPDATE_TIMER,
        MODULE_TRAIN_BATCH_SIZE_MEAN,
        NUM_AGENT_STEPS_SAMPLED_LIFETIME,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
        NUM_ENV_STEPS_TRAINED,
        NUM_ENV_STEPS_TRAINED_LIFETIME,
        NUM_MODULE_STEPS_TRAINED,
        NUM_MODULE_STEPS_TRAINED_LIFETIME,
        NUM_TARGET_UPDATES,
        REPLAY_BUFFER_ADD_DATA_TIMER,
        REPLAY_BUFFER_RESULTS,
        REPLAY_BUFFER_SAMPLE_TIMER,
        REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
        RLMODULE_INFERENCE_TIMER,
        SYNCH_WORKER_WEIGHTS_TIMER,
        TD_ERROR_KEY,
        TIMERS,
        WEIGHTS_SEQ_NO,
    )
    from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer
    from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
        PrioritizedEpisodeReplayBuffer,
    )
    from ray.rllib.utils.schedules.scheduler import Scheduler
    from ray.rllib.utils.spaces.space_utils import (
        clip_action,
        get_base_struct_from_space,
        unsquash_action,
    )
    from ray.rllib.utils.torch_utils import explained_variance
    from ray.tune.registry import register_env
except ImportError as e:  # pragma: no cover - exercised by tests/test_dependencies.py
    raise ImportError(f'rlblocks.rllib needs Ray: pip install "rlblocks[ray]" ({e})') from e

# Ray's actor table: a debugging API (private), which a Ray release may move (None then)
try:
    from ray._private.state import actors as _actors

    actor_table: Any = _actors
except ImportError:  # pragma: no cover - depends on Ray's internals
    actor_table = None

#: Ray's system config of a local Ray that rlblocks starts: its workers (the env runners) run
#: at the driver's priority. Ray's default lowers them to niceness 15, so that any busy
#: process at the normal priority starves them (the driver's own learner on few cores, or
#: another job): a 1,000-step IMPALA CartPole run beside two busy processes on 2 cores took
#: 293 s, 28 s at niceness 0. A ``RAY_worker_niceness`` set in the environment wins.
LOCAL_RAY_SYSTEM_CONFIG: dict[str, Any] = {"worker_niceness": 0}

#: The environment variables through which ``ray job submit`` hands the job's config to its
#: driver, and tell Ray to let the driver's ``runtime_env`` fields override the job's.
_RAY_JOB_CONFIG = "RAY_JOB_CONFIG_JSON_ENV_VAR"
_RAY_OVERRIDE_JOB_ENV = "RAY_OVERRIDE_JOB_RUNTIME_ENV"


def _job_runtime_env() -> dict[str, Any]:
    """The ``runtime_env`` of the Ray job this driver runs in (``ray job submit
    --runtime-env-json ...``; {} when not submitted as a job)."""
    try:
        job = json.loads(os.environ.get(_RAY_JOB_CONFIG, "") or "{}")
    except ValueError:
        return {}
    found = job.get("runtime_env") if isinstance(job, dict) else None
    return dict(found) if isinstance(found, dict) else {}


def _with_job_py_modules(runtime_env: Mapping[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """``runtime_env`` for ``ray.init`` in this driver, and whether Ray must let it override
    the submitted job's: when both name ``py_modules``, the job's come first in ours."""
    env = dict(runtime_env or {})
    theirs = list(_job_runtime_env().get("py_modules") or [])
    if not theirs or "py_modules" not in env:
        return env, False
    env["py_modules"] = theirs + [m for m in env["py_modules"] if m not in theirs]
    return env, True


def init_ray(address: str | None, runtime_env: dict[str, Any] | None = None) -> None:
    """Connects to ``address`` with ``runtime_env`` as the job's.

    ``address`` None: the ``RAY_ADDRESS`` environment variable's cluster (a submitted job),
    else a new local Ray sized to the machine (:data:`LOCAL_RAY_SYSTEM_CONFIG`), even where a
    cluster started on this machine would answer a plain ``ray.init()`` (``"auto"`` joins
    that one). A submitted job's own ``py_modules`` are kept (Ray refuses a driver's
    ``py_modules`` next to the job's unless told to override: ours then lists theirs
    first)."""
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address:
        kwargs["address"] = address
    elif not os.environ.get("RAY_ADDRESS"):
        kwargs["address"] = "local"
        kwargs["num_cpus"] = os.cpu_count() or 1
        if "RAY_worker_niceness" not in os.environ:
            kwargs["_system_config"] = dict(LOCAL_RAY_SYSTEM_CONFIG)
    env, override = _with_job_py_modules(runtime_env)
    if env:
        kwargs["runtime_env"] = env
    saved = os.environ.get(_RAY_OVERRIDE_JOB_ENV)
    if override:
        os.environ[_RAY_OVERRIDE_JOB_ENV] = "1"
    try:
        ray.init(**kwargs)
    finally:
        if override:
            if saved is None:
                os.environ.pop(_RAY_OVERRIDE_JOB_ENV, None)
            else:
                os.environ[_RAY_OVERRIDE_JOB_ENV] = saved


__all__ = [
    "LOCAL_RAY_SYSTEM_CONFIG",
    "init_ray",
    "MultiAgentEnv",
    "RLModule",
    "RLlibAPPOConfig",
    "RLlibDQNConfig",
    "RLlibIMPALAConfig",
    "RLlibPPOConfig",
    "RLlibSACConfig",
    "RayError",
    "RayTaskError",
    "actor_table",
    "register_env",
    "SACTorchLearner",
    "TorchLearner",
    "DQNTorchLearner",
    "DQNLearner",
    "LOGPS_KEY",
    "QF_LOSS_KEY",
    "QF_MAX_KEY",
    "QF_MEAN_KEY",
    "QF_MIN_KEY",
    "QF_TWIN_LOSS_KEY",
    "TD_ERROR_MEAN_KEY",
    "LAST_TARGET_UPDATE_TS",
    "NUM_TARGET_UPDATES",
    "DQN",
    "calculate_rr_weights",
    "SAC",
    "DEFAULT_MODULE_ID",
    "synchronous_parallel_sample",
    "MultiAgentBatch",
    "SampleBatch",
    "ENV_RUNNER_RESULTS",
    "ENV_RUNNER_SAMPLING_TIMER",
    "LEARNER_RESULTS",
    "LEARNER_UPDATE_TIMER",
    "NUM_AGENT_STEPS_SAMPLED_LIFETIME",
    "NUM_ENV_STEPS_SAMPLED_LIFETIME",
    "REPLAY_BUFFER_ADD_DATA_TIMER",
    "REPLAY_BUFFER_RESULTS",
    "REPLAY_BUFFER_SAMPLE_TIMER",
    "REPLAY_BUFFER_UPDATE_PRIOS_TIMER",
    "SYNCH_WORKER_WEIGHTS_TIMER",
    "TD_ERROR_KEY",
    "TIMERS",
    "ALL_MODULES",
    "DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY",
    "ENTROPY_KEY",
    "LEARNER_RESULTS_KL_KEY",
    "LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY",
    "LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY",
    "MODULE_TRAIN_BATCH_SIZE_MEAN",
    "NUM_ENV_STEPS_TRAINED",
    "NUM_ENV_STEPS_TRAINED_LIFETIME",
    "NUM_MODULE_STEPS_TRAINED",
    "NUM_MODULE_STEPS_TRAINED_LIFETIME",
    "POLICY_LOSS_KEY",
    "PPOTorchLearner",
    "Postprocessing",
    "TrainingData",
    "VF_LOSS_KEY",
    "explained_variance",
    "COMPONENT_ENV_TO_MODULE_CONNECTOR",
    "ENV_STEP_FAILURE",
    "ENV_STEP_TIMER",
    "NUM_ENV_STEP_FAILURES_LIFETIME",
    "REWARDS_SPACE",
    "RLMODULE_INFERENCE_TIMER",
    "WEIGHTS_SEQ_NO",
    "InfiniteLookbackBuffer",
    "RLlibCallback",
    "SingleAgentEnvRunner",
    "SingleAgentEpisode",
    "clip_action",
    "get_base_struct_from_space",
    "unsquash_action",
    "TARGET_NETWORK_ACTION_DIST_INPUTS",
    "Columns",
    "ConnectorV2",
    "EpisodeReplayBuffer",
    "InferenceOnlyAPI",
    "MultiRLModuleSpec",
    "PrioritizedEpisodeReplayBuffer",
    "QNetAPI",
    "RLModuleSpec",
    "Scheduler",
    "TargetNetworkAPI",
    "TorchDistribution",
    "TorchRLModule",
    "ValueFunctionAPI",
    "ray",
]
