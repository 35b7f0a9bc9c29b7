"""PPO training: config validation, GAE, learning on CartPole (feed-forward and LSTM),
every supported action-space kind, custom losses/metrics, checkpoints, resume, the CLI."""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.catalog import ModelCatalog
from rlblocks.cli import main
from rlblocks.distributions import FLOAT_MIN, MaskedCategorical
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.train import PPOConfig, PPOTrainer
from rlblocks.train.checkpoint import list_checkpoints
from rlblocks.train.learners.ppo import compute_gae
from rlblocks.train.logger import read_progress


def tiny(**kw) -> dict:
    """A fast config: 2 envs x 32 steps, 2 minibatches, 2 epochs."""
    base = {
        "env": "CartPole-v1",
        "num_envs": 2,
        "train_batch_size": 64,
        "sgd_minibatch_size": 32,
        "num_sgd_iter": 2,
        "seed": 3,
        "model": {"fcnet_hiddens": [16]},
    }
    base.update(kw)
    return base


# --- config ---------------------------------------------------------------------------------
def test_native_trainer_refuses_an_rllib_block(tmp_path):
    cfg = PPOConfig.from_dict({"env": "CartPole-v1", "rllib": {"training": {"n_step": 3}}})
    assert PPOConfig.from_dict(cfg.to_dict()).rllib == {"training": {"n_step": 3}}
    with pytest.raises(ValueError, match="train it with --backend rllib"):
        PPOTrainer(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_config_rllib_keys_roundtrip():
    cfg = PPOConfig.from_dict(
        {"env": "CartPole-v1", "lambda": 0.9, "lr": 1e-3, "model": {"fcnet_hiddens": [32]}}
    )
    assert cfg.lambda_ == 0.9 and cfg.lr == 1e-3
    again = PPOConfig.from_dict(cfg.to_dict())
    assert again == cfg
    assert again.model_config().fcnet_hiddens == (32,)
    assert again.model_config().fcnet_activation == "tanh"  # PPO default


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ({"sgd_minibatch": 64}, "did you mean 'sgd_minibatch_size'"),
        ({"train_batch_size": 100, "num_envs": 8}, "multiple of num_envs"),
        ({"observation_filter": "Mean"}, "observation_filter must be one of"),
        ({"lr": -1.0}, "lr must be a finite number > 0.0, got -1.0"),
        ({"lr": float("inf")}, "lr must be a finite number > 0.0, got inf"),
        ({"entropy_coeff": float("nan")}, "entropy_coeff must be a finite number >= 0.0"),
        ({"gamma": 10**400}, "gamma must be in [0.0, 1.0]"),
        ({"seed": 2**64}, "seed must be an int in [0, 9223372036854775807]"),
        ({"gamma": 1.5}, "gamma must be in"),
        ({"model": {"fcnet_hidden": [3]}}, "unknown model config key 'fcnet_hidden'"),
        ({"vector_mode": "threads"}, "vector_mode must be one of"),
        ({"rllib": {"evaluation": {}}}, "rllib.evaluation: not an RLlib config section"),
        ({"rllib": {"training": [1]}}, "rllib.training must be a dict of RLlib keys"),
        ({"rllib": 3}, "rllib must be a dict of RLlib config sections"),
        ({"lr_schedule": [[0, 1e-3], [10]]}, "lr_schedule[1]"),
        ({"rollout_fragment_length": 7}, "rollout_fragment_length"),
        ({"num_sgd_iter": 0}, "num_sgd_iter must be an int >= 1"),
    ],
)
def test_config_errors_name_the_problem(bad, fragment):
    with pytest.raises(ValueError) as info:
        PPOConfig.from_dict({"env": "CartPole-v1", **bad})
    assert fragment in str(info.value)


def test_unknown_env_is_a_clear_error():
    with pytest.raises(ValueError, match="did you mean 'CartPole-v1'"):
        PPOTrainer({"env": "CartPol-v1"})
    with pytest.raises(ValueError, match="config.env is not set"):
        PPOTrainer({})


# --- GAE ------------------------------------------------------------------------------------
def test_gae_matches_a_per_env_loop():
    rng = np.random.default_rng(0)
    t_steps, n, gamma, lam = 17, 3, 0.97, 0.9
    rewards = rng.normal(size=(t_steps, n)).astype(np.float32)
    values = rng.normal(size=(t_steps, n)).astype(np.float32)
    dones = rng.random((t_steps, n)) < 0.15
    last = rng.normal(size=n).astype(np.float32)
    adv, ret = compute_gae(rewards, values, dones, last, gamma, lam)
    for e in range(n):
        running = 0.0
        for t in reversed(range(t_steps)):
            nxt = last[e] if t == t_steps - 1 else values[t + 1, e]
            nonterm = 0.0 if dones[t, e] else 1.0
            delta = rewards[t, e] + gamma * nxt * nonterm - values[t, e]
            running = delta + gamma * lam * nonterm * running
            assert adv[t, e] == pytest.approx(running, rel=1e-5, abs=1e-5)
    np.testing.assert_allclose(ret, adv + values, rtol=1e-6)


