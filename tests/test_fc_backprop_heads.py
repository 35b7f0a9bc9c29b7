"""``FCBackprop`` on every action head it covers beyond Categorical / DiagGaussian:
MultiCategorical (MultiDiscrete, integer Box), masked heads (RLlib's ``action_mask``
observations around the FC model; MaskedCategorical / MaskedMultiCategorical as the
distribution) and Tuple / Dict multi-action heads. Gradients, statistics and whole updates
are compared with the learner's autograd path through the torch distributions; what it
does not cover goes to autograd and says why, once."""

from __future__ import annotations

import logging
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple
from rlblocks.catalog import ModelCatalog
from rlblocks.distributions import Beta, MaskedCategorical, MaskedMultiCategorical
from rlblocks.models.action_mask import ActionMaskModel
from rlblocks.preprocessors import get_preprocessor
from rlblocks.spaces import Simplex
from rlblocks.train.fast import FCBackprop
from rlblocks.train.fast.head_grads import LogitsGrads, MultiActionGrads, head_grads
from rlblocks.train.runner import SampleBatch
from test_fc_backprop import STAT_NAMES, assert_grads_close, both_paths, make, make_minibatch

OBS = Box(-1.0, 1.0, (5,), np.float32)
UNIT = Box(-1.0, 1.0, (1,), np.float32)
HEADS = {
    "multidiscrete": (MultiDiscrete([3, 2]), {}),
    "multidiscrete-equal-start": (MultiDiscrete([4, 4], start=[1, -2]), {}),
    "multidiscrete-2d": (MultiDiscrete([[2, 3], [3, 2]]), {}),
    "int-box-own-bounds": (Box(np.array([0, -1]), np.array([2, 1]), (2,), np.int64), {}),
    "tuple": (Tuple((Discrete(3), UNIT)), {}),
    "dict": (
        Dict({"b": Box(-2, 2, (2,), np.float32), "a": MultiDiscrete([2, 3]), "c": Discrete(2, 1)}),
        {},
    ),
    "nested-tuple": (Tuple((Discrete(2), Tuple((MultiDiscrete([2, 2]), UNIT)))), {}),
    "masked-categorical-dist": (Discrete(4), {"custom_action_dist": "test_heads_masked_cat"}),
    "masked-multicategorical-dist": (
        MultiDiscrete([3, 2]),
        {"custom_action_dist": "test_heads_masked_multicat"},
    ),
    "mask-discrete": (Discrete(4), {"mask": 4}),
    "mask-multidiscrete": (MultiDiscrete([3, 2]), {"mask": 5}),
    "mask-tuple": (Tuple((Discrete(3), UNIT)), {"mask": 3}),
    "mask-and-masked-dist": (
        Discrete(4),
        {"mask": 4, "custom_action_dist": "test_heads_masked_cat"},
    ),
}


ModelCatalog.register_custom_action_dist("test_heads_masked_cat", MaskedCategorical)
ModelCatalog.register_custom_action_dist("test_heads_masked_multicat", MaskedMultiCategorical)
ModelCatalog.register_custom_action_dist("test_heads_beta", Beta)


def obs_space_for(extra: dict) -> gym.Space:
    """The flat observation space: OBS, or RLlib's action-mask Dict around it."""
    if "mask" not in extra:
        return OBS
    space = Dict({"action_mask": MultiBinary(extra["mask"]), "observations": OBS})
    return get_preprocessor(space)(space).observation_space


def random_obs(pol, n: int, rng: np.random.Generator) -> np.ndarray:
    """Observations in [-1, 1]; with a mask, 0/1 mask entries with at least one legal action
    per component (``check_action_mask`` refuses others when acting)."""
    obs = rng.uniform(-1, 1, (n, *pol.obs_space.shape)).astype(np.float32)
    if pol.mask_layout is not None:
        cols = pol.mask_columns
        mask = (rng.random((n, pol.mask_layout.size)) < 0.6).astype(np.float32)
        for start, end in pol.mask_layout.segments:
            mask[np.arange(n), start + rng.integers(0, end - start, n)] = 1.0
        obs[:, cols] = mask
    return obs


def setup(name: str, seed: int = 0, model: dict | None = None, **config):
    space, extra = HEADS[name]
    model = {
        "fcnet_hiddens": [8, 6],
        **{k: v for k, v in extra.items() if k != "mask"},
        **(model or {}),
    }
    return make(space, model, seed, obs_space_for(extra), **config)


