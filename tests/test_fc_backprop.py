"""``FCBackprop``: the hand-written PPO backward pass of the default fully connected model.

Its gradients and statistics are compared with the learner's autograd path and with an
independent reference (the PPO loss written out here with ``torch.distributions`` and
differentiated by autograd); whole updates must give the same parameters on either path;
models, distributions and hooks it does not cover must go to autograd."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.distributions as D
from hypothesis import given, settings
from hypothesis import strategies as st
from rlblocks.catalog import ModelCatalog
from rlblocks.distributions import Categorical
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.modelv2 import ModelV2
from rlblocks.train import PPOTrainer
from rlblocks.train.fast import FCBackprop
from rlblocks.train.learners.ppo import PPOLearner
from rlblocks.train.policy import ModuleActor, Policy
from rlblocks.train.runner import SampleBatch
from rlblocks.train.trainer_config import PPOConfig

OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
STAT_NAMES = ("total_loss", "policy_loss", "vf_loss", "entropy", "kl", "approx_kl", "clipfrac")
ACTION_SPACES = {
    "discrete3": gym.spaces.Discrete(3),
    "discrete4-start-2": gym.spaces.Discrete(4, start=-2),
    "discrete2-start5": gym.spaces.Discrete(2, start=5),
    "box2": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    "box3": gym.spaces.Box(-2.0, 2.0, (3,), np.float32),
    "box-scalar": gym.spaces.Box(-1.0, 1.0, (), np.float32),
}


def make(
    action_space: gym.Space, model: dict, seed: int = 0, obs_space: gym.Space = OBS, **config
) -> tuple[PPOConfig, Policy, PPOLearner]:
    cfg = PPOConfig.from_dict({"model": model, **config})
    torch.manual_seed(seed)
    pol = Policy(obs_space, action_space, cfg)
    return cfg, pol, PPOLearner(pol, cfg)


def make_minibatch(pol: Policy, cfg: PPOConfig, n: int, seed: int) -> dict:
    """A fake minibatch near the current policy, with ratios and value deltas kept 1e-3 away
    from the clip boundaries (where the loss has a kink and rounding may pick either side)."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand((n, *pol.obs_space.shape), generator=g) * 2 - 1
    with torch.no_grad():
        dist, values, _ = pol.forward(pol.input_dict(obs), [], None)
        torch.manual_seed(seed)
        actions = dist.sample()
        logp_now = dist.logp(actions)
        dist_inputs = dist.inputs + 0.2 * torch.randn(dist.inputs.shape, generator=g)
    log_ratio = 0.3 * torch.randn(n, generator=g)
    for edge in (1 - cfg.clip_param, 1 + cfg.clip_param):
        log_ratio[(log_ratio.exp() - edge).abs() < 1e-3] += 0.01
    delta = 0.5 * torch.randn(n, generator=g)
    targets = values + torch.randn(n, generator=g)
    if cfg.vf_clip_param is not None:
        c = cfg.vf_clip_param
        for edge in (-c, c):
            delta[(delta - edge).abs() < 1e-3] += 0.01
        for _ in range(20):  # where max(plain, clipped) switches sides with a jump
            err, err_c = values - targets, values - delta + delta.clamp(-c, c) - targets
            kink = ((err * err - err_c * err_c).abs() < 1e-3) & (delta.abs() > c)
            if not kink.any():
                break
            targets[kink] += 0.05
    return {
        "obs": obs,
        "actions": actions,
        "logp": logp_now - log_ratio,
        "vf_preds": values - delta,
        "dist_inputs": dist_inputs,
        "advantages": torch.randn(n, generator=g),
        "value_targets": targets,
    }