@pytest.mark.parametrize("scale", [0.01, 3.0])  # below and above the clip norm
def test_clip_grad_norm_matches_torch(scale):
    from rlblocks.train.fast import clip_grad_norm as _clip_grad_norm

    torch.manual_seed(0)
    ours = [
        torch.nn.Parameter(torch.randn(5, 3)),
        torch.nn.Parameter(torch.randn(7)),
        torch.nn.Parameter(torch.randn(2)),
    ]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    for p, q in zip(ours[:2], ref[:2], strict=True):  # the last one has no gradient
        p.grad = torch.randn_like(p) * scale
        q.grad = p.grad.clone()
    _clip_grad_norm(ours, 0.5)
    torch.nn.utils.clip_grad_norm_(ref, 0.5)
    for p, q in zip(ours[:2], ref[:2], strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    assert ours[2].grad is None


@pytest.mark.parametrize("breakage", ["missing", "failing"])
def test_private_torch_kernels_fall_back_to_the_public_api(breakage, monkeypatch):
    """Without torch's private kernels (another torch release), or when they refuse their
    arguments, training runs through ``Optimizer.step`` and ``clip_grad_norm_`` and gives the
    same result."""
    import sys

    from rlblocks.train.fast import kernels as learner

    real = {name: getattr(torch, name) for name in ("_fused_adam_", "_foreach_norm")}

    def refusing(name):
        def kernel(*args, **kwargs):  # refuses the trainer's direct calls, serves torch's own
            if sys._getframe(1).f_globals.get("__name__") == learner.__name__:
                raise TypeError("unexpected keyword argument 'grad_scale'")
            return real[name](*args, **kwargs)

        return kernel

    def run() -> dict[str, torch.Tensor]:
        with PPOTrainer(tiny(seed=4)) as trainer:
            for _ in range(2):
                trainer.train()
            return {k: v.clone() for k, v in trainer.model.state_dict().items()}

    expected = run()
    with monkeypatch.context() as m:
        for name in ("_fused_adam_", "_foreach_norm"):
            if breakage == "missing":
                m.delattr(torch, name)
            else:
                m.setattr(torch, name, refusing(name))
        m.setattr(learner, "_PRIVATE_KERNELS_WORK", {"fused_adam": True, "foreach_norm": True})
        got = run()
        if breakage == "failing":  # tried once, then left alone
            assert learner._PRIVATE_KERNELS_WORK["fused_adam"] is False
        # The per-parameter clipping path (models the flat buffer does not cover):
        params = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(4))]
        for p in params:
            p.grad = torch.full_like(p, 2.0)
        learner.clip_grad_norm(params, 0.5)
        torch.testing.assert_close(
            torch.cat([p.grad for p in params]).norm(), torch.tensor(0.5), rtol=1e-5, atol=0
        )
        if breakage == "failing":
            assert learner._PRIVATE_KERNELS_WORK["foreach_norm"] is False
    for key, value in expected.items():  # foreach Adam rounds a little differently from fused
        torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shapes", [[(300,)], [(7, 5), (5,), (3, 7), (3,)]])
def test_direct_fused_adam_step_equals_optimizer_step(shapes):
    """The learner's direct call of the fused Adam kernel gives bit-identical parameters and
    state to ``Adam.step()`` (lr changes included; one flat tensor or several, one of them
    without a gradient on some steps; the first step starts the state as ``step()`` does),
    and declines whenever it would differ: with a step hook, with amsgrad."""
    from rlblocks.train.fast import adam_step as _fused_adam_step
    from rlblocks.train.fast import make_adam as _adam

    torch.manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    b = [torch.nn.Parameter(x.detach().clone()) for x in a]
    ref, ours = _adam(a, 1e-3), _adam(b, 1e-3)
    used = []
    for i in range(30):
        for j, (x, y) in enumerate(zip(a, b, strict=True)):
            skip = j == len(a) - 1 and len(a) > 1 and i % 3 == 2
            g = None if skip else torch.randn(x.shape) * (i + 1)
            x.grad, y.grad = g, None if g is None else g.clone()
        ref.step()
        direct = _fused_adam_step(ours)
        if not direct:
            ours.step()
        used.append(direct)
        if i == 10:
            for opt in (ref, ours):
                opt.param_groups[0]["lr"] = 3e-4
    assert all(used)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(ref.state[x][key], ours.state[y][key])

    handle = ours.register_step_pre_hook(lambda *args: None)
    assert not _fused_adam_step(ours)
    handle.remove()
    ams = torch.optim.Adam(b, lr=1e-3, amsgrad=True, fused=True)
    ams.step()
    assert not _fused_adam_step(ams)