@pytest.mark.parametrize("name", sorted(HEADS))
@pytest.mark.parametrize(
    "entropy_coeff, kl_coeff, vf_clip_param, normalize, n",
    [(0.0, 0.0, None, True, 17), (0.05, 0.3, 0.4, False, 40)],
    ids=["plain", "entropy-kl-vfclip"],
)
def test_gradients_and_stats_match_autograd(
    name, entropy_coeff, kl_coeff, vf_clip_param, normalize, n
):
    """Every parameter's gradient and the 7 statistics equal the learner's autograd path
    through the torch distribution (entropy and KL terms included)."""
    cfg, pol, learner = setup(
        name,
        seed=n,
        entropy_coeff=entropy_coeff,
        kl_coeff=kl_coeff,
        vf_clip_param=vf_clip_param,
        normalize_advantages=normalize,
    )
    assert learner._backprop is not None, "the closed form should cover this head"
    data = make_minibatch(pol, cfg, n, seed=n)
    if pol.mask_layout is not None:  # legal masks (the minibatch's uniform obs are random)
        obs = torch.from_numpy(random_obs(pol, n, np.random.default_rng(n)))
        data = make_minibatch_on(pol, cfg, obs, n)
    res = both_paths(learner, data, normalize)
    (fast_g, fast_s), (auto_g, auto_s) = res[True], res[False]
    assert_grads_close(fast_g, auto_g, f"{name}: fast vs autograd")
    assert sum(float(g.abs().sum()) for g in fast_g) > 0.0
    for stat, a, b in zip(STAT_NAMES, fast_s, auto_s, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, s=stat: f"{s}: {m}")


def make_minibatch_on(pol, cfg, obs: torch.Tensor, n: int) -> dict:
    """``make_minibatch`` on given observations (masked envs need legal masks)."""
    g = torch.Generator().manual_seed(n)
    with torch.no_grad():
        dist, values, _ = pol.forward(pol.input_dict(obs), [], None)
        torch.manual_seed(n)
        actions = dist.sample()
        logp_now = dist.logp(actions)
        dist_inputs = dist.inputs + 0.2 * torch.randn(dist.inputs.shape, generator=g)
    log_ratio = 0.3 * torch.randn(n, generator=g)
    for edge in (1 - cfg.clip_param, 1 + cfg.clip_param):
        log_ratio[(log_ratio.exp() - edge).abs() < 1e-3] += 0.01
    return {
        "obs": obs,
        "actions": actions,
        "logp": logp_now - log_ratio,
        "vf_preds": values - 0.05 * torch.randn(n, generator=g),
        "dist_inputs": dist_inputs,
        "advantages": torch.randn(n, generator=g),
        "value_targets": values + torch.randn(n, generator=g),
    }


def test_masked_logits_get_no_gradient():
    """An action masked on every row: its logit row of the last layer gets exactly zero
    gradient on both paths (entropy and KL on), the other rows do not."""
    cfg, pol, learner = setup("mask-discrete", seed=3, entropy_coeff=0.1, kl_coeff=0.5)
    assert isinstance(pol.model, ActionMaskModel)
    n = 32
    obs = random_obs(pol, n, np.random.default_rng(1))
    obs[:, pol.mask_columns] = np.array([1.0, 1.0, 0.0, 1.0], np.float32)
    data = make_minibatch_on(pol, cfg, torch.from_numpy(obs), n)
    res = both_paths(learner, data, True)
    names = [k for k, _ in pol.model.named_parameters()]
    for fast in (True, False):
        grads = res[fast][0]
        w = grads[names.index("inner._logits._model.0.weight")]
        b = grads[names.index("inner._logits._model.0.bias")]
        assert b[2] == 0.0 and (w[2] == 0.0).all(), fast
        assert (b[[0, 1, 3]] != 0.0).all(), fast
    assert_grads_close(res[True][0], res[False][0], "fast vs autograd")