def reference(
    pol: Policy, cfg: PPOConfig, data: dict, kl_coeff: float, normalize: bool
) -> tuple[list, torch.Tensor]:
    """Gradients and the 7 statistics of the PPO loss, written out from its definition
    (``torch.distributions`` for logp, entropy and KL) and differentiated by autograd."""
    params = list(pol.model.parameters())
    out, _ = pol.model(pol.input_dict(data["obs"], is_training=True), [], None)
    values = pol.model.value_function().reshape(-1)
    space = pol.action_space
    if isinstance(space, gym.spaces.Discrete):
        new = D.Categorical(logits=out)
        old = D.Categorical(logits=data["dist_inputs"])
        logp = new.log_prob(data["actions"] - int(space.start))
        entropy = new.entropy().mean()
        kl = D.kl_divergence(old, new).mean()
    else:

        def normal(x: torch.Tensor) -> D.Normal:
            mean, log_std = x.chunk(2, dim=1)
            return D.Normal(mean, log_std.clamp(-20.0, 20.0).exp())

        new, old = normal(out), normal(data["dist_inputs"])
        logp = new.log_prob(data["actions"].reshape(new.mean.shape)).sum(1)
        entropy = new.entropy().sum(1).mean()
        kl = D.kl_divergence(old, new).sum(1).mean()
    log_ratio = logp - data["logp"]
    ratio = log_ratio.exp()
    adv = data["advantages"]
    if normalize:
        adv = (adv - adv.mean()) / (adv.std(correction=0) + 1e-8)
    eps = cfg.clip_param
    policy_loss = -torch.minimum(adv * ratio, adv * ratio.clamp(1 - eps, 1 + eps)).mean()
    vf_err = (values - data["value_targets"]) ** 2
    if cfg.vf_clip_param is not None:
        old_v, c = data["vf_preds"], cfg.vf_clip_param
        vf_err = torch.maximum(
            vf_err, (old_v + (values - old_v).clamp(-c, c) - data["value_targets"]) ** 2
        )
    vf_loss = vf_err.mean()
    total = policy_loss + cfg.vf_loss_coeff * vf_loss - cfg.entropy_coeff * entropy + kl_coeff * kl
    grads = torch.autograd.grad(total, params, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]
    with torch.no_grad():
        stats = torch.stack(
            [
                total,
                policy_loss,
                vf_loss,
                entropy,
                kl,
                ((ratio - 1) - log_ratio).mean(),
                ((ratio - 1).abs() > eps).float().mean(),
            ]
        )
    return grads, stats


def both_paths(learner: PPOLearner, data: dict, normalize: bool) -> dict:
    """``{fast: (grads, stats)}`` of one ``_step`` on each path (the optimizer does not
    step). The gradient buffer is filled with NaN first: every entry must be written."""
    assert learner._backprop is not None, "the fast path should cover this model"
    params = list(learner.policy.model.parameters())
    learner._apply_gradients = lambda: None
    calls = []
    fast_step = learner._backprop.step

    def counting(*args, **kwargs):
        calls.append(1)
        return fast_step(*args, **kwargs)

    learner._backprop.step = counting
    out = {}
    for fast in (True, False):
        learner._fast = learner._backprop if fast else None
        with torch.no_grad():
            for p in params:
                p.grad.fill_(math.nan)
        stats: list = []
        learner._step(data, [], None, None, stats, True, normalize_advantages=normalize)
        grads = [p.grad.clone() for p in params]
        for p, gr in zip(params, grads, strict=True):
            assert torch.isfinite(gr).all(), (
                f"{'fast' if fast else 'autograd'}: {p.shape} not written"
            )
        # the optimizer steps the flat buffer: it must hold the same gradients
        flat = learner._flat
        assert flat is not None
        torch.testing.assert_close(
            flat.param.grad, torch.cat([gr.reshape(-1) for gr in grads]), rtol=0, atol=0
        )
        assert len(stats) == 1
        out[fast] = (grads, stats[0].detach().clone())
    assert calls == [1], "the fast path did not run exactly once"
    return out


def assert_grads_close(got: list, want: list, what: str) -> None:
    """Equal up to float32 rounding: a gradient entry is a sum over rows whose terms may
    cancel, and the two paths add them in different orders, so an entry's error scales with
    the largest entry of its parameter's gradient (atol), not with the entry itself."""
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        atol = 1e-6 + 2e-5 * float(b.abs().max())
        torch.testing.assert_close(
            a, b, rtol=1e-4, atol=atol, msg=lambda m, i=i: f"{what}, parameter {i}: {m}"
        )


