"""``EpisodeArrayReplay`` (RLlib episode chunks in the C++ ring buffer) and the DQN / SAC
iterations that use it.

The buffer is checked against n-step transitions computed by hand from the full episodes the
chunks were cut from; the algorithms against RLlib's own learner connector output (same
columns and dtypes) and by learning.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("ray")

from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: E402
from rlblocks.rllib.array_replay import EpisodeArrayReplay, array_replay_refusal  # noqa: E402

pytestmark = pytest.mark.native


def _chunks(lanes: int, rounds: int, cut_every: int, seed: int) -> tuple[list[list[Any]], list]:
    """Episodes of ``lanes`` sub-envs stepped together, cut every ``cut_every`` steps as a
    runner's ``sample()`` cuts them: the chunks of each round, and every episode's full record
    ``(observations, actions, rewards, terminated, truncated)`` (observations [T+1, 2])."""
    rng = np.random.default_rng(seed)
    full: list[dict] = []

    def start() -> tuple[SingleAgentEpisode, dict]:
        rec = {"obs": [rng.normal(size=2).astype(np.float32)], "act": [], "rew": []}
        rec.update(term=False, trunc=False)
        full.append(rec)
        return SingleAgentEpisode(observations=[rec["obs"][0]]), rec

    running = [start() for _ in range(lanes)]
    rounds_out = []
    for _ in range(rounds):
        out = []
        for lane in range(lanes):
            ep, rec = running[lane]
            for _ in range(cut_every):
                o = rng.normal(size=2).astype(np.float32)
                a, r = int(rng.integers(3)), float(rng.normal())
                term, trunc = bool(rng.random() < 0.08), bool(rng.random() < 0.04)
                ep.add_env_step(o, a, r, terminated=term, truncated=trunc)
                rec["obs"].append(o), rec["act"].append(a), rec["rew"].append(r)
                if term or trunc:
                    rec.update(term=term, trunc=trunc and not term)
                    out.append(ep.to_numpy())
                    ep, rec = start()
            running[lane] = (ep.cut(), rec)
            out.append(ep.to_numpy())
        rng.shuffle(out)  # a runner's chunk order is not the envs' order
        rounds_out.append(out)
    return rounds_out, full


def _expected(full: list[dict], n: int, gamma: float) -> dict[tuple, tuple]:
    """Every sampleable n-step transition, by its observation: ``(action, return, next
    observation, terminated, n)``. A step is sampleable once its next observation is stored
    (an ongoing episode's newest observation is stored with its next chunk); the n steps stop
    at the episode's end or at its newest stored step."""
    out = {}
    for rec in full:
        obs, steps = rec["obs"], len(rec["act"])
        done = rec["term"] or rec["trunc"]
        last = steps if done else steps - 1  # steps whose next observation is stored
        for t in range(last):
            k = min(n, last - t)
            ret = sum(gamma**i * rec["rew"][t + i] for i in range(k))
            end = rec["term"] and t + k == steps
            out[tuple(obs[t])] = (rec["act"][t], ret, obs[t + k], end, k)
    return out


@pytest.mark.parametrize("n_step", [1, 3])
def test_samples_exactly_the_n_step_transitions_of_the_episodes(n_step):
    gamma = 0.9
    rounds, full = _chunks(lanes=4, rounds=12, cut_every=5, seed=n_step)
    replay = EpisodeArrayReplay(10_000, num_rings=4, n_step=n_step, gamma=gamma, seed=0)
    for chunks in rounds:
        replay.add(chunks)
    want = _expected(full, n_step, gamma)
    assert len(replay) == len(want)
    seen = set()
    for _ in range(200):
        b = replay.sample(64)
        assert b["weights"].tolist() == [1.0] * 64 and not b["truncateds"].any()
        for i in range(64):
            key = tuple(b["obs"][i])
            action, ret, next_obs, end, k = want[key]
            assert int(b["actions"][i]) == action
            assert int(b["n_step"][i]) == (n_step if end else k)  # (unused after a terminal)
            assert b["rewards"][i] == pytest.approx(ret, rel=1e-5, abs=1e-5)
            assert np.array_equal(b["new_obs"][i], next_obs)
            assert bool(b["terminateds"][i]) == end
            seen.add(key)
    assert seen == set(want)  # 12.8k draws over a few hundred transitions reach them all


def test_a_runner_recreated_mid_episode_frees_its_rings():
    """Episodes that stop arriving (their runner died) give their rings to new ones."""
    replay = EpisodeArrayReplay(1000, num_rings=2, n_step=1, seed=0)
    for _ in range(3):  # three generations of 2 runners' episodes, none finished
        rounds, _ = _chunks(lanes=2, rounds=1, cut_every=3, seed=7)
        eps = [ep for ep in rounds[0] if not ep.is_done]
        replay.add(eps)
    assert len(replay) > 0 and len(replay._open) <= 2


def test_prioritized_sampling_follows_the_td_errors():
    rounds, _ = _chunks(lanes=1, rounds=1, cut_every=40, seed=1)
    replay = EpisodeArrayReplay(1000, num_rings=1, prioritized=True, alpha=1.0, seed=0)
    replay.add(rounds[0])
    b = replay.sample(8)
    assert b["weights"].tolist() == [1.0] * 8  # new steps share the largest priority
    td = np.full(8, 1e-9)
    td[0] = 100.0  # one transition's priority dwarfs the rest
    replay.update_priorities(td)
    hot = b["obs"][0]
    b = replay.sample(32, beta=1.0)
    share = np.mean((b["obs"] == hot).all(axis=1))
    assert share > 0.5
    # (N P(i)) ** -beta over its largest value: the hot transition has the smallest weight
    assert b["weights"][(b["obs"] == hot).all(axis=1)].max() < b["weights"].max() <= 1.0
    replay.sample(4)
    with pytest.raises(ValueError, match="td_errors"):
        replay.update_priorities(np.ones(3))


def _dqn_config(**training: Any) -> Any:
    import rlblocks.envs  # noqa: F401  (registers the zoo)
    from ray.rllib.algorithms.dqn import DQNConfig
    from rlblocks.rllib import RLBlocksDQN, VectorEnvRunner, env_to_module, rl_module_spec

    model = {"fcnet_hiddens": [16]}
    return (
        DQNConfig(algo_class=RLBlocksDQN)
        .environment("rlblocks/DictCartPole-v0")
        .rl_module(rl_module_spec=rl_module_spec(model, algo="DQN"))
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=2,
            env_to_module_connector=env_to_module(model),
            env_runner_cls=VectorEnvRunner,
        )
        .training(num_steps_sampled_before_learning_starts=64, train_batch_size=32, **training)
        .reporting(min_sample_timesteps_per_iteration=100)
        .learners(num_learners=0)
        .debugging(seed=0)
    )