# --- learning -------------------------------------------------------------------------------
# PPO's defaults on CartPole (the fast paths) are CI's main job: README command 1 trains to
# 475 and .ci/run checks the return; every zoo task learns with the defaults
# (tests/learning/test_zoo.py).
class StatelessCartPole(gym.ObservationWrapper):
    """CartPole with the velocities zeroed: only position and angle are observed."""

    def observation(self, obs):
        return obs * np.array([1, 0, 1, 0], dtype=np.float32)


def stateless_cartpole(env_config):
    return StatelessCartPole(gym.make("CartPole-v1"))


def test_lstm_ppo_improves_on_stateless_cartpole():
    # The LSTM's bounded features fit small value targets best, so the horizon is short
    # (gamma 0.95) and the value loss gets a small weight (the policy gradient dominates the
    # shared layers). Returns of 80 need the velocities the LSTM infers from successive
    # positions: the same settings without memory peak near 54 in 100k steps.
    config = {
        "env": stateless_cartpole,
        "num_envs": 8,
        "train_batch_size": 1024,
        "sgd_minibatch_size": 256,
        "num_sgd_iter": 6,
        "lr": 1e-3,
        "vf_loss_coeff": 0.01,
        "gamma": 0.95,
        "seed": 0,
        "model": {
            "use_lstm": True,
            "lstm_cell_size": 64,
            "max_seq_len": 16,
            "fcnet_hiddens": [64],
            "lstm_use_prev_action": True,
        },
    }
    with PPOTrainer(config) as trainer:
        first = trainer.train()["episode_return_mean"]
        best = -math.inf
        while trainer.timesteps_total < 60_000 and best < 80:
            best = max(best, trainer.train()["episode_return_mean"])
    assert first < 30  # about a random policy's 22
    assert best >= 80, f"first iteration {first}, best {best} at {trainer.timesteps_total}"


@pytest.mark.parametrize(
    "model",
    [
        {
            "use_lstm": True,
            "lstm_cell_size": 8,
            "max_seq_len": 7,
            "lstm_use_prev_action": True,
            "lstm_use_prev_reward": True,
        },
        {
            "use_attention": True,
            "attention_dim": 8,
            "attention_head_dim": 4,
            "attention_memory_inference": 5,
            "attention_memory_training": 5,
            "max_seq_len": 6,
            "attention_position_wise_mlp_dim": 8,
            "attention_use_n_prev_actions": 2,
            "attention_use_n_prev_rewards": 3,
        },
    ],
    ids=["lstm", "attention"],
)
def test_sequence_batches_reproduce_the_rollout(model):
    """Training sequences (with their recorded start states) give the rollout's logp/values."""
    from rlblocks.nest import tree_map

    config = tiny(num_envs=3, train_batch_size=150, model={"fcnet_hiddens": [8], **model})
    with PPOTrainer(config) as trainer:
        trainer.train()  # start mid-episode with trained weights
        learner, pol = trainer.learner, trainer.policy
        batch = trainer.runner.collect(50)
        assert batch.dones.any()  # episode boundaries inside the fragment
        adv, targets = compute_gae(
            batch.rewards, batch.vf_preds, batch.dones, batch.last_values, 0.99, 0.95
        )
        cols = learner._columns(batch, adv, targets)
        batch = learner._order_sequences(batch)
        index, lens, _ = learner._sequence_index(batch)
        assert lens.max() <= pol.max_seq_len and lens.sum() == 150
        flat = index.reshape(-1)
        rows = torch.as_tensor(np.maximum(flat, 0))
        data = tree_map(lambda c: c[rows], cols)
        state = [torch.as_tensor(s) for s in batch.seq_states]
        with torch.no_grad():
            d = pol.input_dict(data["obs"], data.get("prev_actions"), data.get("prev_rewards"))
            dist, values, _ = pol.forward(d, state, torch.as_tensor(lens))
            logp = dist.logp(data["actions"])
    real = flat >= 0
    np.testing.assert_allclose(logp.numpy()[real], data["logp"].numpy()[real], atol=2e-5)
    np.testing.assert_allclose(values.numpy()[real], data["vf_preds"].numpy()[real], atol=2e-5)


def test_tensorboard_events_or_a_clear_error(tmp_path):
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="needs the tensorboard package"):
            PPOTrainer(tiny(tensorboard=True), run_dir=tmp_path)
        return
    with PPOTrainer(tiny(tensorboard=True), run_dir=tmp_path) as trainer:
        trainer.train()
    assert any(p.name.startswith("events.out.tfevents") for p in tmp_path.iterdir())