def check_against_autograd(
    cfg: PPOConfig, pol: Policy, learner: PPOLearner, data: dict, normalize: bool
) -> list:
    res = both_paths(learner, data, normalize)
    (fast_g, fast_s), (auto_g, auto_s) = res[True], res[False]
    ref_g, ref_s = reference(pol, cfg, data, learner.kl_coeff, normalize)
    assert_grads_close(fast_g, auto_g, "fast vs learner autograd")
    assert_grads_close(fast_g, ref_g, "fast vs reference")
    # all zero only when the loss is flat here (every row clipped, no entropy/KL terms); a
    # total within rounding of zero counts as flat (one standardised row: its advantage is 0
    # in the closed form, 2e-9 in the reference's float32 arithmetic)
    fast_total = sum(float(g.abs().sum()) for g in fast_g)
    ref_total = sum(float(g.abs().sum()) for g in ref_g)
    assert (fast_total > 1e-6) <= (ref_total > 0.0) and (ref_total > 1e-6) <= (fast_total > 0.0)
    for name, a, b, r in zip(STAT_NAMES, fast_s, auto_s, ref_s, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    return fast_g


# --- gradients ---------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    hiddens=st.sampled_from([[], [6], [16, 8], [5, 4, 3]]),
    activation=st.sampled_from(["tanh", "relu", "linear"]),
    vf_share_layers=st.booleans(),
    no_final_linear=st.booleans(),
    free_log_std=st.booleans(),
    action=st.sampled_from(sorted(ACTION_SPACES)),
    obs_shape=st.sampled_from([(5,), (1,), (11,)]),
    entropy_coeff=st.sampled_from([0.0, 0.01, 0.5]),
    kl_coeff=st.sampled_from([0.0, 0.2, 1.0]),
    vf_clip_param=st.sampled_from([None, 0.2, 10.0]),
    clip_param=st.sampled_from([0.1, 0.3]),
    vf_loss_coeff=st.sampled_from([0.5, 1.0]),
    normalize=st.booleans(),
    n=st.integers(1, 64),
    seed=st.integers(0, 2**16),
)
def test_gradients_and_stats_match_autograd(
    hiddens,
    activation,
    vf_share_layers,
    no_final_linear,
    free_log_std,
    action,
    obs_shape,
    entropy_coeff,
    kl_coeff,
    vf_clip_param,
    clip_param,
    vf_loss_coeff,
    normalize,
    n,
    seed,
):
    """Every parameter's gradient and the 7 recorded statistics agree with the learner's
    autograd path and with the reference loss, across models, heads and loss settings."""
    space = ACTION_SPACES[action]
    model = {
        "fcnet_hiddens": hiddens,
        "fcnet_activation": activation,
        "vf_share_layers": vf_share_layers,
        "no_final_linear": no_final_linear,
        "free_log_std": free_log_std and isinstance(space, gym.spaces.Box),
    }
    cfg, pol, learner = make(
        space,
        model,
        seed,
        gym.spaces.Box(-1, 1, obs_shape, np.float32),
        entropy_coeff=entropy_coeff,
        kl_coeff=kl_coeff,
        vf_clip_param=vf_clip_param,
        clip_param=clip_param,
        vf_loss_coeff=vf_loss_coeff,
        normalize_advantages=normalize,
    )
    data = make_minibatch(pol, cfg, n, seed)
    grads = check_against_autograd(cfg, pol, learner, data, normalize)
    if n >= 8:  # some row is inside a clip range (all 8 outside: probability ~1e-7)
        assert sum(float(g.abs().sum()) for g in grads) > 0.0


