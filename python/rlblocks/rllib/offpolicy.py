"""RLlib's DQN and SAC with their replay on arrays: :class:`RLBlocksDQN`, :class:`RLBlocksSAC`.

RLlib's DQN / SAC iteration (new API stack) samples a few env steps, stores the episode
chunks, draws a batch of n-step transitions as one-step episode objects, runs the learner
connector pipeline over them and updates; with RLlib's defaults (one update of 32-256
transitions per few env steps) the episode objects and the pipeline take most of the time.
These subclasses run the same iteration with the replay on rlblocks' C++ ring buffer
(:class:`~rlblocks.rllib.array_replay.EpisodeArrayReplay`): the sampled chunks' arrays are
stored once, and each update gets its train batch as arrays, handed to the learner group as
a batch (no learner connector pass). Everything else is RLlib's: the sampling/training
ratio (``training_intensity``), ``num_steps_sampled_before_learning_starts``, the learner
and its loss (target updates, double Q, dueling, n-step, prioritized weights and TD-error
priorities), weight syncing, metrics, checkpoints.

The replay buffer is not in checkpoints (as RLlib's is not): a restored run refills it before
it updates again. Where the arrays do not apply (:func:`~rlblocks.rllib.array_replay.
array_replay_refusal`: another buffer type, a range of n-steps, a recurrent module,
multi-agent, or episodes whose observations are not arrays), the iteration is RLlib's own
and :attr:`array_replay_refusal` says why.

Example::

    from ray.rllib.algorithms.dqn import DQNConfig
    from rlblocks.rllib import RLBlocksDQN

    config = DQNConfig(algo_class=RLBlocksDQN).environment("CartPole-v1")
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from rlblocks.rllib._ray import (
    ALL_MODULES,
    DEFAULT_MODULE_ID,
    DQN,
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    REPLAY_BUFFER_ADD_DATA_TIMER,
    REPLAY_BUFFER_SAMPLE_TIMER,
    REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
    SAC,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TD_ERROR_KEY,
    TIMERS,
    MultiAgentBatch,
    SampleBatch,
    calculate_rr_weights,
    synchronous_parallel_sample,
)
from rlblocks.rllib.array_replay import EpisodeArrayReplay, array_replay_refusal

__all__ = ["RLBlocksDQN", "RLBlocksSAC"]

logger = logging.getLogger(__name__)


class _ArrayReplayIteration:
    """The DQN-family iteration on :class:`EpisodeArrayReplay` (shared by DQN and SAC)."""

    def __init__(self, algo: Any) -> None:
        self.algo = algo
        self._copies: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
        self.refusal = array_replay_refusal(algo.config)
        self.replay = None if self.refusal else EpisodeArrayReplay.for_config(algo.config)

    def _lifetime(self, key: str) -> Any:
        return self.algo.metrics.peek((ENV_RUNNER_RESULTS, key), default=0)

    def sample_and_store(self) -> bool:
        """One sampling round stored in the arrays (False: the episodes are not arrays; they
        went to RLlib's buffer, which runs the iterations from now on)."""
        algo = self.algo
        with algo.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            episodes, runner_results = synchronous_parallel_sample(
                worker_set=algo.env_runner_group,
                concat=True,
                sample_timeout_s=algo.config.sample_timeout_s,
                _uses_new_env_runners=True,
                _return_metrics=True,
            )
        algo.metrics.aggregate(runner_results, key=ENV_RUNNER_RESULTS)
        with algo.metrics.log_time((TIMERS, REPLAY_BUFFER_ADD_DATA_TIMER)):
            if self.replay is not None and self.replay.holds_arrays(episodes):
                self.replay.add(episodes)
                return True
            algo.local_replay_buffer.add(episodes)
        self.replay, self.refusal = None, "episodes whose observations or actions are not arrays"
        logger.info("rlblocks: RLlib's replay buffer from now on (%s)", self.refusal)
        return False

    def update(self) -> dict[str, Any]:
        """One update on a batch drawn from the arrays; returns the learner results."""
        algo, replay = self.algo, self.replay
        assert replay is not None
        config = algo.config
        size = config.total_train_batch_size
        with algo.metrics.log_time((TIMERS, REPLAY_BUFFER_SAMPLE_TIMER)):
            beta = (config.replay_buffer_config or {}).get("beta", 0.4)
            batch = replay.sample(size, beta)
        with algo.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            results = algo.learner_group.update(
                batch=MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(batch)}, env_steps=size),
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: self._lifetime(NUM_ENV_STEPS_SAMPLED_LIFETIME),
                    NUM_AGENT_STEPS_SAMPLED_LIFETIME: self._lifetime(
                        NUM_AGENT_STEPS_SAMPLED_LIFETIME
                    ),
                },
            )
            td = [
                np.asarray(r[DEFAULT_MODULE_ID].pop(TD_ERROR_KEY).peek())
                for r in results
                if TD_ERROR_KEY in r.get(DEFAULT_MODULE_ID, {})
            ]
            algo.metrics.aggregate(results, key=LEARNER_RESULTS)
        with algo.metrics.log_time((TIMERS, REPLAY_BUFFER_UPDATE_PRIOS_TIMER)):
            if td:
                replay.update_priorities(np.concatenate(td))
        return results[0]

    def step(self) -> None:
        """RLlib's DQN iteration on the arrays."""
        algo, config = self.algo, self.algo.config
        store, train = calculate_rr_weights(config)
        for _ in range(store):
            if not self.sample_and_store():
                return  # this round's episodes are in RLlib's buffer; RLlib's from now on
        if config.count_steps_by == "agent_steps":
            now = sum(self._lifetime(NUM_AGENT_STEPS_SAMPLED_LIFETIME).values())
        else:
            now = self._lifetime(NUM_ENV_STEPS_SAMPLED_LIFETIME)
        assert self.replay is not None
        if now < config.num_steps_sampled_before_learning_starts or len(self.replay) < max(
            1, config.total_train_batch_size
        ):
            return
        for _ in range(train):
            results = self.update()
        with algo.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            if not self._sync_local():
                algo.env_runner_group.sync_weights(
                    from_worker_or_learner_group=algo.learner_group,
                    policies=set(results) - {ALL_MODULES},
                    global_vars=None,
                    inference_only=True,
                )

    def _local_pairs(self) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
        """(the local env runner's module tensors, the learner's tensors of the same names)
        when both live in this process and no remote runner needs the weights, else None."""
        group, learner = self.algo.env_runner_group, self.algo.learner_group._learner
        runner = group.local_env_runner
        if learner is None or runner is None or group.num_remote_workers():
            return None
        src = learner.module[DEFAULT_MODULE_ID].state_dict(keep_vars=True)
        dst = runner.module.state_dict(keep_vars=True)
        if not dst or any(k not in src or src[k].shape != v.shape for k, v in dst.items()):
            return None
        return list(dst.values()), [src[k] for k in dst]

    def _sync_local(self) -> bool:
        """What ``sync_weights`` does for a local runner and learner (the runner's module
        takes the learner's inference weights and weights' sequence number), as in-place
        tensor copies instead of a state dict through Ray's object store; False where it
        does not apply."""
        if self._copies is None:
            self._copies = self._local_pairs() or ([], [])
        dst, src = self._copies
        if not dst:
            return False
        with torch.no_grad():
            torch._foreach_copy_(dst, src)
        learner = self.algo.learner_group._learner
        self.algo.env_runner_group.local_env_runner._weights_seq_no = learner._weights_seq_no
        return True


class _ArrayReplayAlgorithm:
    """What :class:`RLBlocksDQN` and :class:`RLBlocksSAC` add to RLlib's classes."""

    def setup(self, config: Any) -> None:
        super().setup(config)  # type: ignore[misc]
        self._arrays = _ArrayReplayIteration(self)

    @property
    def array_replay_refusal(self) -> str | None:
        """Why the iteration is RLlib's own (None: it runs on the arrays)."""
        return self._arrays.refusal

    def training_step(self) -> None:
        if self._arrays.replay is None:
            return super().training_step()  # type: ignore[misc]
        self._arrays.step()
        return None


class RLBlocksDQN(_ArrayReplayAlgorithm, DQN):  # type: ignore[misc]
    """RLlib's DQN with its replay on arrays (module doc): ``DQNConfig(algo_class=RLBlocksDQN)``."""


class RLBlocksSAC(_ArrayReplayAlgorithm, SAC):  # type: ignore[misc]
    """RLlib's SAC with its replay on arrays (module doc): ``SACConfig(algo_class=RLBlocksSAC)``."""