# --- action spaces, models ------------------------------------------------------------------
class ToyEnv(gym.Env):
    """Dict observations and a configurable action space; reward for matching a target."""

    def __init__(self, action_space: gym.Space, mask: bool = False):
        self.action_space = action_space
        spaces = {"pos": gym.spaces.Box(-1, 1, (3,), np.float32), "kind": gym.spaces.Discrete(3)}
        if mask:
            spaces["action_mask"] = gym.spaces.Box(0, 1, (action_space.n,), np.float32)
        self.observation_space = gym.spaces.Dict(spaces)
        self.mask = mask
        self._t = 0

    def _obs(self):
        obs = {
            "pos": self.np_random.uniform(-1, 1, 3).astype(np.float32),
            "kind": int(self.np_random.integers(3)),
        }
        if self.mask:
            m = (self.np_random.random(self.action_space.n) < 0.5).astype(np.float32)
            m[self.np_random.integers(self.action_space.n)] = 1.0
            obs["action_mask"] = m
        self._last = obs
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        if self.mask:
            assert self._last["action_mask"][action] == 1.0, "an illegal action was sampled"
        self._t += 1
        reward = float(np.sum(np.asarray(gym.spaces.flatten(self.action_space, action))) > 0)
        return self._obs(), reward, False, self._t >= 10, {}


class MaskedModel(FullyConnectedNetwork):
    """Logits from the 'pos'/'kind' features, illegal actions pushed to FLOAT_MIN."""

    def forward(self, input_dict, state, seq_lens):
        logits, _ = super().forward(input_dict, state, seq_lens)
        mask = input_dict["obs"]["action_mask"]
        return logits + torch.clamp(torch.log(mask), min=FLOAT_MIN), state


ModelCatalog.register_custom_model("test_train_masked", MaskedModel)
ModelCatalog.register_custom_action_dist("test_train_masked_cat", MaskedCategorical)


@pytest.mark.parametrize(
    "action_space, model",
    [
        (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), {}),
        (gym.spaces.MultiDiscrete([3, 2]), {}),
        (gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32))), {}),
        (gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.MultiDiscrete([2, 2])}), {}),
        (
            gym.spaces.Discrete(4),
            {
                "use_attention": True,
                "attention_dim": 16,
                "attention_head_dim": 8,
                "attention_memory_inference": 4,
                "attention_memory_training": 4,
                "max_seq_len": 5,
                "attention_position_wise_mlp_dim": 16,
                "attention_use_n_prev_actions": 2,
                "attention_use_n_prev_rewards": 2,
            },
        ),
        (
            gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            {
                "use_lstm": True,
                "lstm_cell_size": 8,
                "max_seq_len": 4,
                "lstm_use_prev_action": True,
                "lstm_use_prev_reward": True,
            },
        ),
    ],
    ids=["box", "multidiscrete", "tuple", "dict", "attention", "lstm-box"],
)
def test_action_spaces_and_models_train(action_space, model):
    config = tiny(env=lambda cfg: ToyEnv(action_space), model={"fcnet_hiddens": [16], **model})
    with PPOTrainer(config) as trainer:
        for _ in range(2):
            m = trainer.train()
        for key in ("policy_loss", "vf_loss", "entropy", "kl", "approx_kl", "clipfrac"):
            assert math.isfinite(m[key]), (key, m[key])
        assert m["timesteps_total"] == 128 and m["episodes_total"] >= 12
        obs = [ToyEnv(action_space).observation_space.sample() for _ in range(3)]
        actions, state = trainer.compute_actions(obs)
        leaves = actions if isinstance(actions, (tuple, dict)) else (actions,)
        values = leaves.values() if isinstance(leaves, dict) else leaves
        assert all(np.asarray(v).shape[0] == 3 for v in values)
        assert len(state) == len(trainer.model.get_initial_state())
        ev = trainer.evaluate(2)
        assert ev["episodes"] == 2 and ev["episode_len_mean"] == 10


def test_masked_actions_are_never_illegal():
    config = tiny(
        env=lambda cfg: ToyEnv(gym.spaces.Discrete(5), mask=True),
        model={"custom_model": "test_train_masked", "custom_action_dist": "test_train_masked_cat"},
    )
    with PPOTrainer(config) as trainer:  # ToyEnv asserts on every illegal action
        for _ in range(3):
            m = trainer.train()
        assert math.isfinite(m["entropy"]) and math.isfinite(m["kl"])
        trainer.evaluate(2, explore=True)