def test_ratios_at_one_and_far_outside_the_clip_range():
    """Ratios exactly at 1 (ties of the min), far above and below the clip range with
    positive, negative and zero advantages, value deltas at 0 and far outside their clip:
    the gradients still match, and the clip fraction is what the construction says."""
    cfg, pol, learner = make(
        ACTION_SPACES["discrete3"],
        {"fcnet_hiddens": [8, 8]},
        1,
        clip_param=0.2,
        vf_clip_param=0.5,
        normalize_advantages=False,
    )
    n = 48
    g = torch.Generator().manual_seed(0)
    obs = torch.rand(n, 5, generator=g) * 2 - 1
    with torch.no_grad():
        dist, values, _ = pol.forward(pol.input_dict(obs), [], None)
        actions = torch.arange(n) % 3
        logp_now = dist.logp(actions)
    group = torch.arange(n) // 16  # 0: ratio 1, 1: ratio e^2, 2: ratio e^-2
    shift = torch.tensor([0.0, 2.0, -2.0])[group]
    adv = torch.tensor([1.0, -1.0, 0.0, 0.5])[torch.arange(n) % 4]
    vf_shift = torch.tensor([0.0, 3.0, -3.0])[(torch.arange(n) // 3) % 3]
    data = {
        "obs": obs,
        "actions": actions,
        "logp": logp_now - shift,
        "vf_preds": values - vf_shift,
        "dist_inputs": dist.inputs.clone(),
        "advantages": adv,
        "value_targets": values + 0.3 * (torch.arange(n) % 5 - 2.0),
    }
    check_against_autograd(cfg, pol, learner, data, normalize=False)
    stats = both_paths(learner, data, normalize=False)[True][1]
    assert float(stats[6]) == pytest.approx(32 / 48)  # clipfrac: groups 1 and 2
    assert float(stats[4]) == pytest.approx(0.0, abs=1e-6)  # old dist == new dist: KL 0


def test_log_std_beyond_the_clamp_gets_no_gradient():
    """log-stds past +-20 are clamped: their gradient is exactly zero on the fast path, as
    in autograd (free_log_std and log-stds from the output layer)."""
    box = ACTION_SPACES["box2"]
    cfg, pol, learner = make(
        box, {"fcnet_hiddens": [8], "free_log_std": True}, 2, entropy_coeff=0.1, kl_coeff=0.3
    )
    with torch.no_grad():
        pol.model._append_free_log_std.log_std.copy_(torch.tensor([25.0, -0.5]))
    data = make_minibatch(pol, cfg, 24, 3)
    data["actions"] = torch.randn(24, 2)
    data["dist_inputs"][:, 2] = 30.0  # the old distribution clamped too
    grads = check_against_autograd(cfg, pol, learner, data, normalize=True)
    names = [k for k, _ in pol.model.named_parameters()]
    log_std_grad = grads[names.index("_append_free_log_std.log_std")]
    assert log_std_grad[0] == 0.0 and log_std_grad[1] != 0.0

    cfg, pol, learner = make(box, {"fcnet_hiddens": [8]}, 2, entropy_coeff=0.1, kl_coeff=0.3)
    with torch.no_grad():
        pol.model._logits._model[0].bias[2] = 25.0  # the first log-std column: ~25 on every row
    data = make_minibatch(pol, cfg, 24, 4)
    data["actions"] = torch.randn(24, 2)
    grads = check_against_autograd(cfg, pol, learner, data, normalize=True)
    names = [k for k, _ in pol.model.named_parameters()]
    w = grads[names.index("_logits._model.0.weight")]
    b = grads[names.index("_logits._model.0.bias")]
    assert b[2] == 0.0 and (w[2] == 0.0).all() and b[3] != 0.0


# --- whole updates -------------------------------------------------------------------------------
def synthetic_batch(pol: Policy, t_steps: int, n_envs: int, seed: int) -> SampleBatch:
    """A rollout of random observations with the policy's own actions, logp and values."""
    rng = np.random.default_rng(seed)
    shape = pol.obs_space.shape
    obs = rng.uniform(-1, 1, (t_steps, n_envs, *shape)).astype(np.float32)
    torch.manual_seed(seed)
    out = pol.act(obs.reshape(t_steps * n_envs, *shape), [], explore=True)

    def tm(a):
        a = np.asarray(a)
        return a.reshape(t_steps, n_envs, *a.shape[1:])

    return SampleBatch(
        obs=obs,
        actions=tm(out["actions"]),
        logp=tm(out["logp"]).astype(np.float32),
        vf_preds=tm(out["vf_preds"]).astype(np.float32),
        dist_inputs=tm(out["dist_inputs"]).astype(np.float32),
        rewards=rng.normal(size=(t_steps, n_envs)).astype(np.float32),
        dones=rng.random((t_steps, n_envs)) < 0.1,
        prev_actions=None,
        prev_rewards=None,
        last_values=rng.normal(size=n_envs).astype(np.float32),
        seq_starts=np.zeros((0, 2), np.int64),
        seq_states=[],
    )


def twin_updates(action_space: gym.Space, model: dict, batch_fn, rounds: int = 1, **config) -> None:
    """Two identically seeded policies, one learner on the fast path and one forced onto
    autograd: after ``rounds`` updates their parameters and statistics agree."""
    learners = []
    for fast in (True, False):
        _, pol, learner = make(action_space, model, 7, fast_paths=fast, **config)
        learners.append(learner)
    fast_l, auto_l = learners
    start = [p.detach().clone() for p in fast_l.policy.model.parameters()]
    calls = []
    fast_step = fast_l._backprop.step
    fast_l._backprop.step = lambda *a, **k: calls.append(1) or fast_step(*a, **k)
    for r in range(rounds):
        batch = batch_fn(fast_l.policy, r)
        results = [lr.update(batch, np.random.default_rng(r)) for lr in learners]
        assert fast_l._fast is fast_l._backprop and auto_l._fast is None
        for key in results[1]:
            a, b = results[0][key], results[1][key]
            if not (isinstance(b, float) and math.isnan(b)):
                assert a == pytest.approx(b, rel=1e-3, abs=1e-5), key
    assert calls, "the fast path never ran"
    moved = 0.0
    for p, q, s in zip(
        fast_l.policy.model.parameters(), auto_l.policy.model.parameters(), start, strict=True
    ):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-4, atol=2e-5)
        moved = max(moved, float((q.detach() - s).abs().max()))
    assert moved > 1e-2, "the update barely moved the parameters: the comparison is too weak"


@pytest.mark.parametrize(
    "action, model, config",
    [
        (
            "discrete3",
            {"fcnet_hiddens": [16, 16]},
            {"sgd_minibatch_size": 32, "num_sgd_iter": 3, "entropy_coeff": 0.01, "kl_coeff": 0.2},
        ),
        (
            "box2",
            {"fcnet_hiddens": [16], "fcnet_activation": "relu", "free_log_std": True},
            {"sgd_minibatch_size": 128, "num_sgd_iter": 4, "vf_clip_param": 0.5},
        ),  # one minibatch
        (
            "discrete4-start-2",
            {"fcnet_hiddens": [8], "vf_share_layers": True},
            {
                "sgd_minibatch_size": 48,
                "num_sgd_iter": 2,
                "grad_clip": None,
                "normalize_advantages": False,
                "kl_coeff": 0.5,
            },
        ),
        (
            "box-scalar",
            {"fcnet_hiddens": [8, 8], "no_final_linear": True},
            {"sgd_minibatch_size": 64, "num_sgd_iter": 2, "entropy_coeff": 0.1},
        ),
    ],
    ids=[
        "discrete-minibatches",
        "box-free-log-std-one-minibatch",
        "discrete-start-shared",
        "box-scalar-no-final-linear",
    ],
)
def test_update_gives_the_same_parameters_on_either_path(action, model, config):
    """``learner.update`` on a rollout (two rounds, so the adaptive KL coefficient and
    Adam's state carry over) ends with the same parameters with and without FCBackprop."""
    twin_updates(
        ACTION_SPACES[action],
        model,
        lambda pol, r: synthetic_batch(pol, 32, 4, 100 + r),
        rounds=2,
        lr=5e-3,
        train_batch_size=128,
        **config,
    )


def test_update_on_a_real_cartpole_rollout():
    """A batch collected by a PPOTrainer on CartPole: the fast and autograd learners agree."""
    config = {
        "env": "CartPole-v1",
        "num_envs": 2,
        "train_batch_size": 64,
        "sgd_minibatch_size": 32,
        "num_sgd_iter": 2,
        "seed": 3,
        "lr": 1e-2,
        "model": {"fcnet_hiddens": [16]},
    }
    with PPOTrainer(config) as trainer:
        trainer.train()
        batch = trainer.runner.collect(32)
        state = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        obs_space, act_space = trainer.policy.obs_space, trainer.policy.action_space
    learners = []
    for fast in (True, False):
        cfg = PPOConfig.from_dict({**config, "fast_paths": fast})
        pol = Policy(obs_space, act_space, cfg)
        pol.model.load_state_dict(state)
        learner = PPOLearner(pol, cfg)
        learners.append(learner)
    assert learners[0]._backprop is not None
    results = [lr.update(batch, np.random.default_rng(0)) for lr in learners]
    for key in ("total_loss", "policy_loss", "vf_loss", "entropy", "kl", "approx_kl"):
        assert results[0][key] == pytest.approx(results[1][key], rel=1e-3, abs=1e-6), key
    moved = 0.0
    for (name, p), q in zip(
        learners[0].policy.model.named_parameters(),
        learners[1].policy.model.parameters(),
        strict=True,
    ):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-5)
        moved = max(moved, float((p.detach() - state[name]).abs().max()))
    assert moved > 1e-3


