"""PPO against Stable-Baselines3's PPO (issue 46: rl-zoo3's Hopper entry, every setting
carried over - ``hopper_ppo``'s first version - stood still at about 1,000 here where the
zoo's run hops to 2,410; SB3 with it did no better side by side).

From the same weights and the same rollout, our advantages / value targets (GAE), one
iteration of minibatch updates (clipped surrogate, unclipped value loss, entropy bonus,
gradient-norm clipping, Adam) and the resulting weights equal SB3's up to float rounding,
through the closed form and through autograd. Our rollout on a time-limited env equals SB3's
``collect_rollouts`` under ``VecNormalize(norm_reward=True)``: the scaled, clipped rewards
(the running discounted return restarting at episode ends), the bootstrap of truncated
episodes (``gamma * V(final_obs)`` added to the scaled reward) and so the advantages. Our
``MeanStdFilter`` keeps the statistic of SB3's observation ``RunningMeanStd``.

The differences that remain are by design and measured here, not hidden: SB3 standardises
each minibatch's advantages by the unbiased std (``Tensor.std``), ours by the population std
(a factor ``sqrt((n - 1) / n)``: 0.984 on the zoo's minibatches of 32); the observation
filter is RLlib's (unbiased variance, ``(x - mean) / (std + 1e-6)``, no prior) where
VecNormalize divides by ``sqrt(var + 1e-8)`` of the population variance with a prior count of
1e-4 at variance 1: the same statistic after the first steps (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.filters import MeanStdFilter
from rlblocks.train.learners.ppo import PPOLearner, compute_gae
from rlblocks.train.policy import Policy
from rlblocks.train.runner import SampleBatch
from rlblocks.train.trainer_config import PPOConfig
from sb3_twins import linears

sb3 = pytest.importorskip("stable_baselines3")

OBS, ACT, T, N, MB, EPOCHS, HIDDEN = 5, 2, 16, 2, 8, 3, [24, 16]
GAMMA, LAMBDA = 0.99, 0.95
BOX_OBS = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
BOX_ACT = gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)


class _Drift(gym.Env):
    """Observations and rewards that do not depend on the actions (so both libraries see the
    same episodes whatever they draw): terminates when the step counter reaches ``end``,
    truncates at ``limit`` steps."""

    observation_space, action_space = BOX_OBS, BOX_ACT

    def __init__(self, end: int = 1000, limit: int = 7, scale: float = 1.0) -> None:
        self.end, self.limit, self.scale, self.t, self.k = end, limit, scale, 0, 0

    def _obs(self) -> np.ndarray:
        return np.sin(0.7 * self.k + np.arange(OBS, dtype=np.float32) * 1.3).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        self.k += 1
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        self.k += 1
        reward = self.scale * float(np.cos(0.3 * self.k)) + 0.5
        return self._obs(), reward, self.t >= self.end, self.t >= self.limit, {}


def _sb3_ppo(env: Any, normalize_advantage: bool = False, **kwargs: Any) -> Any:
    from stable_baselines3.common.logger import configure

    settings: dict[str, Any] = dict(
        n_steps=T, batch_size=MB, n_epochs=EPOCHS, gamma=GAMMA, gae_lambda=LAMBDA,
        ent_coef=0.3, vf_coef=0.8, max_grad_norm=0.5, clip_range=0.2, learning_rate=1e-3,
        normalize_advantage=normalize_advantage,
        policy_kwargs=dict(net_arch=dict(pi=HIDDEN, vf=HIDDEN), activation_fn=torch.nn.ReLU,
                           ortho_init=False, log_std_init=-0.5),
    )  # fmt: skip
    settings.update(kwargs)
    model = sb3.PPO("MlpPolicy", env, device="cpu", seed=0, **settings)
    model.set_logger(configure(None, []))
    return model


def _our_policy(**config: Any) -> tuple[Policy, PPOConfig]:
    cfg = PPOConfig(
        env="Pendulum-v1", num_envs=N, train_batch_size=T * N, sgd_minibatch_size=MB,
        num_sgd_iter=EPOCHS, lr=1e-3, gamma=GAMMA, lambda_=LAMBDA, clip_param=0.2,
        vf_clip_param=None, entropy_coeff=0.3, vf_loss_coeff=0.8, grad_clip=0.5,
        kl_coeff=0.0, normalize_advantages=False,
        model={"fcnet_hiddens": HIDDEN, "fcnet_activation": "relu", "vf_share_layers": False,
               "free_log_std": True, "log_std_init": -0.5},
        **config,
    )  # fmt: skip
    return Policy(BOX_OBS, BOX_ACT, cfg, "cpu"), cfg


def _pairs(sb3_policy: Any, model: Any) -> list[tuple[Any, Any]]:
    """(SB3's tensor, ours) for every parameter: the policy and value nets, log-std."""
    ours_pi = [*(h._model[0] for h in model._hidden_layers), model._logits._model[0]]
    ours_vf = [*(h._model[0] for h in model._value_branch_separate), model._value_branch._model[0]]
    theirs_pi = [*linears(sb3_policy.mlp_extractor.policy_net), sb3_policy.action_net]
    theirs_vf = [*linears(sb3_policy.mlp_extractor.value_net), sb3_policy.value_net]
    pairs: list[tuple[Any, Any]] = [(sb3_policy.log_std, model._append_free_log_std.log_std)]
    for a, b in zip([*theirs_pi, *theirs_vf], [*ours_pi, *ours_vf], strict=True):
        pairs += [(a.weight, b.weight), (a.bias, b.bias)]
    return pairs


def _copy_weights(sb3_policy: Any, model: Any) -> None:
    with torch.no_grad():
        for theirs, ours in _pairs(sb3_policy, model):
            ours.copy_(theirs)


def _rollout(policy: Any) -> dict[str, np.ndarray]:
    """A rollout of 2 envs: episode ends at known steps, values and log-probs of SB3's policy."""
    rng = np.random.default_rng(5)
    obs = rng.normal(size=(T, N, OBS)).astype(np.float32)
    actions = rng.normal(scale=0.8, size=(T, N, ACT)).astype(np.float32)  # some beyond +-1
    rewards = rng.normal(scale=3.0, size=(T, N)).astype(np.float32)
    dones = np.zeros((T, N), bool)
    dones[[4, 11], 0] = True
    dones[[7, T - 1], 1] = True  # an episode ending on the rollout's last step
    with torch.no_grad():
        values, logp, _ = policy.evaluate_actions(
            torch.as_tensor(obs.reshape(T * N, OBS)), torch.as_tensor(actions.reshape(T * N, ACT))
        )
        after = torch.as_tensor(rng.normal(size=(N, OBS)), dtype=torch.float32)
        last = policy.predict_values(after)
    return {
        "obs": obs, "actions": actions, "rewards": rewards, "dones": dones,
        "values": values.numpy().reshape(T, N), "logp": logp.numpy().reshape(T, N),
        "last_values": last.numpy().reshape(N),
    }  # fmt: skip


def _fill_sb3_buffer(model: Any, r: dict[str, np.ndarray]) -> None:
    buf = model.rollout_buffer
    buf.reset()
    starts = np.vstack([np.zeros((1, N), bool), r["dones"][:-1]])  # SB3's episode_starts
    for t in range(T):
        buf.add(r["obs"][t], r["actions"][t], r["rewards"][t], starts[t],
                torch.as_tensor(r["values"][t]), torch.as_tensor(r["logp"][t]))  # fmt: skip
    buf.compute_returns_and_advantage(torch.as_tensor(r["last_values"]), r["dones"][-1])


def test_gae_equals_stable_baselines3_rollout_buffer() -> None:
    model = _sb3_ppo(_sb3_env())
    r = _rollout(model.policy)
    _fill_sb3_buffer(model, r)
    adv, targets = compute_gae(
        r["rewards"], r["values"], r["dones"], r["last_values"], GAMMA, LAMBDA
    )
    np.testing.assert_allclose(adv, model.rollout_buffer.advantages, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(targets, model.rollout_buffer.returns, rtol=1e-5, atol=1e-5)


def _sb3_env(**kwargs: Any) -> Any:
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv([lambda: _Drift(**kwargs) for _ in range(N)])


@pytest.mark.parametrize("fast_paths", [True, False])
def test_one_iteration_equals_stable_baselines3_ppo(fast_paths: bool) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = _sb3_ppo(_sb3_env())
    policy, cfg = _our_policy(fast_paths=fast_paths)
    _copy_weights(model.policy, policy.model)
    learner = PPOLearner(policy, cfg)
    assert (learner._backprop is not None) == fast_paths  # the closed form, or autograd
    r = _rollout(model.policy)
    _fill_sb3_buffer(model, r)

    # SB3 shuffles with np.random's global state: its buffer hands over our minibatches
    twin = np.random.default_rng(7)
    perms = iter([twin.permutation(T * N) for _ in range(EPOCHS)])
    buf, get = model.rollout_buffer, model.rollout_buffer.get

    def ours_order(batch_size: int | None = None) -> Any:
        for _ in get(None):  # SB3's own flattening (env-major rows, as ours)
            pass
        perm = next(perms)
        for start in range(0, T * N, MB):
            yield buf._get_samples(perm[start : start + MB])

    buf.get = ours_order
    start = [p.detach().clone() for _, p in _pairs(model.policy, policy.model)]
    model.train()

    with torch.no_grad():
        flat = torch.as_tensor(r["obs"].reshape(T * N, OBS))
        logits, _ = policy.model({"obs": flat}, [], None)
    batch = SampleBatch(
        obs=r["obs"], actions=r["actions"], logp=r["logp"], vf_preds=r["values"],
        dist_inputs=logits.numpy().reshape(T, N, -1), rewards=r["rewards"], dones=r["dones"],
        prev_actions=None, prev_rewards=None, last_values=r["last_values"],
        seq_starts=np.zeros((0, 2), np.int64), seq_states=[],
    )  # fmt: skip
    stats = learner.update(batch, np.random.default_rng(7))

    for theirs, ours in _pairs(model.policy, policy.model):
        np.testing.assert_allclose(ours.detach(), theirs.detach(), rtol=1e-4, atol=1e-5)
    moved = max(
        float((t.detach() - s).abs().max())
        for (t, _), s in zip(_pairs(model.policy, policy.model), start, strict=True)
    )
    assert moved > 1e-3  # the updates moved the nets (equal unchanged nets prove nothing)
    # the last epoch's losses, as SB3 logs them over every epoch: the same value loss scale
    assert stats["vf_loss"] > 0 and np.isfinite(stats["policy_loss"])


def test_minibatch_advantage_standardisation_differs_by_bessels_factor() -> None:
    # by design: SB3 divides by the unbiased std, ours by the population std; on a minibatch
    # of n rows SB3's standardised advantages are ours times sqrt((n - 1) / n)
    from rlblocks.train.learners.ppo import _standardized

    adv = torch.as_tensor(np.random.default_rng(1).normal(size=32), dtype=torch.float32)
    theirs = (adv - adv.mean()) / (adv.std() + 1e-8)
    ours = _standardized(adv, None)
    np.testing.assert_allclose(theirs, ours * np.sqrt(31 / 32), rtol=1e-5)


def test_rollout_reward_scaling_and_truncation_bootstrap_equal_vecnormalize() -> None:
    from gymnasium.vector import AutoresetMode, SyncVectorEnv
    from rlblocks.filters import NoFilter
    from rlblocks.preprocessors import get_preprocessor
    from rlblocks.train.runner import EnvRunner
    from stable_baselines3.common.vec_env import VecNormalize

    torch.manual_seed(0)
    # episodes of 5 steps (terminated) in env 0, of 7 (truncated) in env 1; rewards up to
    # 40 so that the clip at 10 bites while the running return's std is still small
    venv = VecNormalize(_sb3_env(end=10**6, limit=7, scale=40.0), norm_obs=False, gamma=GAMMA)
    venv.venv.envs[0].end = 5
    model = _sb3_ppo(venv)
    policy, cfg = _our_policy(normalize_reward=True, clip_reward=10.0)
    _copy_weights(model.policy, policy.model)

    ours_envs = [_Drift(end=5, limit=10**6, scale=40.0), _Drift(limit=7, scale=40.0)]
    sync = SyncVectorEnv([lambda e=e: e for e in ours_envs], autoreset_mode=AutoresetMode.SAME_STEP)
    prep = get_preprocessor(BOX_OBS)(BOX_OBS)
    runner = EnvRunner(cfg, policy, prep, NoFilter(), seed=0, venv=sync)
    from stable_baselines3.common.callbacks import BaseCallback

    class _Nothing(BaseCallback):
        def _on_step(self) -> bool:
            return True

    model._setup_learn(T * N, _Nothing())
    callback = _Nothing()
    callback.init_callback(model)
    model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=T)
    batch = runner.collect(T)
    buf = model.rollout_buffer
    assert batch.dones.any() and (np.abs(buf.rewards) >= 10.0 - 1e-6).any()  # clip reached
    np.testing.assert_allclose(batch.obs, buf.observations, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(batch.vf_preds, buf.values, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch.rewards, buf.rewards, rtol=1e-5, atol=1e-5)
    adv, targets = compute_gae(
        batch.rewards, batch.vf_preds, batch.dones, batch.last_values, GAMMA, LAMBDA
    )
    np.testing.assert_allclose(adv, buf.advantages, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(runner.reward_scaler.var, venv.ret_rms.var, rtol=1e-6)


def test_observation_filter_keeps_vecnormalize_statistic() -> None:
    from stable_baselines3.common.running_mean_std import RunningMeanStd

    rng = np.random.default_rng(2)
    batches = [rng.normal(3.0, 2.0, size=(N, OBS)) for _ in range(50)]
    ours, theirs = MeanStdFilter((OBS,), clip=10.0), RunningMeanStd(shape=(OBS,))
    for b in batches:
        out = ours(b.astype(np.float32))
        theirs.update(b)
    n = ours.running_stats.n
    assert n == 100
    # the same mean; SB3's prior count of 1e-4 at variance 1 aside, its population
    # variance is ours times (n - 1) / n
    np.testing.assert_allclose(ours.running_stats.mean, theirs.mean, rtol=1e-5)
    np.testing.assert_allclose(
        ours.running_stats.var * (n - 1) / n, theirs.var, rtol=1e-4, atol=1e-5
    )
    x = batches[-1].astype(np.float32)
    vecnorm = np.clip((x - theirs.mean) / np.sqrt(theirs.var + 1e-8), -10.0, 10.0)
    np.testing.assert_allclose(out, vecnorm * np.sqrt((n - 1) / n), rtol=1e-3, atol=1e-4)


class _Spiky(_Drift):
    """_Drift with one observation 1,000 times larger, late (a fall, a contact)."""

    spiked = False

    def _obs(self) -> np.ndarray:
        spike = self.k > 100 and self.t == 3 and not self.spiked  # mid-episode: in the batch
        self.spiked |= spike
        return super()._obs() * (1000.0 if spike else 1.0)


def test_observation_clip_clips_the_filtered_observations_as_vecnormalize() -> None:
    # issue 46: VecNormalize clips the normalised observations at 10 (clip_obs), as the RLlib
    # backend's MeanStdFilter connector does; the native trainer's MeanStdFilter never
    # clipped, so hopper_ppo's "the zoo's normalize: true" left a spike of 15 std unclipped
    from gymnasium.vector import AutoresetMode, SyncVectorEnv
    from rlblocks.filters import get_filter
    from rlblocks.preprocessors import get_preprocessor
    from rlblocks.train.runner import EnvRunner

    def spikes(**config: Any) -> np.ndarray:
        policy, cfg = _our_policy(observation_filter="MeanStdFilter", **config)
        envs = SyncVectorEnv(
            [lambda: _Spiky(limit=7), lambda: _Drift(limit=7)],
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
        obs_filter = get_filter(cfg.observation_filter, OBS, cfg.observation_clip)
        prep = get_preprocessor(BOX_OBS)(BOX_OBS)
        runner = EnvRunner(cfg, policy, prep, obs_filter, seed=0, venv=envs)
        return np.abs(runner.collect(8 * T).obs)

    assert spikes().max() > 10.0  # RLlib's native filter: unclipped
    clipped = spikes(observation_clip=10.0)
    assert clipped.max() == pytest.approx(10.0)
    with pytest.raises(ValueError, match="'clip_obs'; did you mean 'observation_clip'"):
        PPOConfig.from_dict({"env": "Pendulum-v1", "clip_obs": 10.0})  # SB3's name
    with pytest.raises(ValueError, match="observation_clip=10.0 clips the filtered"):
        PPOConfig(env="Pendulum-v1", observation_clip=10.0)
    # --backend rllib: its filter connector clips at 10 by itself; the key is refused there
    from rlblocks.train.algo_spaces import check_rllib_config

    clipped_cfg = PPOConfig(
        env="Pendulum-v1", observation_filter="MeanStdFilter", observation_clip=10.0
    )
    with pytest.raises(ValueError, match="observation_clip=10.0: a native-trainer option"):
        check_rllib_config(clipped_cfg, "PPO")