class AutoregressiveModel(FullyConnectedNetwork):
    """16 context outputs; P(a2 | a1) through ``action_model`` (teacher-forced in logp)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.head1 = torch.nn.Linear(16, 2)
        self.head2 = torch.nn.Linear(16 + 2, 2)

    def action_model(self, ctx, actions):
        a1 = torch.nn.functional.one_hot(actions[0].long(), 2).float()
        return [self.head1(ctx), self.head2(torch.cat([ctx, a1], -1))]


def test_autoregressive_actions_train():
    from rlblocks.distributions import BinaryAutoregressiveDistribution

    ModelCatalog.register_custom_model("test_train_ar", AutoregressiveModel)
    ModelCatalog.register_custom_action_dist("test_train_ar_dist", BinaryAutoregressiveDistribution)
    space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(2)))
    config = tiny(
        env=lambda cfg: ToyEnv(space),
        model={"custom_model": "test_train_ar", "custom_action_dist": "test_train_ar_dist"},
    )
    with PPOTrainer(config) as trainer:
        before = trainer.model.head2.weight.detach().clone()
        m = trainer.train()
        assert not torch.equal(before, trainer.model.head2.weight)  # a2's head is trained
        assert math.isfinite(m["policy_loss"]) and math.isfinite(m["kl"])
        actions, _ = trainer.compute_actions([ToyEnv(space).observation_space.sample()])
        assert isinstance(actions, tuple) and len(actions) == 2


def test_async_vector_envs():
    with PPOTrainer(tiny(vector_mode="async")) as trainer:
        m = trainer.train()
    assert m["timesteps_total"] == 64 and math.isfinite(m["vf_loss"])


class CountingEnv(gym.Env):
    """Action-independent episodes of random length 2..7, truncated after 5 steps by a
    TimeLimit: obs ``[t, length]``, reward ``1 + t``."""

    observation_space = gym.spaces.Box(0, 10, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(2, 8))
        return np.array([0, self.length], np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.t, self.length], np.float32)
        return obs, 1.0 + self.t, self.t >= self.length, False, {}


def counting_vector_env(mode):
    def make(env_config):
        fns = [lambda: gym.wrappers.TimeLimit(CountingEnv(), 5)] * env_config["num_envs"]
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)

    return make


def _transitions(trainer, iterations, steps):
    """Per env: the (obs, reward, done, value) of every real transition, in order."""
    rows = [[] for _ in range(trainer.runner.num_envs)]
    returns = []
    for _ in range(iterations):
        b = trainer.runner.collect(steps)
        valid = np.ones_like(b.dones) if b.valid is None else b.valid
        for e in range(b.dones.shape[1]):
            for t in np.flatnonzero(valid[:, e]):
                rows[e].append((*b.obs[t, e], b.rewards[t, e], b.dones[t, e], b.vf_preds[t, e]))
        returns += b.episode_returns
    return [np.array(r) for r in rows], returns


@pytest.mark.parametrize(
    "model",
    [
        {"fcnet_hiddens": [8]},
        {"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": 4, "max_seq_len": 3},
    ],
    ids=["mlp", "lstm"],
)
def test_next_step_autoreset_gives_the_same_transitions_as_same_step(model):
    from gymnasium.vector import AutoresetMode

    runs = {}
    for mode in (AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP):
        cfg = tiny(
            env=counting_vector_env(mode),
            vector_mode="native",
            num_envs=3,
            train_batch_size=30,
            sgd_minibatch_size=15,
            gamma=0.9,
            model=model,
        )
        with PPOTrainer(cfg) as trainer:
            runs[mode] = _transitions(trainer, 4, 10)
            batch = trainer.runner.collect(10)
            stats = trainer.learner.update(batch, np.random.default_rng(0))
            assert all(math.isfinite(v) for v in stats.values())
            if mode == AutoresetMode.NEXT_STEP:
                assert batch.valid is not None and not batch.valid.all()
                assert batch.num_steps == batch.valid.sum() < batch.rewards.size
                # a reset step follows every episode end, and only that
                assert np.array_equal(~batch.valid[1:], batch.dones[:-1])
    (same, same_returns), (nxt, nxt_returns) = runs.values()
    for a, b in zip(same, nxt, strict=True):
        n = len(b)
        assert n > 20 and len(a) >= n
        # obs, rewards (with the truncation bootstrap gamma * V(final obs)), dones, values
        np.testing.assert_allclose(b, a[:n], rtol=1e-6, atol=1e-6)
    # each env's finished episodes are a prefix of its SAME_STEP ones
    assert len(nxt_returns) > 10 and Counter(nxt_returns) <= Counter(same_returns)
    truncated = [r for r in same_returns if r == sum(1.0 + t for t in range(1, 6))]
    assert truncated  # some episodes hit the time limit (the bootstrap path ran)


def test_native_vector_mode():
    with PPOTrainer(tiny(vector_mode="native", num_envs=4, train_batch_size=64)) as trainer:
        assert type(trainer.venv).__name__ == "CartPoleVectorEnv"
        m = trainer.train()
        assert 0 < m["timesteps_total"] <= 64 and math.isfinite(m["vf_loss"])
        assert trainer.evaluate(1)["episode_len_mean"] > 0
    with pytest.raises(ValueError, match="registers no vector_entry_point"):
        PPOTrainer(tiny(env="rlblocks/RepeatAfterMe-v0", vector_mode="native"))
    with pytest.raises(ValueError, match="must give a gymnasium VectorEnv of num_envs=2"):
        PPOTrainer(tiny(env=lambda cfg: gym.make("CartPole-v1"), vector_mode="native"))


def test_ppo_trains_on_the_batched_atari_vector_env():
    pytest.importorskip("ale_py")
    from rlblocks.wrappers.vector import make_vector_env

    def pong(env_config):
        return make_vector_env(
            "ALE/Pong-v5",
            env_config["num_envs"],
            {"dim": 42},
            vectorization_mode="atari",
            repeat_action_probability=0.0,
        )

    cfg = tiny(
        env=pong,
        vector_mode="native",
        train_batch_size=64,
        sgd_minibatch_size=64,
        num_sgd_iter=1,
        model={"conv_filters": [[8, [4, 4], 4], [16, [11, 11], 1]]},
    )
    with PPOTrainer(cfg) as trainer:
        assert trainer.venv.single_observation_space.shape == (42, 42, 4)
        m = trainer.train()
        assert m["timesteps_total"] == 64 and math.isfinite(m["policy_loss"])


def test_atari_ids_get_the_deepmind_pipeline_sync_and_native_alike():
    pytest.importorskip("ale_py")
    model = {"dim": 42, "conv_filters": [[8, [4, 4], 4], [16, [11, 11], 1]]}
    metrics = {}
    for mode, cls in (("sync", "VectorAtariPreprocessing"), ("native", "AtariVectorEnv")):
        cfg = tiny(
            env="ALE/Breakout-v5",
            vector_mode=mode,
            train_batch_size=64,
            sgd_minibatch_size=64,
            num_sgd_iter=1,
            model=model,
            env_config={"repeat_action_probability": 0.0},
        )
        with PPOTrainer(cfg) as trainer:
            assert type(trainer.venv).__name__ == cls
            assert trainer.venv.single_observation_space.shape == (42, 42, 4)
            metrics[mode] = trainer.train()
            assert trainer.evaluate(1)["episode_len_mean"] > 0
    # the same pipeline either way: identical batches, hence identical losses
    for key in ("timesteps_total", "policy_loss", "vf_loss", "episode_return_mean"):
        np.testing.assert_equal(metrics["sync"][key], metrics["native"][key])
    with PPOTrainer(
        tiny(
            env="ALE/Breakout-v5",
            preprocessor_pref=None,
            env_config={"repeat_action_probability": 0.0},
        )
    ) as raw:
        assert raw.venv.single_observation_space.shape == (210, 160, 3)
    with pytest.raises(ValueError, match="preprocessor_pref must be one of"):
        PPOConfig(env="ALE/Breakout-v5", preprocessor_pref="atari")


class LossModel(FullyConnectedNetwork):
    """Adds an L2 penalty through custom_loss, reports metrics, checks is_training."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bn = torch.nn.BatchNorm1d(4)
        self.custom_calls = 0
        self.training_flags: set[tuple[bool, bool]] = set()

    def forward(self, input_dict, state, seq_lens):
        self.training_flags.add((bool(input_dict["is_training"]), self.training))
        x = self.bn(input_dict["obs_flat"].float())
        return super().forward({**input_dict, "obs_flat": x}, state, seq_lens)

    def custom_loss(self, policy_loss, loss_inputs):
        self.custom_calls += 1
        assert "advantages" in loss_inputs and "actions" in loss_inputs
        l2 = sum((p**2).sum() for p in self.parameters())
        return policy_loss + 1e-4 * l2

    def metrics(self):
        return {"custom_calls": self.custom_calls, "policy_loss": torch.tensor(1.5)}


