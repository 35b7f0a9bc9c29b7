"""SubEnvSteps makes the calls SyncVectorEnv.step makes, in both autoreset modes."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from rlblocks.train import DQNTrainer
from rlblocks.wrappers.sub_envs import SubEnvSteps
from rlblocks.wrappers.vector_steps import VectorSteps


def _venv(mode: AutoresetMode) -> SyncVectorEnv:
    # short episodes: both terminations (env 0 always pushes right and falls) and
    # truncations (the others, at the time limit)
    return SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=12)] * 3, autoreset_mode=mode
    )


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_sub_env_steps_equal_the_vector_envs_own_steps(mode: AutoresetMode) -> None:
    """Same observations, rewards, ends and final observations as ``venv.step`` over
    episode ends of both kinds; the vector env's own ``step`` then carries on as if it had
    made every step itself."""
    plain, direct = _venv(mode), _venv(mode)
    obs_a, _ = plain.reset(seed=3)
    obs_b, _ = direct.reset(seed=3)
    np.testing.assert_array_equal(obs_a, obs_b)
    stepper = SubEnvSteps(direct)
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    for t in range(60):
        actions = np.array([1, *rng.integers(0, 2, 2)])
        a = plain.step(actions)
        b = stepper.step(actions) if t < 50 else direct.step(actions)  # then its own step
        obs_b = np.stack(b[0]) if t < 50 else b[0]
        np.testing.assert_array_equal(a[0], obs_b)
        for x, y in zip(a[1:4], b[1:4], strict=True):
            np.testing.assert_array_equal(x, y)
        ends["terminated"] += int(a[2].sum())
        ends["truncated"] += int(a[3].sum())
        if t < 50:
            finals = b[5]
            done = a[2] | a[3]
            for i in range(3):
                if mode == AutoresetMode.SAME_STEP and done[i]:
                    np.testing.assert_array_equal(finals[i], a[4]["final_obs"][i])
                else:
                    assert finals[i] is None
    assert ends["terminated"] and ends["truncated"]


def test_only_a_plain_sync_vector_env_is_stepped_directly() -> None:
    venv = _venv(AutoresetMode.DISABLED)
    assert not SubEnvSteps.supports(venv)
    with pytest.raises(ValueError, match="NEXT_STEP or SAME_STEP"):
        SubEnvSteps(venv)
    assert SubEnvSteps.supports(_venv(AutoresetMode.SAME_STEP))


def test_off_policy_trainer_runs_the_same_with_and_without_direct_steps() -> None:
    """The native trainer's direct sub-env steps change nothing it records."""
    cfg = {
        "env": "CartPole-v1",
        "num_envs": 2,
        "timesteps_per_iteration": 300,
        "learning_starts": 100,
        "seed": 5,
        "model": {"fcnet_hiddens": [16]},
    }
    results = []
    for direct in (True, False):
        trainer = DQNTrainer(cfg)
        assert trainer.steps.sub_envs is True
        if not direct:
            trainer.steps = VectorSteps(trainer.venv, "CartPole-v1", sub_envs=False)
        rows = [trainer.train() for _ in range(2)]
        results.append(
            [(r["timesteps_total"], r["episodes_total"], r["episode_return_mean"]) for r in rows]
            + [float(p.detach().sum()) for p in trainer.learner.q.parameters()]
        )
        trainer.close()
    assert results[0] == results[1]
