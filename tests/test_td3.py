"""TD3 and DDPG (issue 47, item 2): the config table and its refusals, one update against a
reference written out here (clipped double Q at the smoothed target action, the delayed
actor, Polyak targets), the exploration noise's statistics, checkpoints, and the command
line: learning a zoo Box-action env with the defaults, evaluate + export, and the refusal
of ``--backend rllib`` before Ray starts."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import rlblocks
import torch
from rlblocks.cli.train_help import config_class
from rlblocks.config_fields import option_rows
from rlblocks.train import (
    DDPGConfig,
    DDPGTrainer,
    SACConfig,
    TD3Config,
    TD3Trainer,
    restore_trainer,
)
from rlblocks.train.exploration_noise import GaussianNoise, OrnsteinUhlenbeckNoise
from rlblocks.train.learners.sac import SACLearner
from rlblocks.train.learners.td3 import TD3Learner
from rlblocks.train.policy import build_actor

from tests.conftest import run_cli

SMALL = {"model": {"fcnet_hiddens": [8]}, "q_model": {"fcnet_hiddens": [8]}}


# --- the config -------------------------------------------------------------------------------
def test_ddpg_is_td3_with_its_three_additions_off() -> None:
    td3, ddpg = TD3Config(), DDPGConfig()
    assert (td3.twin_q, td3.policy_delay, td3.target_noise) == (True, 2, 0.2)
    assert (ddpg.twin_q, ddpg.policy_delay, ddpg.target_noise) == (False, 1, 0.0)
    for key in ("lr", "tau", "train_batch_size", "exploration_noise", "exploration_sigma"):
        assert getattr(td3, key) == getattr(ddpg, key), key
    assert config_class("TD3") is TD3Config and config_class("DDPG") is DDPGConfig
    keys = {row[0] for row in option_rows(DDPGConfig)}
    assert {"policy_delay", "target_noise", "target_noise_clip", "ou_theta"} <= keys
    # a subclass's default keeps TD3's check
    with pytest.raises(ValueError, match="policy_delay must be an int >= 1, got 0"):
        DDPGConfig.from_dict({"policy_delay": 0})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"target_network_update_freq": 2}, "moves its targets with each delayed actor step"),
        ({"prioritized_replay": True}, "samples its replay uniformly"),
        ({"lr_schedule": [[0, 1e-3]], "critic_lr": 1e-4}, "critic_lr=0.0001 with lr_schedule"),
        ({"exploration_noise": "pink"}, "exploration_noise"),
        ({"target_noise": -0.1}, "target_noise"),
    ],
)
def test_td3_config_refusals(data: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TD3Config.from_dict(data)


def test_discrete_actions_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^TD3 needs a Box action space .* DQN or SAC"):
        TD3Learner(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3), TD3Config(**SMALL))
    with pytest.raises(ValueError, match=r"^DDPG: the Box action space needs finite bounds"):
        TD3Learner(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Box(-np.inf, np.inf, (1,)), DDPGConfig())


# --- the update -------------------------------------------------------------------------------
def _batch(rng: np.random.Generator, b: int = 6) -> SimpleNamespace:
    return SimpleNamespace(
        obs=rng.normal(size=(b, 3)).astype(np.float32),
        actions=rng.uniform(-2, 2, (b, 2)).astype(np.float32),
        rewards=rng.normal(size=b).astype(np.float32),
        next_obs=rng.normal(size=(b, 3)).astype(np.float32),
        discounts=np.where(rng.random(b) < 0.3, 0.0, 0.99).astype(np.float32),
        weights=np.ones(b, np.float32),
    )


def _q(critic: torch.nn.Module, obs: torch.Tensor, unit_actions: torch.Tensor) -> torch.Tensor:
    feats, _ = critic({"obs": obs}, [], None)
    return critic.get_single_q_value(feats, unit_actions).reshape(-1)


def _mu(actor: torch.nn.Module, obs: torch.Tensor) -> torch.Tensor:
    out, _ = actor({"obs": obs}, [], None)
    return torch.tanh(out[:, :2])


def test_one_td3_update_matches_the_reference() -> None:
    torch.manual_seed(0)
    cfg = TD3Config(target_noise=0.3, target_noise_clip=0.1, tau=0.25, **SMALL)
    low, high = np.array([-2, -2], np.float32), np.array([2, 2], np.float32)
    learner = TD3Learner(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(low, high), cfg)
    batch = _batch(np.random.default_rng(0))
    obs, nxt = torch.as_tensor(batch.obs), torch.as_tensor(batch.next_obs)
    a = torch.as_tensor(batch.actions) / 2.0  # Box(-2, 2) -> [-1, 1]
    r, d = torch.as_tensor(batch.rewards), torch.as_tensor(batch.discounts)
    ref = copy.deepcopy([learner.actor, learner.critics, learner.target_actor])
    ref_actor, ref_critics, ref_target_actor = ref
    ref_target_critics = copy.deepcopy(learner.target_critics)
    critic_opt = torch.optim.Adam(ref_critics.parameters(), lr=cfg.critic_lr, eps=1e-8)
    actor_opt = torch.optim.Adam(ref_actor.parameters(), lr=cfg.actor_lr, eps=1e-8)

    def reference_step(seed: int, actor_step: bool) -> tuple[torch.Tensor, torch.Tensor, float]:
        torch.manual_seed(seed)
        with torch.no_grad():
            smoothed = _mu(ref_target_actor, nxt)
            noise = (torch.randn_like(smoothed) * 0.3).clamp(-0.1, 0.1)
            smoothed = (smoothed + noise).clamp(-1, 1)
            q_next = torch.minimum(*(_q(c, nxt, smoothed) for c in ref_target_critics))
            y = r + d * q_next
        critic_opt.zero_grad()
        qs = [_q(c, obs, a) for c in ref_critics]
        loss = sum(((q - y) ** 2).mean() for q in qs)
        loss.backward()
        critic_opt.step()
        td = sum((q - y).abs() for q in qs).detach() / 2
        if actor_step:
            actor_opt.zero_grad()
            (-_q(ref_critics[0], obs, _mu(ref_actor, obs)).mean()).backward()
            actor_opt.step()
            with torch.no_grad():
                for online, target in (
                    (ref_actor, ref_target_actor),
                    (ref_critics, ref_target_critics),
                ):
                    for p, t in zip(online.parameters(), target.parameters(), strict=True):
                        t.copy_(0.75 * t + 0.25 * p)
        return y, td, float(loss.detach())

    actor_before = [p.detach().clone() for p in learner.actor.parameters()]
    targets_before = [p.detach().clone() for p in learner.target_critics.parameters()]
    for step, seed in enumerate((11, 12), start=1):
        torch.manual_seed(seed)  # the target alone: the same draw of smoothing noise
        y = learner.targets(nxt, batch.rewards, batch.discounts)
        want_y, td, loss = reference_step(seed, actor_step=step == 2)
        torch.testing.assert_close(y, want_y, rtol=0, atol=1e-7)
        torch.manual_seed(seed)
        stats, priorities = learner.update(batch, 1000)
        assert stats["qf_loss"] == pytest.approx(loss, rel=1e-6)
        np.testing.assert_allclose(priorities, td.numpy(), rtol=1e-5, atol=1e-7)
        for mine, want in zip(learner.critics.parameters(), ref_critics.parameters(), strict=True):
            torch.testing.assert_close(mine, want, rtol=1e-5, atol=1e-6)
        if step == 1:  # the actor and the targets wait for the second update
            assert "actor_loss" not in stats and priorities.shape == (6,)
            for mine, before in zip(learner.actor.parameters(), actor_before, strict=True):
                assert torch.equal(mine, before)
            for mine, before in zip(
                learner.target_critics.parameters(), targets_before, strict=True
            ):
                assert torch.equal(mine, before)
        else:
            assert "actor_loss" in stats
    pairs = [
        (learner.actor, ref_actor),
        (learner.target_actor, ref_target_actor),
        (learner.target_critics, ref_target_critics),
    ]
    for mine_net, want_net in pairs:
        for mine, want in zip(mine_net.parameters(), want_net.parameters(), strict=True):
            torch.testing.assert_close(mine, want, rtol=1e-5, atol=1e-6)


def test_ddpg_bootstraps_its_one_target_critic_at_the_target_action() -> None:
    torch.manual_seed(1)
    learner = TD3Learner(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), DDPGConfig())
    assert len(learner.critics) == 1
    batch = _batch(np.random.default_rng(1))
    nxt = torch.as_tensor(batch.next_obs)
    with torch.no_grad():
        want = torch.as_tensor(batch.rewards) + torch.as_tensor(batch.discounts) * _q(
            learner.target_critics[0], nxt, _mu(learner.target_actor, nxt)
        )
    got = learner.targets(nxt, batch.rewards, batch.discounts)
    torch.testing.assert_close(got, want)


# --- acting and its noise ---------------------------------------------------------------------
def test_ou_noise_reverts_to_its_mean_with_the_stationary_spread() -> None:
    torch.manual_seed(0)
    quiet = OrnsteinUhlenbeckNoise(sigma=0.0, theta=0.5, dt=0.1)
    quiet.draw(1, 1)
    quiet.state = np.ones((1, 1), np.float32)
    path = [float(quiet.draw(1, 1)[0, 0]) for _ in range(20)]
    np.testing.assert_allclose(path, 0.95 ** np.arange(1, 21), rtol=1e-5)
    noise = OrnsteinUhlenbeckNoise(sigma=0.3, theta=0.5, dt=0.1)
    draws = np.stack([noise.draw(2000, 1)[:, 0] for _ in range(200)])
    late = draws[100:]  # past the transient (0.95^100 < 0.01)
    assert abs(late.mean()) < 0.02
    assert abs(late.std() / noise.stationary_std - 1) < 0.05
    lag1 = np.mean(late[1:] * late[:-1]) / np.mean(late * late)
    assert abs(lag1 - 0.95) < 0.02  # correlated in time, unlike Gaussian noise
    gauss = np.stack([GaussianNoise(0.3).draw(2000, 1)[:, 0] for _ in range(20)])
    assert abs(gauss.std() / 0.3 - 1) < 0.03
    assert abs(np.mean(gauss[1:] * gauss[:-1]) / np.mean(gauss * gauss)) < 0.03


def test_acting_is_uniform_first_then_the_actor_plus_clipped_noise() -> None:
    torch.manual_seed(0)
    space = gym.spaces.Box(np.array([0.0, -4.0], np.float32), np.array([1.0, 4.0], np.float32))
    cfg = TD3Config(learning_starts=100, exploration_sigma=0.0, **SMALL)
    learner = TD3Learner(gym.spaces.Box(-1, 1, (3,)), space, cfg)
    obs = np.random.default_rng(0).normal(size=(4000, 3)).astype(np.float32)
    warm = learner.act(obs, True, 99)
    assert ((warm >= space.low) & (warm <= space.high)).all()
    np.testing.assert_allclose(warm.mean(0), [0.5, 0.0], atol=0.05)
    np.testing.assert_allclose(warm.std(0), [1 / 12**0.5, 8 / 12**0.5], rtol=0.05)
    greedy = learner.act(obs, False, 100)
    with torch.no_grad():
        unit = _mu(learner.actor, torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(greedy, space.low + (unit + 1) / 2 * (space.high - space.low),
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    np.testing.assert_allclose(learner.act(obs, True, 100), greedy, rtol=1e-5, atol=1e-5)
    learner.noise = GaussianNoise(10.0)
    loud = learner.act(obs, True, 100)
    assert ((loud >= space.low) & (loud <= space.high)).all()
    assert np.isin(loud, [0.0, 1.0, -4.0, 4.0]).mean() > 0.9  # clipped to the bounds


def test_warmup_noise_adds_the_exploration_noise_to_the_uniform_actions_then_clips() -> None:
    """Stable-Baselines3's warm-up (issue 47): before ``learning_starts`` the uniform action
    plus the Gaussian noise, clipped to the Box; the share of components clipped to a bound
    is sigma / sqrt(2 pi) for a noise much narrower than the Box (both bounds together:
    P(U + N > 1) = (1/2) int_0^2 Q(t / sigma) dt, about sigma / (2 sqrt(2 pi)))."""
    space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    obs = np.zeros((20000, 3), np.float32)
    plain = TD3Learner(space, space, TD3Config(learning_starts=10, **SMALL))
    noisy = TD3Learner(space, space, TD3Config(learning_starts=10, warmup_noise=True, **SMALL))
    torch.manual_seed(1)
    warm = noisy.act(obs, True, 9)
    torch.manual_seed(1)  # the same draws written out: uniform first, then the noise
    unit = torch.rand(20000, 3).numpy() * 2.0 - 1.0
    expected = np.clip(unit + (torch.randn(20000, 3) * 0.1).numpy(), -1.0, 1.0)
    np.testing.assert_allclose(warm, expected, atol=1e-6)
    at_bounds = float(np.mean(np.abs(warm) == 1.0))
    assert abs(at_bounds - 0.1 / np.sqrt(2 * np.pi)) < 0.004  # 0.0399; sd of the share 0.0008
    torch.manual_seed(1)
    uniform = plain.act(obs, True, 9)  # without the key: the uniform actions alone
    np.testing.assert_allclose(uniform, unit, atol=1e-6)
    assert not np.any(np.abs(uniform) == 1.0)
    torch.manual_seed(2)  # from learning_starts on the key changes nothing
    after = noisy.act(obs[:5], True, 10)
    torch.manual_seed(2)
    noisy.config = plain.config
    np.testing.assert_array_equal(noisy.act(obs[:5], True, 10), after)


# --- checkpoints ------------------------------------------------------------------------------
def test_a_ddpg_run_resumes_exactly(tmp_path: Path) -> None:
    cfg = {
        "env": "rlblocks/zoo-BoxAction-v0",
        "timesteps_per_iteration": 64,
        "learning_starts": 32,
        "train_batch_size": 16,
        "checkpoint_replay": True,
        "exploration_noise": "ornstein_uhlenbeck",
        **SMALL,
    }
    with DDPGTrainer(cfg, run_dir=tmp_path / "a") as trainer:
        trainer.train()
        path = trainer.save()
        want = trainer.train()
        want_params = [p.detach().clone() for p in trainer.learner.actor.parameters()]
    resumed = restore_trainer(path)
    with resumed:
        assert type(resumed) is DDPGTrainer
        with pytest.raises(ValueError, match="^explore=True: DDPG's actor is deterministic"):
            resumed.evaluate(1, explore=True)
        got = resumed.train()
        assert got["qf_loss"] == want["qf_loss"] and got["actor_loss"] == want["actor_loss"]
        for p, q in zip(resumed.learner.actor.parameters(), want_params, strict=True):
            assert torch.equal(p, q)


# --- the command line -------------------------------------------------------------------------
_CODE = """
import sys
from rlblocks.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
print("ray imported:", "ray" in sys.modules, file=sys.stderr)
sys.exit(code)
"""


def cli(*args: str) -> tuple[int, str, list[str], bool]:
    """``(exit code, stdout, stderr lines before the report, whether Ray was imported)``."""
    where = str(Path(rlblocks.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": where, "OMP_NUM_THREADS": "1"}
    env.pop("RLBLOCKS_TRACEBACK", None)
    out = subprocess.run(
        [sys.executable, "-c", _CODE, *args], capture_output=True, text=True, timeout=300, env=env
    )
    lines = out.stderr.rstrip("\n").splitlines()
    assert lines and lines[-1].startswith("ray imported: "), out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, out.stdout, lines[:-1], lines[-1] == "ray imported: True"


def cli_here(*args: str) -> tuple[int, str, list[str]]:
    """``(exit code, stdout, stderr lines)`` of ``rlblocks ARGS`` run in this process (no
    fresh interpreter: only the Ray checks above need one)."""
    done = run_cli(*args)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr.rstrip("\n").splitlines()


@pytest.mark.ray  # checks that Ray is not imported: meaningful where it is installed
@pytest.mark.parametrize("algo", ["TD3", "DDPG"])
def test_rllib_refuses_td3_and_ddpg_before_ray(tmp_path: Path, algo: str) -> None:
    code, _, lines, ray = cli(
        "train", "--backend", "rllib", "--algo", algo, "--env", "Pendulum-v1",
        "--run-dir", str(tmp_path / "run"),
    )  # fmt: skip
    assert code == 2 and not ray
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1 and "RLlib 2.60 has no TD3 or DDPG" in errors[0], lines
    assert not (tmp_path / "run").exists()


def test_native_td3_refuses_a_discrete_env_in_one_line(tmp_path: Path) -> None:
    code, _, lines = cli_here("train", "--algo", "TD3", "--env", "CartPole-v1", "--no-progress",
                              "--run-dir", str(tmp_path / "run"))  # fmt: skip
    errors = [line for line in lines if ": error: " in line]
    assert code != 0 and len(errors) == 1 and "TD3 needs a Box action space" in errors[0]


def test_td3_learns_the_box_action_zoo_env_with_defaults_then_evaluates_and_exports(
    tmp_path: Path,
) -> None:
    """The zoo env's answer is ``-x`` for its observation ``x``: acting on anything else
    scores the random return (20/3 of 16 per episode); TD3 with the defaults passes 10
    within 2,000 steps (1,000 on the seeds tried)."""
    run = tmp_path / "run"
    code, _, lines = cli_here(
        "train", "--algo", "TD3", "--env", "rlblocks/zoo-BoxAction-v0", "--no-progress",
        "--stop-reward", "10", "--stop-timesteps", "2000", "--run-dir", str(run),
    )  # fmt: skip
    assert code == 0, lines
    rows = (run / "progress.csv").read_text().splitlines()
    header = rows[0].split(",")
    last = dict(zip(header, rows[-1].split(","), strict=True))
    assert float(last["episode_return_mean"]) >= 10, last
    code, out, lines = cli_here("evaluate", str(run), "--episodes", "4", "--seed", "3")
    assert code == 0, lines
    checkpoint = json.loads(out)
    assert checkpoint["episode_return_mean"] >= 10
    pytest.importorskip("onnxruntime", reason="onnxruntime is the export extra")
    code, _, lines = cli_here("export", str(run))
    assert code == 0, lines
    code, out, lines = cli_here("evaluate", str(run), "--episodes", "4", "--seed", "3",
                                "--exported", str(run / "policy.onnx"))  # fmt: skip
    assert code == 0, lines
    exported = json.loads(out)
    np.testing.assert_allclose(
        exported["episode_returns"], checkpoint["episode_returns"], rtol=1e-4
    )


def test_td3_trainer_is_an_offpolicy_sibling() -> None:
    from rlblocks.train.offpolicy import OffPolicyTrainer, SACTrainer

    assert issubclass(TD3Trainer, OffPolicyTrainer) and issubclass(DDPGTrainer, TD3Trainer)
    assert TD3Trainer.train is SACTrainer.train  # the one loop
    assert TD3Trainer.FORMAT != DDPGTrainer.FORMAT


@pytest.mark.ray
@pytest.mark.parametrize("algo", ["TD3", "DDPG"])
def test_the_rllib_trainer_refuses_td3_and_ddpg_in_python_too(tmp_path: Path, algo: str) -> None:
    from rlblocks.rllib.trainer import RLlibTrainer

    with pytest.raises(ValueError, match=f"^--backend rllib: {algo} is not available there"):
        RLlibTrainer({"env": "Pendulum-v1"}, tmp_path / "run", algo=algo)
    assert not (tmp_path / "run").exists()


def test_the_deterministic_actor_acts_in_numpy_for_the_fc_model_else_through_the_module() -> None:
    torch.manual_seed(0)
    obs_space, space = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,))
    fast = TD3Learner(obs_space, space, TD3Config(**SMALL))
    module = copy.deepcopy(fast)
    module.acting_policy().actor = build_actor(module.acting_policy(), fast_paths=False)
    assert type(fast.acting_policy().actor).__name__ == "SquashedActor"
    assert type(module.acting_policy().actor).__name__ == "ModuleActor"
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(fast.act(obs, False, 0), module.act(obs, False, 0), rtol=1e-6)


def test_time_limit_truncations_bootstrap_with_gamma_in_the_td3_replay() -> None:
    # Pendulum only truncates (200 steps), as HalfCheetah does (1,000): no stored transition
    # may carry a terminal's zero discount, and each truncated step's next observation is
    # the episode's final one, not the next episode's first.
    cfg = {
        "env": "Pendulum-v1",
        "timesteps_per_iteration": 400,
        "learning_starts": 10_000,
        "gamma": 0.9,
        "model": {"fcnet_hiddens": [8]},
        "q_model": {"fcnet_hiddens": [8]},
    }
    with pytest.warns(RuntimeWarning, match="took no gradient step"):
        with TD3Trainer(cfg) as trainer:
            assert trainer.train()["episodes_total"] == 2
            batches = [trainer.replay.sample(400) for _ in range(20)]  # each row, surely
    assert len(np.unique(np.concatenate([b.indices for b in batches]))) == 400
    discounts = np.concatenate([b.discounts for b in batches])
    np.testing.assert_allclose(discounts, 0.9, rtol=1e-6)
    # Pendulum's observation is (cos, sin, velocity): the next observation continues the
    # angle of the current one (|velocity| <= 8, dt 0.05), as a reset's random start would not
    obs = np.concatenate([b.obs for b in batches])
    nxt = np.concatenate([b.next_obs for b in batches])
    angle = np.arctan2(obs[:, 1], obs[:, 0])
    next_angle = np.arctan2(nxt[:, 1], nxt[:, 0])
    step = np.angle(np.exp(1j * (next_angle - angle)))
    assert np.abs(step).max() <= 8 * 0.05 + 1e-4


@pytest.mark.parametrize(
    ("learner_class", "config_class"), [(TD3Learner, TD3Config), (SACLearner, SACConfig)]
)
def test_network_init_torch_starts_every_layer_as_torch_and_sb3_do(
    learner_class: type, config_class: type
) -> None:
    # SB3's TD3 and SAC nets are plain nn.Linear stacks at torch's default start: weights and
    # biases uniform within 1/sqrt(fan_in). RLlib's start (the default) has zero biases and
    # normc(0.01) output layers, whose weights are far smaller.
    obs_space, space = gym.spaces.Box(-1, 1, (5,)), gym.spaces.Box(-2, 2, (2,))
    nets = {"model": {"fcnet_hiddens": [64, 48]}, "q_model": {"fcnet_hiddens": [64, 48]}}
    torch.manual_seed(0)
    learner = learner_class(obs_space, space, config_class(**nets, network_init="torch"))
    torch.manual_seed(0)
    rllib = learner_class(obs_space, space, config_class(**nets))
    linears = [
        m
        for net in (learner.actor, *learner.critics)
        for m in net.modules()
        if isinstance(m, torch.nn.Linear)
    ]
    assert len(linears) >= 3 * 3  # the actor's and the critics' (with unused value branches)
    for layer in linears:
        bound = 1.0 / np.sqrt(layer.in_features)
        for p in (layer.weight, layer.bias):
            values = p.detach().numpy()
            assert np.abs(values).max() <= bound
            # uniform within the bound: the spread of U(-b, b), not normc's
            if values.size >= 40:
                assert abs(values.std() / (bound / np.sqrt(3)) - 1) < 0.35, values.size
    for before, after in zip(
        rllib.actor._logits.parameters(), learner.actor._logits.parameters(), strict=True
    ):
        assert np.abs(after.detach().numpy()).mean() > 5 * np.abs(before.detach().numpy()).mean()
    # the targets start as the nets, and the closed form still covers them
    pairs = [(learner.critics, learner.target_critics)]
    if hasattr(learner, "target_actor"):
        pairs.append((learner.actor, learner.target_actor))
    for net, target in pairs:
        for p, q in zip(net.parameters(), target.parameters(), strict=True):
            assert torch.equal(p, q)
    assert learner._backprop() is not None


@pytest.mark.parametrize("config_class", [TD3Config, SACConfig])
def test_network_init_torch_refuses_initializer_keys_it_would_overwrite(
    config_class: type,
) -> None:
    with pytest.raises(
        ValueError,
        match=r"^network_init='torch' restarts every layer with torch's default, so "
        r"q_model\['fcnet_weights_initializer'\] = 'orthogonal' would be overwritten",
    ):
        config_class.from_dict(
            {"network_init": "torch", "q_model": {"fcnet_weights_initializer": "orthogonal"}}
        )
    with pytest.raises(ValueError, match="network_init"):
        config_class.from_dict({"network_init": "sb3"})
    assert DDPGConfig.from_dict({"network_init": "torch"}).network_init == "torch"