def test_custom_loss_metrics_and_is_training():
    ModelCatalog.register_custom_model("test_train_loss", LossModel)
    with PPOTrainer(tiny(model={"custom_model": "test_train_loss"})) as trainer:
        m = trainer.train()
        model = trainer.model
    assert model.custom_calls == 4  # 2 epochs x 2 minibatches
    assert m["custom_calls"] == 4
    assert m["model_policy_loss"] == 1.5 and m["policy_loss"] != 1.5
    assert model.training_flags == {(True, True), (False, False)}
    assert model.bn.num_batches_tracked.item() == 4  # only the SGD passes update batch norm


def test_mean_std_filter_state_is_checkpointed(tmp_path):
    with PPOTrainer(tiny(observation_filter="MeanStdFilter"), run_dir=tmp_path) as trainer:
        trainer.train()
        n = trainer.obs_filter.running_stats.n
        path = trainer.save()
    assert n >= 64
    restored = PPOTrainer.restore(path, log=False)
    assert restored.obs_filter.running_stats.n == n
    np.testing.assert_array_equal(
        restored.obs_filter.running_stats.mean, trainer.obs_filter.running_stats.mean
    )
    restored.close()


def test_lr_schedule_is_applied():
    with PPOTrainer(tiny(lr_schedule=[[0, 1e-3], [128, 0.0]])) as trainer:
        lrs = [trainer.train()["lr"] for _ in range(3)]
    assert lrs == pytest.approx([1e-3, 5e-4, 0.0])