# --- what the fast path does not cover -----------------------------------------------------------
class SubclassFC(FullyConnectedNetwork):
    """Behaves as the default model, but a subclass may change anything."""


class CategoricalSubclass(Categorical):
    pass


ModelCatalog.register_custom_model("test_fc_backprop_subclass", SubclassFC)
ModelCatalog.register_custom_action_dist("test_fc_backprop_cat", CategoricalSubclass)

ATTENTION = {
    "use_attention": True,
    "attention_dim": 8,
    "attention_head_dim": 4,
    "attention_memory_inference": 3,
    "attention_memory_training": 3,
    "max_seq_len": 4,
    "attention_position_wise_mlp_dim": 8,
}


@pytest.mark.parametrize(
    "space, model",
    [
        (gym.spaces.Discrete(2), {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4}),
        (gym.spaces.Discrete(2), ATTENTION),
        (gym.spaces.Discrete(2), {"custom_model": "test_fc_backprop_subclass"}),
        (gym.spaces.Discrete(2), {"custom_action_dist": "test_fc_backprop_cat"}),
        (gym.spaces.Discrete(4), {"free_log_std": True}),
        (gym.spaces.Discrete(2), {"fcnet_activation": "elu"}),
        (gym.spaces.Discrete(2), {"fcnet_activation": "swish"}),
        (gym.spaces.Box(-1, 1, (2,), np.float32), {"fcnet_activation": "LeakyReLU"}),
    ],
    ids=[
        "lstm",
        "attention",
        "custom-model",
        "custom-dist",
        "categorical-free-log-std",
        "elu",
        "swish",
        "leaky-relu",
    ],
)
def test_build_returns_none_for_what_it_does_not_cover(space, model):
    cfg, pol, learner = make(space, {"fcnet_hiddens": [8], **model})
    assert FCBackprop.build(pol.model, pol.dist_class, cfg) is None
    assert learner._backprop is None


