"""gSDE for SAC (``use_sde``): the density SAC scores against torch.distributions, the
exploration matrices' schedule and per-env independence, the update and the fixed entropy
coefficient, resume, and the refusals (other algorithms, the RLlib backend, settings that
need ``use_sde``, actors gSDE cannot read)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.config import ModelConfig
from rlblocks.replay import ReplaySample
from rlblocks.train.algo_spaces import check_rllib_q_keys
from rlblocks.train.gsde import StateDependentNoise
from rlblocks.train.learners.sac import SACLearner
from rlblocks.train.offpolicy_config import DQNConfig, SACConfig, TD3Config
from rlblocks.train.trainer_config import PPOConfig

OBS = gym.spaces.Box(-1.0, 1.0, (3,))
ACT = gym.spaces.Box(-2.0, 2.0, (2,))
SMALL = {"fcnet_hiddens": [8]}


def learner(**kw: Any) -> SACLearner:
    cfg = SACConfig(use_sde=True, log_std_init=-1.0, model=SMALL, q_model=SMALL, **kw)
    return SACLearner(OBS, ACT, cfg)


def rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, 3)).astype(np.float32)


def batch(n: int = 16) -> ReplaySample:
    rng = np.random.default_rng(1)
    obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    return ReplaySample(
        obs,
        rng.uniform(-2, 2, (n, 2)).astype(np.float32),
        rng.normal(size=n).astype(np.float32),
        rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        np.full(n, 0.99, np.float32),
        np.ones(n, np.float32),
        np.arange(n),
    )


# --- the density ---------------------------------------------------------------------------------
@pytest.mark.parametrize("full_std, use_expln", [(True, False), (False, False), (True, True)])
def test_logp_is_the_gaussian_of_variance_phi2_sigma2_then_the_tanh_correction(
    full_std: bool, use_expln: bool
) -> None:
    """Before squashing, u_i ~ N(mu_i, sum_j phi_j^2 sigma_ji^2) (+1e-6), scored by
    torch.distributions.Normal; the squashed density subtracts sum log(1 - tanh(u)^2 + 1e-6)."""
    torch.manual_seed(0)
    noise = StateDependentNoise(5, 2, 0.0, full_std=full_std, use_expln=use_expln)
    with torch.no_grad():
        noise.log_std.normal_(0.0, 1.0)  # entries on both sides of 0 (expln's two branches)
    mean, phi = torch.randn(7, 2), torch.randn(7, 5)
    w = noise.draw(1)[0]
    action, logp = noise.rsample_and_logp(mean, phi, w)
    u = mean + phi @ w
    x = noise.log_std.detach().expand(5, 2)
    sigma = torch.where(x <= 0, x.exp(), torch.log1p(x.clamp(min=0)) + 1) if use_expln else x.exp()
    variance = (phi[:, :, None] ** 2 * sigma[None] ** 2).sum(1)  # sum_j phi_j^2 sigma_ji^2
    gaussian = torch.distributions.Normal(mean, (variance + 1e-6).sqrt())
    expected = gaussian.log_prob(u).sum(-1)
    torch.testing.assert_close(noise.presquash_logp(mean, phi, u), expected)
    correction = torch.log(1 - torch.tanh(u) ** 2 + 1e-6).sum(-1)
    torch.testing.assert_close(logp, expected - correction)
    torch.testing.assert_close(action, torch.tanh(u))


@pytest.mark.parametrize("learn_features", [True, False])
def test_gradients_reach_log_std_and_the_features_only_when_learnt(learn_features: bool) -> None:
    """SAC learns the features (Stable-Baselines3's SAC actor: learn_features=True); False
    detaches them."""
    torch.manual_seed(0)
    noise = StateDependentNoise(4, 2, -1.0, learn_features=learn_features)
    phi = torch.randn(3, 4, requires_grad=True)
    action, logp = noise.sample(torch.zeros(3, 4), phi)  # out: means then 2 unused columns
    (action.sum() + logp.sum()).backward()
    assert noise.log_std.grad is not None and bool(noise.log_std.grad.abs().sum() > 0)
    assert (phi.grad is not None) == learn_features


# --- the schedule ---------------------------------------------------------------------------------
def test_noise_is_constant_within_a_round_and_redrawn_at_the_next() -> None:
    """sde_sample_freq=-1: one W per collection round of train_freq steps."""
    torch.manual_seed(0)
    sac = learner(train_freq=4)
    obs = rows(1)
    first = [sac.act(obs, True, t) for t in range(4)]
    assert all(np.array_equal(a, first[0]) for a in first)
    assert not np.array_equal(sac.act(obs, True, 4), first[0])
    assert np.array_equal(sac.act(obs, True, 5), sac.act(obs, True, 7))


def test_sde_sample_freq_redraws_every_k_steps_of_each_env() -> None:
    torch.manual_seed(0)
    sac = learner(train_freq=100, sde_sample_freq=2)
    obs = rows(2)  # two envs: a vector step is 2 env steps
    a0, a1, a2 = (sac.act(obs, True, t) for t in (0, 2, 4))
    assert np.array_equal(a0, a1)  # steps 0 and 1 of each env
    assert not np.array_equal(a0, a2)  # step 2 of each env: a new W


def test_each_env_has_its_own_matrix_and_the_noise_is_phi_w() -> None:
    torch.manual_seed(0)
    sac = learner()
    obs = np.repeat(rows(1), 3, axis=0)  # three envs in the same state
    actions = sac.act(obs, True, 0)
    assert len({tuple(a) for a in actions.round(6)}) == 3
    assert sac.sde is not None and sac.sde.weights is not None
    w = sac.sde.weights
    assert not torch.equal(w[0], w[1]) and not torch.equal(w[1], w[2])
    with torch.no_grad():
        out, _ = sac.actor({"obs": torch.as_tensor(obs)}, [], None)
        phi = sac.actor._features
        assert phi is not None
        u = out[:, :2] + torch.stack([phi[i] @ w[i] for i in range(3)])
    expected = (torch.tanh(u).numpy() + 1) / 2 * 4 - 2
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-6)


def test_deterministic_actions_are_the_squashed_mean_as_without_gsde() -> None:
    torch.manual_seed(0)
    sac = learner()
    obs = rows(4)
    greedy = sac.act(obs, False, 0)
    with torch.no_grad():
        out, _ = sac.actor({"obs": torch.as_tensor(obs)}, [], None)
    np.testing.assert_allclose(greedy, (np.tanh(out[:, :2].numpy()) + 1) / 2 * 4 - 2, atol=1e-6)
    assert np.array_equal(greedy, sac.act(obs, False, 9))


# --- the update, the fixed coefficient, resume ----------------------------------------------
def test_update_trains_log_std_and_alpha_lr_0_keeps_alpha() -> None:
    torch.manual_seed(0)
    sac = learner(initial_alpha=0.1, alpha_lr=0.0)
    assert sac.sde is not None and sac._backprop() is None  # the closed form declines gSDE
    before = sac.sde.log_std.detach().clone()
    for _ in range(3):
        stats, _ = sac.update(batch(), 0)
    assert all(np.isfinite(v) for v in stats.values())
    assert not torch.equal(before, sac.sde.log_std.detach())
    assert sac.alpha == pytest.approx(0.1)


def test_resume_keeps_log_std_and_the_acting_matrices() -> None:
    torch.manual_seed(0)
    sac = learner(train_freq=8)
    sac.update(batch(), 0)
    obs = rows(2)
    acted = sac.act(obs, True, 3)
    torch.manual_seed(1)
    other = learner(train_freq=8)
    other.load_state_dict(sac.state_dict())
    assert np.array_equal(other.act(obs, True, 5), acted)  # the same round: the same W
    plain = SACLearner(OBS, ACT, SACConfig(model=SMALL, q_model=SMALL))
    with pytest.raises(ValueError, match="holds gSDE's 'sde' entry; this learner has use_sde"):
        plain.load_state_dict(sac.state_dict())
    with pytest.raises(ValueError, match=r"missing \['sde'\]"):
        other.load_state_dict(plain.state_dict())


# --- refusals ----------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [PPOConfig, DQNConfig, TD3Config])
def test_other_algorithms_refuse_use_sde_by_name(cls: Any) -> None:
    with pytest.raises(ValueError, match=r"^use_sde: gSDE .* is implemented for SAC only; "):
        cls.from_dict({"use_sde": True})


def test_sac_refuses_gsde_settings_without_use_sde_and_a_bad_frequency() -> None:
    with pytest.raises(ValueError, match=r"^log_std_init=-2.0 is a gSDE setting: it needs use_sde"):
        SACConfig.from_dict({"log_std_init": -2.0})
    with pytest.raises(ValueError, match=r"^sde_sample_freq must be -1 .* got 0"):
        SACConfig.from_dict({"use_sde": True, "sde_sample_freq": 0})
    with pytest.raises(ValueError, match=r"^use_sde_at_warmup: rlblocks' SAC has no uniform"):
        SACConfig.from_dict({"use_sde": True, "use_sde_at_warmup": True})


def test_gsde_refuses_discrete_actions_and_actors_without_hidden_features() -> None:
    cfg = SACConfig(use_sde=True, model=SMALL, q_model=SMALL)
    with pytest.raises(ValueError, match=r"^use_sde: gSDE perturbs continuous actions"):
        SACLearner(OBS, gym.spaces.Discrete(3), cfg)
    cfg = SACConfig(use_sde=True, model={**SMALL, "no_final_linear": True}, q_model=SMALL)
    with pytest.raises(ValueError, match=r"^use_sde: gSDE reads the actor's last hidden"):
        SACLearner(OBS, ACT, cfg)


def test_rllib_backend_refuses_use_sde() -> None:
    with pytest.raises(ValueError, match=r"^use_sde=True: SAC on --backend rllib cannot honour"):
        check_rllib_q_keys(SACConfig(env="Pendulum-v1", use_sde=True), "SAC")


def test_model_config_is_untouched_by_the_sac_key() -> None:
    """log_std_init is SAC's key, not a model key."""
    cfg = SACConfig(use_sde=True, log_std_init=-3.67, model=SMALL)
    assert cfg.model_config() == ModelConfig.from_dict({**cfg.model_config().to_dict()})
    assert "log_std_init" not in cfg.model


def test_a_gsde_run_trains_and_refuses_exploring_evaluation() -> None:
    """One iteration of a Pendulum run with gSDE: updates happen, the acting matrix is one
    per env, the deterministic evaluation runs and ``explore=True`` is refused."""
    from rlblocks.train.offpolicy import SACTrainer

    trainer = SACTrainer(
        {
            "env": "Pendulum-v1",
            "num_envs": 2,
            "use_sde": True,
            "model": SMALL,
            "timesteps_per_iteration": 200,
            "learning_starts": 100,
            "train_batch_size": 32,
        }
    )
    try:
        assert trainer.train()["num_updates"] > 0
        sde = trainer.learner.sde
        assert sde is not None and sde.weights is not None and sde.weights.shape[0] == 2
        with pytest.raises(ValueError, match=r"^explore=True: this SAC run explores with gSDE"):
            trainer.evaluate(episodes=1, explore=True)
        assert np.isfinite(trainer.evaluate(episodes=1)["episode_return_mean"])
    finally:
        trainer.close()


def test_the_cli_start_says_which_paths_serve_a_gsde_run(tmp_path, capsys) -> None:
    """The closed-form update and the numpy acting path decline gSDE visibly; config.json
    keeps the keys."""
    import json

    from rlblocks.cli import main

    run = tmp_path / "run"
    args = ["--set", "use_sde=true", "--set", "log_std_init=-2", "--set", "learning_starts=16"]
    assert (
        main(
            [
                "train",
                "--algo",
                "SAC",
                "--env",
                "Pendulum-v1",
                *args,
                "--stop-timesteps",
                "64",
                "--no-progress",
                "--run-dir",
                str(run),
            ]
        )  # fmt: skip
        == 0
    )
    out = capsys.readouterr().out
    assert "rlblocks train: gSDE exploration (use_sde): SAC's closed-form update and numpy" in out
    config = json.loads((run / "config.json").read_text())
    assert config["use_sde"] is True and config["log_std_init"] == -2