# --- checkpoints and resume ----------------------------------------------------------------
DETERMINISTIC = (
    "timesteps_total",
    "episodes_total",
    "episode_return_mean",
    "policy_loss",
    "vf_loss",
    "entropy",
    "kl",
    "approx_kl",
    "clipfrac",
    "explained_variance",
    "kl_coeff",
)


@pytest.mark.parametrize(
    "model",
    [
        {"fcnet_hiddens": [16]},
        {
            "fcnet_hiddens": [16],
            "use_lstm": True,
            "lstm_cell_size": 8,
            "max_seq_len": 8,
            "lstm_use_prev_action": True,
        },
    ],
    ids=["fc", "lstm"],
)
def test_resume_equals_uninterrupted_run(tmp_path, model):
    config = tiny(model=model, kl_coeff=0.2, observation_filter="MeanStdFilter")
    with PPOTrainer(config, run_dir=tmp_path / "a") as a:
        for _ in range(2):
            a.train()
        ckpt = a.save()
        straight = [a.train() for _ in range(3)]
    with PPOTrainer.restore(tmp_path / "a") as b:  # the run dir: its newest checkpoint
        assert b.iteration == 2 and b.checkpoint_path == ckpt
        resumed = [b.train() for _ in range(3)]
        weights_b = b.model.state_dict()
    for s, r in zip(straight, resumed, strict=True):
        for key in DETERMINISTIC:
            assert s[key] == r[key] or (math.isnan(s[key]) and math.isnan(r[key])), key
    weights_a = a.model.state_dict()
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    rows = read_progress(tmp_path / "a")  # cut back to the checkpoint, then 3 more
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4, 5]