def test_dqn_iteration_updates_and_keeps_the_local_runner_in_sync():
    """Updates run on the arrays and the local runner acts with the learner's weights
    (copied in place) and sequence number after every iteration."""
    algo = _dqn_config().build_algo()
    try:
        assert algo.array_replay_refusal is None
        for _ in range(3):
            result = algo.train()
            learner = algo.learner_group._learner
            runner = algo.env_runner
            assert learner._weights_seq_no > 0
            assert runner._weights_seq_no == learner._weights_seq_no
            theirs = learner.module["default_policy"].state_dict()
            for key, value in runner.module.state_dict().items():
                assert torch.equal(value, theirs[key]), key
        assert len(algo._arrays.replay) > 64
        assert np.isfinite(float(result["learners"]["default_policy"]["qf_loss"]))
    finally:
        algo.stop()


def test_a_refused_config_runs_rllibs_iteration():
    algo = _dqn_config(n_step=(1, 3)).build_algo()
    try:
        assert "n_step" in algo.array_replay_refusal
        algo.train()
        assert algo._arrays.replay is None and algo.local_replay_buffer.get_num_timesteps() > 0
    finally:
        algo.stop()


def test_refusals_name_what_the_arrays_do_not_cover():
    assert array_replay_refusal(_dqn_config()) is None
    assert "n_step" in array_replay_refusal(_dqn_config(n_step=(1, 3)))
    buffer = {"type": "MultiAgentEpisodeReplayBuffer", "capacity": 100}
    assert "replay buffer" in array_replay_refusal(_dqn_config(replay_buffer_config=buffer))
    # a key the arrays would ignore keeps RLlib's buffer, which reads it
    unknown = {"type": "EpisodeReplayBuffer", "storage_unit": "episodes"}
    refusal = array_replay_refusal(_dqn_config(replay_buffer_config=unknown))
    assert "'storage_unit'" in refusal
    sizes = {"type": "EpisodeReplayBuffer", "capacity": 100, "batch_size_B": 8}
    assert array_replay_refusal(_dqn_config(replay_buffer_config=sizes)) is None


def test_train_batch_has_the_columns_and_dtypes_of_rllibs_learner_connector():
    """The batch handed to the learner is what RLlib's pipeline makes of its own buffer's
    sample: same columns, dtypes and shapes."""
    from ray.rllib.utils.replay_buffers.prioritized_episode_buffer import (
        PrioritizedEpisodeReplayBuffer,
    )

    config = _dqn_config(n_step=3)
    algo = config.build_algo()
    try:
        episodes = algo.env_runner.sample(num_timesteps=200, random_actions=True)
        rllib = PrioritizedEpisodeReplayBuffer(capacity=1000)
        rllib.add(episodes)
        sampled = rllib.sample(num_items=32, n_step=3, gamma=0.99, beta=0.4, sample_episodes=True)
        learner = algo.learner_group._learner
        theirs = learner._learner_connector(
            rl_module=learner.module, batch={}, episodes=sampled, shared_data={}
        )["default_policy"]
        replay = EpisodeArrayReplay(1000, num_rings=2, n_step=3, prioritized=True)
        replay.add(episodes)
        ours = replay.sample(32)
        for key, value in ours.items():
            assert key in theirs
            t = theirs[key].numpy() if hasattr(theirs[key], "numpy") else np.asarray(theirs[key])
            assert (value.shape, value.dtype) == (t.shape, t.dtype), key
    finally:
        algo.stop()
