"""Torch's intra-op threads where a policy acts: one thread for a small model at a
rollout's batch, the caller's count for large work, and the caller's setting restored."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from rlblocks.train.policy import Policy
from rlblocks.train.trainer_config import PPOConfig

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def threads_seen(hiddens: list[int], rows: int, caller: int) -> tuple[list[int], int]:
    """(threads the model's forward saw in ``act`` and ``values``, threads after) with
    ``caller`` threads set before."""
    pol = Policy(
        OBS, gym.spaces.Discrete(2), PPOConfig.from_dict({"model": {"fcnet_hiddens": hiddens}})
    )
    seen: list[int] = []
    pol.model.register_forward_pre_hook(lambda *args: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(caller)
        obs = np.zeros((rows, 4), np.float32)
        pol.act(obs, [])
        pol.values(obs, [])
        return seen, torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_a_small_model_acts_on_one_thread_and_the_callers_count_is_restored():
    seen, after = threads_seen([64, 64], 8, caller=3)
    assert seen == [1, 1] and after == 3


def test_large_work_keeps_the_callers_threads():
    seen, after = threads_seen([1024, 1024], 64, caller=2)
    assert seen == [2, 2] and after == 2


def test_a_trainers_num_threads_also_sets_numpys_blas_threads() -> None:
    """The fast paths multiply small matrices with numpy: its BLAS gets the run's
    ``num_threads`` too (rlblocks.train.process_threads); None leaves both alone."""
    from rlblocks.train import PPOTrainer
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas() -> set[int]:
        return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}

    before = torch.get_num_threads()
    config = {"env": "CartPole-v1", "num_envs": 1, "train_batch_size": 8}
    try:
        with threadpool_limits(limits=2, user_api="blas"):  # the caller's limit, restored after
            assert blas() == {2}
            PPOTrainer({**config, "num_threads": None}).close()
            assert blas() == {2}
            PPOTrainer({**config, "num_threads": 1}).close()
            assert blas() == {1} and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