def test_corrupt_or_missing_checkpoints_are_clear_errors(tmp_path):
    with PPOTrainer(tiny(), run_dir=tmp_path / "run") as trainer:
        trainer.train()
        ckpt = trainer.save()
    with pytest.raises(ValueError, match="does not exist"):
        PPOTrainer.restore(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="neither a checkpoint"):
        PPOTrainer.restore(tmp_path)
    broken = tmp_path / "broken" / ckpt.name
    shutil.copytree(ckpt, broken)
    data = bytearray((broken / "state.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (broken / "state.pt").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="is corrupt"):
        PPOTrainer.restore(broken)
    (broken / "meta.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read meta.json"):
        PPOTrainer.restore(broken)


def test_lambda_env_needs_to_be_given_on_restore(tmp_path):
    with PPOTrainer(tiny(env=lambda cfg: gym.make("CartPole-v1")), run_dir=tmp_path) as t:
        t.train()
        path = t.save()
    with pytest.raises(ValueError, match="pass it"):
        PPOTrainer.restore(path)
    with PPOTrainer.restore(path, env=lambda cfg: gym.make("CartPole-v1"), log=False) as r:
        assert r.train()["training_iteration"] == 2


def test_fit_writes_checkpoints_and_keeps_the_newest(tmp_path):
    config = tiny(checkpoint_freq=1, keep_checkpoints=2)
    with PPOTrainer(config, run_dir=tmp_path) as trainer:
        m = trainer.fit(stop_timesteps=256, progress=False)
    assert m["timesteps_total"] == 256
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "checkpoint_000003",
        "checkpoint_000004",
    ]
    assert json.loads((tmp_path / "config.json").read_text())["env"] == "CartPole-v1"
    with pytest.raises(ValueError, match="stopping criterion"):
        trainer.fit()


def test_fit_with_progress_bar_and_stop_reward(capsys):
    with PPOTrainer(tiny()) as trainer:
        m = trainer.fit(stop_reward=0.0, stop_timesteps=10_000, progress=True)
    assert m["training_iteration"] == 1  # the first finished episodes meet the target
    assert "PPO CartPole-v1" in capsys.readouterr().err


# --- command line ---------------------------------------------------------------------------
def test_cli_train_evaluate_plot_resume(tmp_path, capsys):
    run = tmp_path / "run"
    args = [
        "train",
        "--env",
        "CartPole-v1",
        "--set",
        "num_envs=2",
        "--set",
        "train_batch_size=64",
        "--set",
        "sgd_minibatch_size=32",
        "--set",
        "num_sgd_iter=1",
        "--set",
        "model.fcnet_hiddens=[8]",
        "--stop-timesteps",
        "128",
        "--run-dir",
        str(run),
        "--no-progress",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"plot: {run / 'progress.png'}" in out and "results:" in out
    assert (run / "progress.png").is_file() and (run / "config.json").is_file()
    assert len(read_progress(run)) == 2
    assert main(["evaluate", str(run), "--episodes", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["episodes"] == 2 and len(result["episode_returns"]) == 2
    assert main(["train", "--resume", str(run), "--stop-timesteps", "192", "--no-progress"]) == 0
    assert [r["timesteps_total"] for r in read_progress(run)] == [64, 128, 192]
    out_png = tmp_path / "curve.png"
    assert main(["plot", str(run), "--out", str(out_png)]) == 0
    assert out_png.stat().st_size > 1000


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["train", "--env", "CartPole-v1", "--set", "lrr=1"], "did you mean 'lr'"),
        (["train", "--env", "NoSuchEnv-v0", "--stop-timesteps", "1"], "unknown gymnasium"),
        (["train", "--env", "CartPole-v1", "--set", "lr"], "--set expects key=value"),
        (["train"], "give an environment"),
        (["evaluate", "/no/such/run"], "does not exist"),
        (["plot", "/no/such/run"], "no progress.csv"),
    ],
)
def test_cli_errors(args, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert not Path(tmp_path / "rlblocks_runs").exists()  # nothing written on errors


def test_policy_stacks_a_window_of_observations_for_obs_shift_views():
    """A model with a ``"-2:0"`` obs view gets the last 3 observations, oldest first, and a
    new episode starts with copies of its first observation."""
    import gymnasium as gym
    import numpy as np
    from rlblocks.catalog import ModelCatalog
    from rlblocks.models import FrameStackingModel
    from rlblocks.train.policy import Policy
    from rlblocks.train.trainer_config import PPOConfig

    ModelCatalog.register_custom_model("window_test_model", FrameStackingModel)
    model = {"custom_model": "window_test_model"}
    config = PPOConfig.from_dict({"env": "CartPole-v1", "model": model})
    pol = Policy(gym.spaces.Box(-10, 10, (4,)), gym.spaces.Discrete(2), config)
    assert (pol.obs_window_key, pol.n_obs_frames) == ("prev_n_obs", 3)
    o = [np.full((2, 4), float(t), np.float32) for t in range(4)]
    w = pol.stack_obs(None, o[0])
    assert w.shape == (2, 3, 4) and (w == 0).all()
    w = pol.stack_obs(w, o[1])
    w = pol.stack_obs(w, o[2], new_episode=np.array([1]))
    assert w[0, :, 0].tolist() == [0, 1, 2] and w[1, :, 0].tolist() == [2, 2, 2]
    d = pol.input_dict(w)
    assert d["obs"].shape == (2, 4) and d["prev_n_obs"].shape == (2, 3, 4)
    assert d["obs"][0, 0].item() == 2.0


def test_compute_single_action_equals_the_model_and_carries_state():
    lstm = {"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [16], "max_seq_len": 4}
    trainer = PPOTrainer(
        PPOConfig(env="CartPole-v1", num_envs=2, train_batch_size=64, model=lstm, seed=3)
    )
    try:
        model = trainer.policy.model
        observations = [np.array([0.01 * i, -0.02, 0.03 * i, 0.1], np.float32) for i in range(5)]
        state: list = [s.clone() for s in model.get_initial_state()]
        for obs in observations:
            action, state_out = trainer.compute_single_action(obs, state)
            # The same step through the model itself: logits -> most likely action.
            flat = torch.as_tensor(trainer.preprocessor.transform(obs))[None]
            logits, expected_state = model(
                {"obs": flat}, [s[None] for s in state], torch.tensor([1])
            )
            assert int(action) == int(logits.argmax(-1)[0])
            # [h, c] of the policy's LSTM, then the value LSTM's (PPO default: difference 25)
            assert [tuple(s.shape) for s in state_out] == [(8,)] * 4
            for got, want in zip(state_out, expected_state, strict=True):
                torch.testing.assert_close(got, want[0])
            state = state_out
        assert not torch.equal(state[0], model.get_initial_state()[0])  # the state moved
        assert trainer.policy.action_space.contains(int(action))
    finally:
        trainer.close()


class _ShiftedActions(gym.ActionWrapper):
    """CartPole whose actions are ``Discrete(2, start=5)``."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.action_space = gym.spaces.Discrete(2, start=5)

    def action(self, action):
        return int(action) - 5


def test_previous_actions_start_at_the_action_spaces_own_start():
    """Before an episode's first step the previous action is the space's lowest action
    (``start``), not 0, which is outside ``Discrete(2, start=5)``."""
    config = {
        "env": lambda cfg: _ShiftedActions(gym.make("CartPole-v1")),
        "num_envs": 2,
        "train_batch_size": 64,
        "sgd_minibatch_size": 32,
        "num_sgd_iter": 1,
        "model": {
            "fcnet_hiddens": [8],
            "use_lstm": True,
            "lstm_cell_size": 8,
            "lstm_use_prev_action": True,
            "max_seq_len": 8,
        },
    }
    with PPOTrainer(config) as trainer:
        assert trainer.policy.initial_prev_action.tolist() == 5
        m = trainer.train()
        assert math.isfinite(m["policy_loss"])
        assert trainer.evaluate(episodes=1, seed=0)["episode_return_mean"] > 0
