"""SACLearner: targets and losses against hand computations, entropy tuning, Polyak
averaging, masks, exact resume, export, and two short bandits it must learn."""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary
from numpy.typing import ArrayLike
from rlblocks import ModelCatalog
from rlblocks.export.graph import PolicyGraph
from rlblocks.replay import ReplaySample
from rlblocks.train.fast import FCActor
from rlblocks.train.fast.squashed_actor import SquashedActor
from rlblocks.train.learners.sac import SACLearner
from rlblocks.train.offpolicy_config import SACConfig
from rlblocks.train.policy import Policy, build_actor

LINEAR: dict[str, Any] = {
    "fcnet_hiddens": []
}  # actor: [mean, log_std] = W s + b; critic: w . [s, a] + b


def config(**kw: Any) -> SACConfig:
    return SACConfig(**kw)


def sample(
    obs: ArrayLike,
    actions: ArrayLike,
    rewards: ArrayLike,
    next_obs: ArrayLike,
    discounts: ArrayLike,
    weights: ArrayLike | None = None,
) -> ReplaySample:
    """A replay sample of these rows (float32 where the buffer gives float32)."""
    b = int(np.asarray(rewards).shape[0])
    return ReplaySample(
        np.asarray(obs, np.float32),
        np.asarray(actions),
        np.asarray(rewards, np.float32),
        np.asarray(next_obs, np.float32),
        np.asarray(discounts, np.float32),
        np.ones(b, np.float32) if weights is None else np.asarray(weights, np.float32),
        np.arange(b, dtype=np.int64),
    )


def set_linear(model: Any, prefix: str, weight: ArrayLike, bias: ArrayLike) -> None:
    params = dict(model.named_parameters())
    with torch.no_grad():
        params[f"{prefix}.weight"].copy_(torch.as_tensor(weight, dtype=torch.float32))
        params[f"{prefix}.bias"].copy_(torch.as_tensor(bias, dtype=torch.float32))


ACTOR = "_logits._model.0"
BOX_Q = "q_head._logits._model.0"
DISCRETE_Q = "_logits._model.0"


def mask_obs_space() -> tuple[gym.Space, gym.Space, object]:
    space = Dict({"action_mask": MultiBinary(4), "observations": Box(-1, 1, (2,))})
    prep = ModelCatalog.get_preprocessor_for_space(space)
    return space, prep.observation_space, prep