@pytest.mark.parametrize("space", [gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,), np.float32)])
def test_build_covers_the_default_model(space):
    """The control for the cases above: the same configs with the default pieces build."""
    cfg, pol, learner = make(space, {"fcnet_hiddens": [8]})
    assert FCBackprop.build(pol.model, pol.dist_class, cfg) is not None
    assert learner._backprop is not None


def test_a_config_key_the_hand_written_loss_does_not_know_falls_back_to_autograd():
    """A new loss term (here: a config with one more field) is not silently ignored by the
    closed-form gradients: the learner uses autograd, and trains."""
    import dataclasses

    @dataclasses.dataclass
    class WithValueNoise(PPOConfig):
        value_target_noise: float = 0.1  # a loss term FCBackprop has never heard of

    space = gym.spaces.Discrete(3)
    base = PPOConfig.from_dict({"model": {"fcnet_hiddens": [8]}})
    cfg = WithValueNoise(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    torch.manual_seed(0)
    pol = Policy(OBS, space, cfg)
    assert FCBackprop.build(pol.model, pol.dist_class, base) is not None  # the control
    assert FCBackprop.build(pol.model, pol.dist_class, cfg) is None
    learner = PPOLearner(pol, cfg)
    assert learner._backprop is None
    before = [p.detach().clone() for p in pol.model.parameters()]
    learner.update(synthetic_batch(pol, 16, 4, 0), np.random.default_rng(0))
    assert any(not torch.equal(b, p) for b, p in zip(before, pol.model.parameters(), strict=True))


def test_fast_paths_off_runs_the_plain_torch_path():
    cfg, pol, learner = make(gym.spaces.Discrete(3), {"fcnet_hiddens": [8]}, fast_paths=False)
    assert isinstance(pol.actor, ModuleActor)
    assert learner._backprop is None and learner._flat is None
    assert not learner.optimizer.param_groups[0].get("fused")


def test_build_returns_none_for_custom_loss_and_frozen_parameters(monkeypatch):
    space = gym.spaces.Discrete(2)
    cfg, pol, _ = make(space, {"fcnet_hiddens": [8]})
    assert FCBackprop.build(pol.model, pol.dist_class, cfg) is not None
    pol.model.custom_loss = lambda loss, inputs: loss * 2  # on the instance
    assert FCBackprop.build(pol.model, pol.dist_class, cfg) is None

    cfg, pol, _ = make(space, {"fcnet_hiddens": [8]})
    monkeypatch.setattr(
        FullyConnectedNetwork,
        "custom_loss",
        lambda self, loss, inputs: ModelV2.custom_loss(self, loss, inputs),
    )
    assert FCBackprop.build(pol.model, pol.dist_class, cfg) is None
    monkeypatch.undo()
    assert FCBackprop.build(pol.model, pol.dist_class, cfg) is not None

    pol.model._logits._model[0].bias.requires_grad_(False)
    assert FCBackprop.build(pol.model, pol.dist_class, cfg) is None
    assert PPOLearner(pol, cfg)._backprop is None


# (on the Linear primitives: FullyConnectedNetwork.forward calls a SlimFC's parts directly,
# so a hook on the SlimFC wrapper itself is not called on either path)
def _forward(model, calls):
    return model._hidden_layers[0]._model[0].register_forward_hook(lambda *a: calls.append("f"))


def _forward_pre(model, calls):
    return model._value_branch._model[0].register_forward_pre_hook(lambda *a: calls.append("p"))


def _full_backward(model, calls):
    return model._logits._model[0].register_full_backward_hook(lambda *a: calls.append("b"))


def _param_hook(model, calls):
    return model._value_branch._model[0].weight.register_hook(lambda g: calls.append("g"))


def _global_forward(model, calls):
    return torch.nn.modules.module.register_module_forward_hook(lambda *a: calls.append("G"))


@pytest.mark.parametrize(
    "register",
    [_forward, _forward_pre, _full_backward, _param_hook, _global_forward],
    ids=["forward", "forward-pre", "full-backward", "tensor-hook", "global-forward"],
)
def test_hooks_switch_the_learner_to_autograd(register):
    """With a hook set, ``usable()`` is False, the update runs through autograd (the hook
    is called) and trains exactly as a learner without the fast path; removing the hook
    makes the fast path usable again."""
    space = gym.spaces.Discrete(3)
    model = {"fcnet_hiddens": [8, 8]}
    config = {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2, "lr": 1e-2}
    _, pol, learner = make(space, model, 5, **config)
    _, twin_pol, twin = make(space, model, 5, fast_paths=False, **config)
    batch = synthetic_batch(pol, 16, 4, 0)
    assert learner._backprop.usable()
    calls: list = []
    handle = register(pol.model, calls)
    try:
        assert not learner._backprop.usable()
        learner._backprop.step = lambda *a, **k: pytest.fail("the fast path ran despite a hook")
        learner.update(batch, np.random.default_rng(0))
        assert learner._fast is None
        assert calls, "the hook was not called"
    finally:
        handle.remove()
    twin.update(batch, np.random.default_rng(0))
    for p, q in zip(pol.model.parameters(), twin_pol.model.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-7)
    assert learner._backprop.usable()


# --- edge cases: gradient hooks, zero_grad, parametrized layers ----------------------------------
def test_post_accumulate_grad_hook_switches_to_autograd():
    _, pol, learner = make(
        gym.spaces.Discrete(2),
        {"fcnet_hiddens": [8]},
        train_batch_size=64,
        sgd_minibatch_size=32,
        num_sgd_iter=1,
    )
    batch = synthetic_batch(pol, 16, 4, 0)
    calls: list = []
    p = next(pol.model.parameters())
    handle = p.register_post_accumulate_grad_hook(lambda t: calls.append(1))
    try:
        learner.update(batch, np.random.default_rng(0))
    finally:
        handle.remove()
    assert calls, "the post-accumulate-grad hook was skipped"


def test_fast_path_survives_model_zero_grad():
    """A user's ``model.zero_grad()`` between updates must not stop training."""
    space = gym.spaces.Discrete(3)
    model = {"fcnet_hiddens": [8]}
    config = {"train_batch_size": 64, "sgd_minibatch_size": 32, "num_sgd_iter": 2, "lr": 1e-2}
    _, pol, learner = make(space, model, 5, **config)
    _, twin_pol, twin = make(space, model, 5, fast_paths=False, **config)
    batch = synthetic_batch(pol, 16, 4, 0)
    for lr, p in ((learner, pol), (twin, twin_pol)):
        p.model.zero_grad()
        lr.update(batch, np.random.default_rng(0))
    for p, q in zip(pol.model.parameters(), twin_pol.model.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-5)


def test_parametrized_layers_are_left_to_autograd():
    space = gym.spaces.Discrete(3)
    model = {"fcnet_hiddens": [8]}
    pols, learners = [], []
    for fast in (True, False):
        cfg = PPOConfig.from_dict(
            {
                "model": model,
                "train_batch_size": 64,
                "sgd_minibatch_size": 32,
                "num_sgd_iter": 2,
                "lr": 1e-2,
                "fast_paths": fast,
            }
        )
        torch.manual_seed(5)
        pol = Policy(OBS, space, cfg)
        torch.nn.utils.parametrizations.weight_norm(pol.model._hidden_layers[0]._model[0])
        learner = PPOLearner(pol, cfg)
        pols.append(pol)
        learners.append(learner)
    batch = synthetic_batch(pols[1], 16, 4, 0)
    for lr in learners:
        lr.update(batch, np.random.default_rng(0))
    for p, q in zip(pols[0].model.parameters(), pols[1].model.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-5)


# --- the numpy pass ----------------------------------------------------------------------------
@pytest.mark.parametrize("vf_share_layers", [False, True])
@pytest.mark.parametrize("action", ["discrete3", "box2"])
def test_cpu_float32_models_run_the_numpy_pass_as_the_torch_pass(
    vf_share_layers: bool, action: str
) -> None:
    """A CPU float32 model's layers and PPO loss run in numpy (issue 48's CartPole update):
    the same gradients and statistics as the torch pass (and autograd); float64 keeps
    torch."""
    model = {"fcnet_hiddens": [16, 8], "vf_share_layers": vf_share_layers}
    cfg, pol, learner = make(
        ACTION_SPACES[action], model, vf_clip_param=0.2, entropy_coeff=0.01, kl_coeff=0.2
    )
    fast = learner._backprop
    assert fast is not None and fast._numpy is not None
    data = make_minibatch(pol, cfg, 32, seed=3)
    out = {}
    for name, npass in (("numpy", fast._numpy), ("torch", None)):
        fast._numpy = npass
        for p in fast.params:
            p.grad = torch.full_like(p, math.nan)
        total, stats = fast.step(data, 0.2, True, True)
        out[name] = ([p.grad.clone() for p in fast.params], total, stats)
    (g_np, t_np, s_np), (g_t, t_t, s_t) = out["numpy"], out["torch"]
    assert_grads_close(g_np, g_t, "numpy vs torch pass")
    torch.testing.assert_close(t_np, t_t, rtol=1e-5, atol=1e-6)
    assert s_np is not None and s_t is not None
    torch.testing.assert_close(s_np, s_t, rtol=1e-5, atol=1e-6)
    ref_g, _ = reference(pol, cfg, data, 0.2, True)
    assert_grads_close(g_np, ref_g, "numpy pass vs reference")

    pol64 = Policy(OBS, ACTION_SPACES[action], cfg)
    pol64.model.double()
    fast64 = FCBackprop.build(pol64.model, pol64.dist_class, cfg)
    assert fast64 is not None and fast64._numpy is None