def synthetic_batch(pol, t_steps: int, n_envs: int, seed: int) -> SampleBatch:
    """A rollout of random (legally masked) observations with the policy's own actions."""
    rng = np.random.default_rng(seed)
    obs = random_obs(pol, t_steps * n_envs, rng)
    torch.manual_seed(seed)
    out = pol.act(obs, [], explore=True)

    def tm(a):
        a = np.asarray(a)
        return a.reshape(t_steps, n_envs, *a.shape[1:])

    return SampleBatch(
        obs=obs.reshape(t_steps, n_envs, -1),
        actions=_tree(tm, out["actions"]),
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


def _tree(fn, x):
    if isinstance(x, dict):
        return {k: _tree(fn, v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_tree(fn, v) for v in x)
    return fn(x)


@pytest.mark.parametrize(
    "name", ["multidiscrete", "tuple", "dict", "mask-discrete", "mask-multidiscrete"]
)
def test_update_gives_the_same_parameters_on_either_path(name):
    """Two ``learner.update`` rounds (minibatches, epochs, entropy and an adaptive KL
    coefficient, Adam's state) end with the same parameters with and without FCBackprop."""
    config = {
        "lr": 5e-3,
        "train_batch_size": 128,
        "sgd_minibatch_size": 32,
        "num_sgd_iter": 3,
        "entropy_coeff": 0.01,
        "kl_coeff": 0.2,
    }
    learners = []
    for fast in (True, False):
        _, pol, learner = setup(name, seed=7, fast_paths=fast, **config)
        learners.append(learner)
    fast_l, auto_l = learners
    assert fast_l._backprop is not None and auto_l._backprop is None
    start = [p.detach().clone() for p in fast_l.policy.model.parameters()]
    calls = []
    fast_step = fast_l._backprop.step
    fast_l._backprop.step = lambda *a, **k: calls.append(1) or fast_step(*a, **k)
    for r in range(2):
        batch = synthetic_batch(fast_l.policy, 32, 4, 100 + r)
        results = [lr.update(batch, np.random.default_rng(r)) for lr in learners]
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


def test_head_grads_picks_the_heads():
    _, pol, _ = setup("nested-tuple")
    head = head_grads(pol.dist_class(torch.zeros(1, pol.model.num_outputs), pol.model))
    assert isinstance(head, MultiActionGrads)
    assert [type(c).__name__ for c in head.children] == [
        "LogitsGrads",
        "LogitsGrads",
        "GaussianGrads",
    ]
    assert isinstance(head.children[1], LogitsGrads) and head.children[1].k == 2


class OnlyHereBeta(Beta):
    """A head the closed form does not know, seen by no other test (its reason is new)."""


ModelCatalog.register_custom_action_dist("test_heads_only_here_beta", OnlyHereBeta)


@pytest.mark.parametrize(
    "space, model, reason",
    [
        (Box(0.0, 1.0, (2,), np.float32), {"custom_action_dist": "test_heads_beta"}, "Beta head"),
        (
            Tuple((Discrete(2), Simplex((3,)))),
            {},
            "MultiActionDistribution head (a child: Dirichlet head)",
        ),
        (Discrete(3), {"fcnet_activation": "elu"}, "layer it does not cover"),
        (Discrete(4), {"free_log_std": True}, "Categorical head with free_log_std"),
    ],
    ids=["beta", "tuple-with-dirichlet", "elu", "categorical-free-log-std"],
)
def test_what_it_does_not_cover_goes_to_autograd(space, model, reason):
    """A head or model the closed form cannot do: ``choose`` names it and the learner uses
    autograd."""
    cfg, pol, learner = make(space, {"fcnet_hiddens": [8], **model})
    chosen = FCBackprop.choose(pol.model, pol.dist_class, cfg)
    assert isinstance(chosen, str) and reason in chosen, chosen
    assert learner._backprop is None


def test_a_declined_head_is_named_once(caplog):
    """However many learners meet it, the reason is logged once per process."""
    caplog.set_level(logging.INFO, logger="rlblocks.train.learners.ppo")
    space = Box(0.0, 1.0, (2,), np.float32)
    for _ in range(3):
        _, _, learner = make(space, {"custom_action_dist": "test_heads_only_here_beta"})
        assert learner._backprop is None
    said = [r.getMessage() for r in caplog.records if "closed form declined" in r.getMessage()]
    assert said == ["PPO update: autograd: the closed form declined OnlyHereBeta head"]


def test_rllib_keeps_the_categorical_and_gaussian_heads():
    """``for_model`` without ``every_head`` (RLlib's learner) declines the new heads."""
    for name in ("multidiscrete", "tuple", "mask-discrete"):
        _, pol, learner = setup(name)
        assert learner._backprop is not None
        assert isinstance(FCBackprop.for_model(pol.model, pol.dist_class), str), name


def test_a_hook_on_the_action_mask_model_switches_to_autograd():
    """The closed form replaces the call of the mask model around the network too: a
    forward hook on it makes the fast path unusable until it is removed."""
    _, pol, learner = setup("mask-discrete")
    assert isinstance(pol.model, ActionMaskModel) and learner._backprop.usable()
    handle = pol.model.register_forward_hook(lambda *a: None)
    try:
        assert not learner._backprop.usable()
    finally:
        handle.remove()
    assert learner._backprop.usable()