def masked_obs(prep: object, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    rows = [
        prep.transform(  # type: ignore[attr-defined]
            {"action_mask": m.astype(np.int8), "observations": rng.uniform(-1, 1, 2)}
        )
        for m in masks
    ]
    return np.stack(rows).astype(np.float32)


# --- entropy targets -------------------------------------------------------------------------
def test_auto_target_entropy_values() -> None:
    obs = Box(-1, 1, (2,))
    assert SACLearner(obs, Box(-1, 1, (3,)), config()).target_entropy == -3.0
    assert SACLearner(obs, Box(-5, 7, (1,)), config()).target_entropy == -1.0
    disc = SACLearner(obs, Discrete(4), config())
    assert disc.target_entropy == pytest.approx(0.98 * math.log(4))
    np.testing.assert_allclose(disc.row_target_entropy(np.zeros((3, 2))), 0.98 * math.log(4))
    assert SACLearner(obs, Discrete(4), config(target_entropy=-0.5)).target_entropy == -0.5
    # under a mask: 0.98 * log(k) for a row's k legal actions (the most it can reach)
    _, flat, prep = mask_obs_space()
    learner = SACLearner(flat, Discrete(4), config(model=LINEAR, q_model=LINEAR))
    masks = np.array([[1, 1, 1, 1], [0, 1, 1, 0], [0, 0, 1, 0], [1, 0, 1, 1]])
    got = learner.row_target_entropy(masked_obs(prep, masks, np.random.default_rng(0)))
    np.testing.assert_allclose(got, 0.98 * np.log([4, 2, 1, 3]), rtol=1e-6)


def test_bad_spaces_and_models_are_refused() -> None:
    obs = Box(-1, 1, (2,))
    with pytest.raises(ValueError, match="finite bounds"):
        SACLearner(obs, Box(-np.inf, np.inf, (2,)), config())
    with pytest.raises(ValueError, match="1-D float"):
        SACLearner(obs, Box(-1, 1, (2, 2)), config())
    with pytest.raises(ValueError, match="Box .* or Discrete"):
        SACLearner(obs, gym.spaces.MultiDiscrete([2, 3]), config())
    with pytest.raises(ValueError, match="feed-forward"):
        SACLearner(obs, Discrete(2), config(model={"use_lstm": True}))
    with pytest.raises(ValueError, match="config.q_model sets free_log_std: a critic"):
        SACLearner(obs, Box(-1, 1, (2,)), config(q_model={"free_log_std": True}))
    # the actor's free log-std stays the actor's (before: the critics took it and failed)
    learner = SACLearner(obs, Box(-1, 1, (2,)), config(model={"free_log_std": True}))
    assert learner.actor.free_log_std and not any(c.config.free_log_std for c in learner.critics)
    _, flat, _ = mask_obs_space()
    with pytest.raises(ValueError, match="Discrete"):
        SACLearner(flat, Box(-1, 1, (4,)), config())


def test_single_critic_and_gradient_clipping() -> None:
    learner = SACLearner(
        Box(-1, 1, (2,)), Box(-1, 1, (1,)), config(twin_q=False, grad_clip=0.1, model=LINEAR)
    )
    assert len(learner.critics) == 1 and len(learner.target_critics) == 1
    rng = np.random.default_rng(0)
    batch = sample(
        rng.normal(size=(8, 2)),
        rng.uniform(-1, 1, (8, 1)),
        rng.normal(size=8),
        rng.normal(size=(8, 2)),
        np.full(8, 0.9),
    )
    stats, priorities = learner.update(batch, 0)
    assert all(math.isfinite(v) for v in stats.values()) and (priorities >= 0).all()


# --- Box: the target and the critic loss by hand -------------------------------------------------
def box_learner(**kw: object) -> SACLearner:
    cfg = config(model=LINEAR, q_model=LINEAR, **kw)
    learner = SACLearner(Box(-1, 1, (2,)), Box(-2, 2, (1,)), cfg)
    set_linear(learner.actor, ACTOR, [[0.5, -0.3], [0.4, 0.2]], [0.1, -1.0])
    for i, (w, b) in enumerate([([0.3, -0.2, 0.7], 0.05), ([-0.1, 0.4, 0.5], -0.1)]):
        set_linear(learner.critics[i], BOX_Q, [w], [b])
    for i, (w, b) in enumerate([([0.2, 0.1, -0.6], 0.3), ([0.6, -0.5, 0.9], 0.0)]):
        set_linear(learner.target_critics[i], BOX_Q, [w], [b])
    return learner


def box_batch() -> ReplaySample:
    rng = np.random.default_rng(3)
    b = 6
    return sample(
        rng.uniform(-1, 1, (b, 2)),
        rng.uniform(-2, 2, (b, 1)),
        rng.normal(size=b),
        rng.uniform(-1, 1, (b, 2)),
        [0.99, 0.0, 0.97, 0.99, 0.5, 0.99],
        rng.uniform(0.2, 1.5, b),
    )


def box_target_by_hand(batch: ReplaySample, noise: np.ndarray, alpha: float) -> np.ndarray:
    s2 = batch.next_obs.astype(np.float64)
    out = s2 @ np.array([[0.5, -0.3], [0.4, 0.2]]).T + [0.1, -1.0]
    mean, log_std = out[:, :1], np.clip(out[:, 1:], -5.0, 2.0)
    std = np.exp(log_std)
    u = mean + std * noise
    a = np.tanh(u)  # the normalised next action, in [-1, 1]
    normal = -0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    logp = (np.clip(normal, -100, 100) - np.log(1 - a**2 + 1e-6)).sum(-1)
    x = np.concatenate([s2, a], 1)
    q1 = x @ np.array([0.2, 0.1, -0.6]) + 0.3
    q2 = x @ np.array([0.6, -0.5, 0.9]) + 0.0
    return batch.rewards + batch.discounts * (np.minimum(q1, q2) - alpha * logp)


def box_critic_loss_by_hand(batch: ReplaySample, y: np.ndarray) -> tuple[float, np.ndarray]:
    a = batch.actions.astype(np.float64) / 2.0  # Box(-2, 2) -> [-1, 1]
    x = np.concatenate([batch.obs.astype(np.float64), a], 1)
    q1 = x @ np.array([0.3, -0.2, 0.7]) + 0.05
    q2 = x @ np.array([-0.1, 0.4, 0.5]) - 0.1
    w = batch.weights
    loss = 0.5 * np.mean(w * (q1 - y) ** 2) + 0.5 * np.mean(w * (q2 - y) ** 2)
    return float(loss), (np.abs(q1 - y) + np.abs(q2 - y)) / 2


def test_box_target_and_critic_loss_match_hand_computation() -> None:
    learner = box_learner(initial_alpha=0.5)
    batch = box_batch()
    torch.manual_seed(11)
    noise = torch.randn(6, 1).double().numpy()  # the draw the learner makes for a'
    want_y = box_target_by_hand(batch, noise, alpha=0.5)
    torch.manual_seed(11)
    y = learner.targets(batch)
    np.testing.assert_allclose(y.numpy(), want_y, rtol=1e-5, atol=1e-5)
    assert y[1] == pytest.approx(batch.rewards[1])  # terminal: no bootstrap

    want_loss, want_td = box_critic_loss_by_hand(batch, want_y)
    loss, qs = learner.critic_loss(batch, y)
    assert float(loss.detach()) == pytest.approx(want_loss, rel=1e-5)
    assert len(qs) == 2

    # update: the target is its first draw, the reported loss the pre-step loss, the
    # priorities the mean |TD error| of the two critics
    torch.manual_seed(11)
    stats, priorities = learner.update(batch, timestep=0)
    assert stats["qf_loss"] == pytest.approx(want_loss, rel=1e-5)
    assert priorities.dtype == np.float64 and priorities.shape == (6,)
    np.testing.assert_allclose(priorities, want_td, rtol=1e-4, atol=1e-6)
    assert stats["td_error_mean"] == pytest.approx(want_td.mean(), rel=1e-4)


def test_importance_weights_scale_the_critic_gradient() -> None:
    batch = box_batch()
    doubled = batch._replace(weights=batch.weights * 2)
    grads = []
    for b in (batch, doubled):
        learner = box_learner()
        torch.manual_seed(0)
        loss, _ = learner.critic_loss(b, learner.targets(b))
        loss.backward()
        grads.append(
            torch.cat(
                [p.grad.reshape(-1) for p in learner.critics.parameters() if p.grad is not None]
            )
        )
    np.testing.assert_allclose(grads[1].numpy(), 2 * grads[0].numpy(), rtol=1e-5)


# --- alpha ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("log_std", "direction"), [(-5.0, +1), (0.0, -1)])
def test_alpha_moves_toward_the_target_entropy(log_std: float, direction: int) -> None:
    """A narrow actor (entropy far below -1) raises alpha, tanh(N(0, 1)) (entropy about
    0.55 > -1) lowers it; Adam's first step moves log_alpha by alpha_lr."""
    torch.manual_seed(0)
    learner = box_learner(alpha_lr=0.01)
    set_linear(learner.actor, ACTOR, np.zeros((2, 2)), [0.0, log_std])
    before = float(learner.log_alpha.detach())
    stats, _ = learner.update(box_batch(), 0)
    step = float(learner.log_alpha.detach()) - before
    assert np.sign(step) == direction
    assert abs(step) == pytest.approx(0.01, rel=1e-3)
    assert (stats["entropy"] < -1.0) == (direction > 0)
    # alpha_loss = -log_alpha * (target - entropy), with the pre-step log_alpha = 0
    assert stats["alpha_loss"] == pytest.approx(0.0, abs=1e-7)
    assert stats["alpha"] == pytest.approx(math.exp(before + step))


@pytest.mark.parametrize(("bias", "direction"), [([0.0, 0.0, 0.0, 0.0], -1), ([9.0, 0, 0, 0], 1)])
def test_discrete_alpha_gradient_sign(bias: list[float], direction: int) -> None:
    """Uniform over 4 (entropy log 4 > 0.98 log 4) lowers alpha; a peaked policy raises it.
    The alpha loss is -log_alpha * (target - entropy): at log_alpha = log(2) it is known."""
    learner = SACLearner(
        Box(-1, 1, (2,)), Discrete(4), config(model=LINEAR, q_model=LINEAR, initial_alpha=2.0)
    )
    set_linear(learner.actor, ACTOR, np.zeros((4, 2)), bias)
    p = np.exp(bias) / np.exp(bias).sum()
    entropy = float(-(p * np.log(p)).sum())
    rng = np.random.default_rng(0)
    batch = sample(
        rng.uniform(-1, 1, (8, 2)),
        rng.integers(0, 4, 8),
        np.zeros(8),
        rng.uniform(-1, 1, (8, 2)),
        np.full(8, 0.9),
    )
    stats, _ = learner.update(batch, 0)
    assert np.sign(float(learner.log_alpha.detach()) - math.log(2.0)) == direction
    assert stats["entropy"] == pytest.approx(entropy, rel=1e-4, abs=1e-7)
    want = -math.log(2.0) * (0.98 * math.log(4) - entropy)
    assert stats["alpha_loss"] == pytest.approx(want, rel=1e-5)


# --- Polyak ----------------------------------------------------------------------------------
def test_polyak_update() -> None:
    learner = box_learner(tau=0.25)
    targets0 = [p.detach().clone() for p in learner.target_critics.parameters()]
    with torch.no_grad():
        for p in learner.critics.parameters():
            p.add_(torch.randn_like(p))
    online = [p.detach().clone() for p in learner.critics.parameters()]
    learner.sync_targets()
    for t, t0, o in zip(learner.target_critics.parameters(), targets0, online, strict=True):
        np.testing.assert_allclose(t.numpy(), 0.75 * t0.numpy() + 0.25 * o.numpy(), rtol=1e-6)
    # tau = 1: an exact copy
    hard = box_learner(tau=1.0)
    with torch.no_grad():
        for p in hard.critics.parameters():
            p.add_(torch.randn_like(p))
    hard.sync_targets()
    for t, o in zip(hard.target_critics.parameters(), hard.critics.parameters(), strict=True):
        assert torch.equal(t, o)


# --- Discrete: the soft value in closed form ---------------------------------------------
def discrete_learner(obs_space: gym.Space, alpha: float) -> SACLearner:
    cfg = config(model=LINEAR, q_model=LINEAR, initial_alpha=alpha)
    learner = SACLearner(obs_space, Discrete(4, start=2), cfg)
    return learner


def test_discrete_soft_value_closed_form() -> None:
    learner = discrete_learner(Box(-1, 1, (2,)), alpha=0.3)
    wa = np.array([[1.0, -0.5], [0.2, 0.3], [-0.7, 0.4], [0.0, 1.1]])
    ba = np.array([0.1, -0.2, 0.3, 0.0])
    set_linear(learner.actor, ACTOR, wa, ba)
    wq = [
        np.array([[0.5, 0.1], [-0.3, 0.8], [0.2, 0.2], [1.0, -1.0]]),
        np.array([[0.4, 0.3], [-0.1, 0.6], [0.1, 0.5], [0.7, -0.9]]),
    ]
    bq = [np.array([0.0, 0.1, -0.1, 0.2]), np.array([0.05, 0.0, 0.1, 0.1])]
    for i in range(2):
        set_linear(learner.target_critics[i], DISCRETE_Q, wq[i], bq[i])
        set_linear(learner.critics[i], DISCRETE_Q, wq[i] * 0.5, bq[i])  # online: not used in y
    rng = np.random.default_rng(1)
    s2 = rng.uniform(-1, 1, (5, 2))
    batch = sample(
        rng.uniform(-1, 1, (5, 2)),
        rng.integers(2, 6, 5),
        rng.normal(size=5),
        s2,
        [0.9, 0.9, 0.0, 0.8, 0.9],
    )
    logits = s2 @ wa.T + ba
    pi = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    q = np.minimum(s2 @ wq[0].T + bq[0], s2 @ wq[1].T + bq[1])
    value = (pi * (q - 0.3 * np.log(pi))).sum(1)
    want = batch.rewards + batch.discounts * value
    np.testing.assert_allclose(learner.targets(batch).numpy(), want, rtol=1e-5, atol=1e-6)
    # the critic loss gathers Q at the stored action (start=2 shifts the index)
    _, qs = learner.critic_loss(batch, learner.targets(batch))
    online = batch.obs @ (wq[0] * 0.5).T + bq[0]
    np.testing.assert_allclose(
        qs[0].detach().numpy(), online[np.arange(5), batch.actions - 2], rtol=1e-5
    )


def test_discrete_soft_value_ignores_masked_actions() -> None:
    _, flat, prep = mask_obs_space()
    learner = discrete_learner(flat, alpha=0.7)
    wa = np.array([[1.0, -0.5], [0.2, 0.3], [-0.7, 0.4], [0.0, 1.1]])
    ba = np.array([3.0, -0.2, 0.3, 0.0])
    set_linear(learner.actor.inner, ACTOR, wa, ba)
    wq = np.array([[0.5, 0.1], [-0.3, 0.8], [0.2, 0.2], [1.0, -1.0]])
    for c in learner.target_critics:
        set_linear(c, DISCRETE_Q, wq, [0.0, 50.0, 0.0, 0.0])  # a masked action's large Q
    rng = np.random.default_rng(2)
    masks = np.array([[0, 1, 1, 0], [1, 0, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]])
    s2 = masked_obs(prep, masks, rng)
    batch = sample(s2, [3, 2, 5, 4], np.zeros(4), s2, np.ones(4))
    x = s2[:, 4:].astype(np.float64)  # the "observations" columns
    logits = np.where(masks > 0, x @ wa.T + ba, -np.inf)
    pi = np.exp(logits - logits.max(1, keepdims=True))
    pi /= pi.sum(1, keepdims=True)
    q = x @ wq.T + [0.0, 50.0, 0.0, 0.0]
    logpi = np.log(np.where(pi > 0, pi, 1.0))
    want = (pi * (q - 0.7 * logpi)).sum(1)
    y = learner.targets(batch).numpy()
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    stats, priorities = learner.update(batch, 0)
    assert all(math.isfinite(v) for v in stats.values()) and np.isfinite(priorities).all()


# --- masks when acting -----------------------------------------------------------------------
def test_masked_actions_are_never_chosen() -> None:
    _, flat, prep = mask_obs_space()
    torch.manual_seed(0)
    learner = SACLearner(flat, Discrete(4), config(model={"fcnet_hiddens": [8]}))
    inner = dict(learner.actor.named_parameters())
    with torch.no_grad():  # the unmasked policy strongly prefers action 0
        inner["inner._logits._model.0.bias"].copy_(torch.tensor([8.0, 0.0, 0.0, 0.0]))
    rng = np.random.default_rng(0)
    masks = rng.integers(0, 2, (3000, 4))
    masks[masks.sum(1) == 0, 3] = 1
    obs = masked_obs(prep, masks, rng)
    for explore in (True, False):
        actions = learner.act(obs, explore=explore, timestep=0)
        assert actions.dtype == np.int64 and actions.shape == (3000,)
        assert (masks[np.arange(3000), actions] > 0).all()
    # greedy takes action 0 wherever it is legal; exploring reaches the other legal ones
    greedy = learner.act(obs, explore=False, timestep=0)
    assert (greedy[masks[:, 0] > 0] == 0).all()
    explored = learner.act(obs[masks[:, 0] == 0], explore=True, timestep=0)
    assert set(np.unique(explored)) == {1, 2, 3}
    dead = masked_obs(prep, np.array([[1, 0, 0, 0], [0, 0, 0, 0]]), rng)
    with pytest.raises(ValueError, match="row 1 leaves no legal action"):
        learner.act(dead, explore=True, timestep=0)


def test_box_actions_lie_in_the_bounds_and_greedy_is_the_squashed_mean() -> None:
    learner = box_learner()
    obs = np.random.default_rng(0).uniform(-1, 1, (500, 2)).astype(np.float32)
    explored = learner.act(obs, explore=True, timestep=0)
    assert explored.shape == (500, 1) and explored.dtype == np.float32
    assert (np.abs(explored) <= 2).all() and explored.std() > 0.05
    mean = obs.astype(np.float64) @ np.array([0.5, -0.3]) + 0.1
    np.testing.assert_allclose(learner.act(obs, False, 0)[:, 0], 2 * np.tanh(mean), atol=1e-5)


@pytest.mark.parametrize("explore", [True, False])
@pytest.mark.parametrize("rows", [1, 7])
def test_numpy_acting_takes_the_module_paths_actions(explore: bool, rows: int) -> None:
    """Acting without the module and distribution objects (the catalog's FC actor in
    numpy) gives the module path's actions bit for bit, for the same torch seed: an
    asymmetric two-dimensional Box, a batch of one and of several rows."""
    space = Box(np.array([-2.0, 0.0], np.float32), np.array([1.0, 5.0], np.float32))
    cfg = SACConfig(model={"fcnet_hiddens": [16, 16]}, q_model={"fcnet_hiddens": [8]})
    learners = []
    for hooked in (False, True):
        torch.manual_seed(0)
        learner = SACLearner(Box(-1, 1, (3,)), space, cfg, "cpu")
        if hooked:  # a no-op hook: the module path
            learner.actor.register_forward_pre_hook(lambda module, args: None)
        learners.append(learner)
    fast, plain = learners
    for learner, serves in ((fast, True), (plain, False)):
        actor = learner.acting_policy().actor
        assert isinstance(actor, SquashedActor)
        assert actor.fc.layers.matches_model() is serves  # the hook sends it to the module
    obs = np.random.default_rng(1).normal(size=(rows, 3)).astype(np.float32)
    out = []
    for learner in (fast, plain):
        torch.manual_seed(4)
        out.append([learner.act(obs, explore, 0) for _ in range(3)])
    for a, b in zip(*out, strict=True):
        assert a.shape == b.shape == (rows, 2) and a.dtype == b.dtype == np.float32
        np.testing.assert_array_equal(a, b)
        assert (a >= space.low).all() and (a <= space.high).all()


# --- exact resume ----------------------------------------------------------------------------
def _params(learner: SACLearner) -> list[torch.Tensor]:
    mods = (learner.actor, learner.critics, learner.target_critics)
    return [p.detach().clone() for m in mods for p in m.parameters()] + [learner.log_alpha.detach()]


@pytest.mark.parametrize("discrete", [False, True])
def test_state_dict_round_trip_gives_identical_next_updates(discrete: bool) -> None:
    obs_space = Box(-1, 1, (3,))
    action_space = Discrete(3) if discrete else Box(-1, 2, (2,))
    cfg = config(model={"fcnet_hiddens": [16]}, q_model={"fcnet_hiddens": [16]}, tau=0.1)
    rng = np.random.default_rng(0)
    b = 32

    def batch() -> ReplaySample:
        actions = rng.integers(0, 3, b) if discrete else rng.uniform(-1, 2, (b, 2))
        return sample(
            rng.normal(size=(b, 3)),
            actions,
            rng.normal(size=b),
            rng.normal(size=(b, 3)),
            np.full(b, 0.99),
            rng.uniform(0.5, 1, b),
        )

    torch.manual_seed(0)
    a = SACLearner(obs_space, action_space, cfg)
    for _ in range(3):
        a.update(batch(), 0)
        a.sync_targets()
    state = copy.deepcopy(a.state_dict())
    torch.manual_seed(123)  # other initial weights
    resumed = SACLearner(obs_space, action_space, cfg)
    resumed.load_state_dict(state)
    for p, q in zip(_params(a), _params(resumed), strict=True):
        assert torch.equal(p, q)
    for step in range(3):
        nxt = batch()
        torch.manual_seed(step)
        stats_a, prio_a = a.update(nxt, 0)
        a.sync_targets()
        torch.manual_seed(step)
        stats_r, prio_r = resumed.update(nxt, 0)
        resumed.sync_targets()
        assert stats_a == stats_r
        np.testing.assert_array_equal(prio_a, prio_r)
    for p, q in zip(_params(a), _params(resumed), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="missing \\['alpha_optimizer'\\]"):
        resumed.load_state_dict({k: v for k, v in state.items() if k != "alpha_optimizer"})


# --- export ----------------------------------------------------------------------------------
def _exported_greedy(learner: SACLearner, obs: np.ndarray) -> np.ndarray:
    pol = learner.acting_policy()
    pol.set_training(False)
    graph = PolicyGraph(pol, obs_shape=(obs.shape[1],))  # type: ignore[arg-type]
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # attributes assigned during export (value_function)
        program = torch.export.export(
            graph, graph.example_inputs(2), dynamic_shapes=(({0: batch},),), strict=False
        )
    with torch.no_grad():
        return program.module()(torch.as_tensor(obs))[0].numpy()


def test_exported_greedy_action_is_act_without_exploration() -> None:
    torch.manual_seed(0)
    learner = SACLearner(Box(-1, 1, (3,)), Box(-2, 1, (2,)), config(model={"fcnet_hiddens": [8]}))
    obs = np.random.default_rng(0).normal(size=(7, 3)).astype(np.float32)
    np.testing.assert_allclose(
        _exported_greedy(learner, obs), learner.act(obs, False, 0), rtol=1e-6, atol=1e-6
    )

    _, flat, prep = mask_obs_space()
    masked = SACLearner(flat, Discrete(4), config(model={"fcnet_hiddens": [8]}))
    rng = np.random.default_rng(1)
    masks = rng.integers(0, 2, (50, 4))
    masks[:, 2] = 1
    mobs = masked_obs(prep, masks, rng)
    exported = _exported_greedy(masked, mobs)
    np.testing.assert_array_equal(exported, masked.act(mobs, False, 0))
    assert (masks[np.arange(50), exported] > 0).all()


# --- learning sanity: one-step bandits, no trainer ----------------------------------------------
def _bandit(
    learner: SACLearner,
    reward: Callable[[np.ndarray, np.ndarray], np.ndarray],
    obs_dim: int,
    steps: int,
) -> tuple[float, float]:
    """Acts on 8 random observations per step, stores them, one update of 128 per step;
    returns the greedy policy's mean reward on fresh observations before and after."""
    rng = np.random.default_rng(0)
    test = rng.uniform(-1, 1, (1000, obs_dim)).astype(np.float32)
    before = float(reward(test, learner.act(test, False, 0)).mean())
    obs, actions, rewards = [], [], []
    for step in range(steps):
        o = rng.uniform(-1, 1, (8, obs_dim)).astype(np.float32)
        a = learner.act(o, True, step)
        obs.append(o)
        actions.append(a)
        rewards.append(reward(o, a))
        if step < 32:
            continue
        idx = rng.integers(0, 8 * len(obs), 128)
        o_all = np.concatenate(obs)[idx]
        learner.update(
            sample(
                o_all,
                np.concatenate(actions)[idx],
                np.concatenate(rewards)[idx],
                o_all,
                np.zeros(128),
            ),
            step,
        )
        learner.sync_targets()
    return before, float(reward(test, learner.act(test, False, 0)).mean())


def test_sac_learns_a_continuous_bandit() -> None:
    """reward = -(a - target(obs))^2: a random-init greedy policy scores about -0.3, SAC
    reaches about -0.003 in 400 steps (measured -0.001 to -0.004 over six seeds)."""
    torch.manual_seed(0)
    cfg = config(model={"fcnet_hiddens": [32, 32]}, q_model={"fcnet_hiddens": [32, 32]}, lr=3e-3)
    learner = SACLearner(Box(-1, 1, (2,)), Box(-2, 2, (1,)), cfg)
    w = np.array([0.8, -0.5], np.float32)

    def reward(o: np.ndarray, a: np.ndarray) -> np.ndarray:
        return -((a[:, 0] - o @ w) ** 2)

    before, after = _bandit(learner, reward, 2, 400)
    assert before < -0.1
    assert after > -0.05 and after > 0.2 * before


def test_discrete_sac_learns_a_contextual_bandit() -> None:
    """reward 1 for the index of the largest observation entry (random: 1/3)."""
    torch.manual_seed(0)
    cfg = config(
        model={"fcnet_hiddens": [32, 32]},
        q_model={"fcnet_hiddens": [32, 32]},
        lr=3e-3,
        initial_alpha=0.1,
    )
    learner = SACLearner(Box(-1, 1, (3,)), Discrete(3), cfg)

    def reward(o: np.ndarray, a: np.ndarray) -> np.ndarray:
        return (a == o.argmax(1)).astype(np.float32)

    before, after = _bandit(learner, reward, 3, 400)
    assert before < 0.6
    assert after > 0.9


# --- the closed-form update (rlblocks.train.fast.sac_backprop) ----------------------------
@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("twin_q", [True, False])
@pytest.mark.parametrize("grad_clip", [None, 0.5])
def test_closed_form_update_matches_autograd(
    activation: str, twin_q: bool, grad_clip: float | None
) -> None:
    """Twenty updates of the plain FC networks give the same parameters, statistics and
    priorities on the closed-form path as on the module path (forced by a no-op hook)."""
    model = {"fcnet_hiddens": [32, 32], "fcnet_activation": activation}

    def build(hooked: bool) -> SACLearner:
        torch.manual_seed(0)
        cfg = config(model=model, q_model=model, twin_q=twin_q, grad_clip=grad_clip)
        learner = SACLearner(Box(-1, 1, (3,)), Box(-2.0, 3.0, (2,)), cfg)
        if hooked:
            learner.actor.register_forward_pre_hook(lambda module, args: None)
        return learner

    fast, plain = build(False), build(True)
    assert fast._backprop() is not None and plain._backprop() is None
    rng = np.random.default_rng(0)
    rows = 64
    batches = [
        sample(
            rng.normal(size=(rows, 3)),
            rng.uniform(-2.0, 3.0, (rows, 2)).astype(np.float32),
            rng.normal(size=rows),
            rng.normal(size=(rows, 3)),
            np.where(rng.random(rows) < 0.2, 0.0, 0.99),
            rng.uniform(0.5, 1.0, rows),
        )
        for _ in range(20)
    ]
    results = []
    for learner in (fast, plain):
        torch.manual_seed(1)
        results.append([learner.update(b, 0) for b in batches])
    for (stats_a, prio_a), (stats_b, prio_b) in zip(*results, strict=True):
        for key in SACLearner.STATS:
            assert stats_a[key] == pytest.approx(stats_b[key], rel=1e-4, abs=1e-5), key
        np.testing.assert_allclose(prio_a, prio_b, rtol=1e-4, atol=1e-5)
    for a, b in zip(fast.state_dict().items(), plain.state_dict().items(), strict=True):
        if isinstance(a[1], dict) and "state" not in a[1]:
            for name in a[1]:
                torch.testing.assert_close(a[1][name], b[1][name], rtol=1e-4, atol=1e-6)


def test_closed_form_path_declines_what_it_does_not_cover() -> None:
    model = {"fcnet_hiddens": [8]}
    discrete = SACLearner(Box(-1, 1, (3,)), Discrete(3), config(model=model, q_model=model))
    assert discrete._backprop() is None
    free = {"fcnet_hiddens": [8], "free_log_std": True}
    plain_q = {**model, "free_log_std": False}
    learner = SACLearner(Box(-1, 1, (3,)), Box(-1, 1, (2,)), config(model=free, q_model=plain_q))
    assert learner._backprop() is None
    frozen = SACLearner(Box(-1, 1, (3,)), Box(-1, 1, (2,)), config(model=model, q_model=model))
    frozen.critics[0].q_head._logits._model[0].bias.requires_grad_(False)
    frozen.__dict__.pop("_fast", None)
    assert frozen._backprop() is None
    # the element-wise half runs in numpy on views: float32 CPU parameters only
    wide = SACLearner(Box(-1, 1, (3,)), Box(-1, 1, (2,)), config(model=model, q_model=model))
    wide.target_critics.double()
    wide.__dict__.pop("_fast", None)
    assert wide._backprop() is None


@pytest.mark.parametrize("discrete", [False, True])
def test_acting_policy_is_a_policy_whose_built_actor_matches_the_module(discrete: bool) -> None:
    """SAC acts through :class:`Policy`: ``build_actor`` picks the squashed Gaussian
    (Box) or the numpy FC (Discrete) actor, and its actions equal the module actor's
    (``fast_paths`` off) bit for bit for the same torch seed."""
    action_space = Discrete(3, start=1) if discrete else Box(-2, 2, (2,))
    cfg = SACConfig(model={"fcnet_hiddens": [16]}, q_model={"fcnet_hiddens": [8]})
    torch.manual_seed(0)
    learner = SACLearner(Box(-1, 1, (4,)), action_space, cfg)
    policy = learner.acting_policy()
    assert isinstance(policy, Policy)
    assert type(policy.actor) is (FCActor if discrete else SquashedActor)
    obs = np.random.default_rng(2).normal(size=(6, 4)).astype(np.float32)
    out = []
    for fast in (True, False):
        policy.actor = build_actor(policy, fast)
        torch.manual_seed(5)
        out.append([learner.act(obs, explore, 0) for explore in (True, True, False)])
    for a, b in zip(*out, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
