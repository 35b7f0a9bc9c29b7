"""The DQN learner: C51's projection, the (double) Q target, masks, target updates, export."""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary
from rlblocks.catalog import ModelCatalog
from rlblocks.train.learners.dqn import DQNLearner, project_distribution
from rlblocks.train.offpolicy_config import DQNConfig
from rlblocks.train.policy import Policy
from rlblocks.train.q_actor import QArgmaxActor


class Batch(NamedTuple):
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    discounts: np.ndarray
    weights: np.ndarray
    indices: np.ndarray


def _batch(rng: np.random.Generator, obs_dim: int, n: int, b: int = 6, **over: Any) -> Batch:
    fields: dict[str, Any] = {
        "obs": rng.normal(size=(b, obs_dim)).astype(np.float32),
        "actions": rng.integers(0, n, b),
        "rewards": rng.normal(size=b).astype(np.float32),
        "next_obs": rng.normal(size=(b, obs_dim)).astype(np.float32),
        "discounts": np.where(rng.random(b) < 0.3, 0.0, 0.99**3).astype(np.float32),
        "weights": rng.uniform(0.2, 1.0, b).astype(np.float32),
        "indices": np.arange(b),
    }
    fields.update(over)
    return Batch(**fields)


def test_c51_projection_matches_the_closed_form() -> None:
    z = torch.linspace(-2.0, 2.0, 5)  # atoms -2 -1 0 1 2
    probs = torch.tensor([[0.1, 0.2, 0.4, 0.2, 0.1], [0.0, 0.0, 1.0, 0.0, 0.0]])
    out = project_distribution(probs, torch.tensor([0.5, 5.0]), torch.tensor([1.0, 0.0]), z)
    # row 0: every atom shifts by 0.5, half its mass to each neighbour; the top atom clamps
    expected0 = torch.tensor([0.05, 0.15, 0.30, 0.30, 0.20])
    torch.testing.assert_close(out[0], expected0)
    # row 1: terminal (discount 0), reward beyond v_max: all mass on the top atom
    torch.testing.assert_close(out[1], torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0]))
    torch.testing.assert_close(out.sum(1), torch.ones(2))


@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_update_minimises_the_double_q_target(double_q: bool, loss: str) -> None:
    torch.manual_seed(0)
    space, actions = Box(-5, 5, (3,)), Discrete(4)
    cfg = DQNConfig(
        model={"fcnet_hiddens": [8]}, double_q=double_q, td_error_loss_fn=loss, grad_clip=None
    )
    learner = DQNLearner(space, actions, cfg, "cpu")
    with torch.no_grad():  # a target network that differs from the online one
        for p in learner.target.parameters():
            p.add_(0.3)
    batch = _batch(np.random.default_rng(1), 3, 4)
    q = learner.q.masked_q(torch.as_tensor(batch.obs)).detach()
    q_next_online = learner.q.masked_q(torch.as_tensor(batch.next_obs)).detach()
    q_next_target = learner.target.masked_q(torch.as_tensor(batch.next_obs)).detach()
    picker = q_next_online if double_q else q_next_target
    a_star = picker.argmax(1)
    target = (
        torch.as_tensor(batch.rewards)
        + torch.as_tensor(batch.discounts) * q_next_target[torch.arange(6), a_star]
    )
    taken = q[torch.arange(6), torch.as_tensor(batch.actions)]
    diff = taken - target
    per_row = (
        torch.where(diff.abs() < 1, 0.5 * diff**2, diff.abs() - 0.5) if loss == "huber" else diff**2
    )
    expected = float((torch.as_tensor(batch.weights) * per_row).mean())
    stats, priorities = learner.update(batch)
    assert stats["qf_loss"] == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(priorities, diff.abs().numpy(), rtol=1e-5)
    # the step lowered the loss on the same batch
    after = learner.q.masked_q(torch.as_tensor(batch.obs)).detach()[
        torch.arange(6), torch.as_tensor(batch.actions)
    ]
    assert float(((after - target) ** 2).mean()) < float((diff**2).mean())


def _masked_space(n: int) -> tuple[gym.Space, Any]:
    raw = Dict({"action_mask": MultiBinary(n), "observations": Box(-1, 1, (2,))})
    prep = ModelCatalog.get_preprocessor_for_space(raw)
    return prep.observation_space, prep


def test_masked_actions_are_never_taken_nor_bootstrapped() -> None:
    torch.manual_seed(0)
    space, prep = _masked_space(4)
    learner = DQNLearner(space, Discrete(4), DQNConfig(model={"fcnet_hiddens": [8]}), "cpu")
    rng = np.random.default_rng(0)
    masks = rng.integers(0, 2, (500, 4))
    masks[masks.sum(1) == 0, 2] = 1
    obs = prep.transform_batch(
        [{"action_mask": m, "observations": rng.uniform(-1, 1, 2)} for m in masks]
    )
    for explore in (False, True):  # epsilon is 1.0 at timestep 0: uniform over legal ones
        acted = learner.act(obs, explore=explore, timestep=0)
        assert masks[np.arange(500), acted].all()
    explored = learner.act(obs, explore=True, timestep=0)
    assert len(set(explored[masks.sum(1) == 4].tolist())) == 4  # random among all legal
    # the bootstrap reads only the legal action; a next observation with none bootstraps 0
    only = np.zeros((3, 4), np.int64)
    only[0, 3] = only[1, 1] = 1
    nxt = prep.transform_batch([{"action_mask": m, "observations": np.zeros(2)} for m in only])
    a_star, legal = learner._bootstrap_action(torch.as_tensor(nxt))
    assert a_star[:2].tolist() == [3, 1] and legal.tolist() == [True, True, False]
    batch = _batch(
        rng, obs.shape[1], 4, b=3, obs=nxt, next_obs=nxt, discounts=np.ones(3, np.float32)
    )
    stats, _ = learner.update(batch)
    assert np.isfinite(stats["qf_loss"])
    with pytest.raises(ValueError, match="allows no action"):
        learner.act(nxt, explore=False, timestep=0)


@pytest.mark.parametrize("random_steps", [None, 300])
def test_random_warm_up_acts_uniformly_over_legal_actions(random_steps: int | None) -> None:
    """Before ``random_steps`` (None: ``learning_starts``) every action is uniform over the
    legal ones even where the schedule says greedy; from then on the schedule applies."""
    torch.manual_seed(0)
    space, prep = _masked_space(4)
    cfg = DQNConfig(
        model={"fcnet_hiddens": [8]},
        learning_starts=200,
        random_steps=random_steps,
        epsilon=[[0, 0.0]],
    )
    learner = DQNLearner(space, Discrete(4), cfg, "cpu")
    warmup = 200 if random_steps is None else random_steps
    mask = np.array([1, 0, 1, 1])
    obs = prep.transform_batch([{"action_mask": mask, "observations": np.zeros(2)}] * 6000)
    acted = learner.act(obs, explore=True, timestep=warmup - 1)
    counts = np.bincount(acted, minlength=4)
    assert counts[1] == 0  # masked: never taken at random
    # uniform over the three legal actions: chi-square with 2 degrees of freedom, p = 1e-4
    assert ((counts[[0, 2, 3]] - 2000.0) ** 2 / 2000.0).sum() < 18.4
    greedy = learner.act(obs, explore=False, timestep=0)
    np.testing.assert_array_equal(learner.act(obs, explore=True, timestep=warmup), greedy)
    assert cfg.epsilon_at(warmup - 1) == 1.0 and cfg.epsilon_at(warmup) == 0.0


def test_random_steps_must_be_a_count() -> None:
    with pytest.raises(ValueError, match="random_steps must be an int >= 0, got -1"):
        DQNConfig(random_steps=-1)


def test_polyak_and_hard_target_updates() -> None:
    learner = DQNLearner(
        Box(-1, 1, (2,)), Discrete(2), DQNConfig(model={"fcnet_hiddens": [4]}, tau=0.25), "cpu"
    )
    with torch.no_grad():
        for p in learner.target.parameters():
            p.zero_()
    online = [p.detach().clone() for p in learner.q.parameters()]
    learner.sync_targets()
    for t, p in zip(learner.target.parameters(), online, strict=True):
        torch.testing.assert_close(t, 0.25 * p)
    learner.config.tau = 1.0
    learner.sync_targets()
    for t, p in zip(learner.target.parameters(), online, strict=True):
        torch.testing.assert_close(t, p)


def test_distributional_update_and_greedy_export() -> None:
    torch.manual_seed(0)
    cfg = DQNConfig(model={"fcnet_hiddens": [8]}, num_atoms=11, v_min=-2, v_max=2)
    learner = DQNLearner(Box(-1, 1, (3,)), Discrete(3), cfg, "cpu")
    batch = _batch(np.random.default_rng(2), 3, 3)
    first, priorities = learner.update(batch)
    for _ in range(30):
        last, _ = learner.update(batch)
    assert last["qf_loss"] < first["qf_loss"] and (priorities > 0).all()
    from rlblocks.export.graph import PolicyGraph

    graph = PolicyGraph(learner.acting_policy(), (3,))
    obs = np.random.default_rng(3).normal(size=(7, 3)).astype(np.float32)
    traced = graph(torch.as_tensor(obs))[0].numpy()
    np.testing.assert_array_equal(traced, learner.act(obs, explore=False, timestep=0))


def test_state_dict_round_trip_gives_the_same_next_update() -> None:
    cfg = DQNConfig(model={"fcnet_hiddens": [8]})
    a = DQNLearner(Box(-1, 1, (3,)), Discrete(3), cfg, "cpu")
    batch = _batch(np.random.default_rng(4), 3, 3)
    a.update(batch)
    b = DQNLearner(Box(-1, 1, (3,)), Discrete(3), cfg, "cpu")
    b.load_state_dict(a.state_dict())
    assert a.update(batch)[0] == b.update(batch)[0]


def test_dqn_refuses_box_actions_and_recurrent_models() -> None:
    with pytest.raises(ValueError, match="SAC"):
        DQNLearner(Box(-1, 1, (3,)), Box(-1, 1, (2,)), DQNConfig(), "cpu")
    with pytest.raises(ValueError, match="recurrent"):
        DQNLearner(Box(-1, 1, (3,)), Discrete(2), DQNConfig(model={"use_lstm": True}), "cpu")


@pytest.mark.parametrize("dueling", [False, True])
@pytest.mark.parametrize("timestep", [0, 2500, 10_000])
def test_numpy_acting_path_takes_the_module_paths_actions(timestep: int, dueling: bool) -> None:
    """Epsilon-greedy actions of the FC Q-network in numpy equal the module path's (forced
    by a no-op forward hook) for the same torch seed, at every epsilon."""
    cfg = DQNConfig(
        model={"fcnet_hiddens": [16, 16]}, dueling=dueling, epsilon=[[0, 1.0], [5000, 0.1]]
    )
    torch.manual_seed(0)
    fast = DQNLearner(Box(-1, 1, (4,)), Discrete(5, start=2), cfg, "cpu")
    plain = DQNLearner(Box(-1, 1, (4,)), Discrete(5, start=2), cfg, "cpu")
    plain.q.load_state_dict(fast.q.state_dict())
    plain.q.register_forward_pre_hook(lambda module, args: None)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    out = []
    for learner in (fast, plain):
        torch.manual_seed(3)
        out.append(
            [learner.act(obs, True, timestep) for _ in range(5)] + [learner.act(obs, False, 0)]
        )
    for a, b in zip(*out, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == np.int64 and a.min() >= 2 and a.max() <= 6


class _Scaled(torch.nn.Module):
    """A parametrization that records its calls (and changes nothing)."""

    def __init__(self, calls: list[str]) -> None:
        super().__init__()
        self.calls = calls

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        self.calls.append("parametrization")
        return weight


def _hook(where: str, body: torch.nn.Module, calls: list[str]) -> Any:
    """Sets one kind of hook on the dueling Q-network's body; returns its handle."""
    trunk = body.base_model._hidden_layers[0]._model[0]
    advantage, value = body.A._model[0], body.V._model[0]
    note = lambda *args: calls.append(where)  # noqa: E731
    if where == "trunk forward":
        return trunk.register_forward_hook(note)
    if where == "head grad":
        return value.bias.register_hook(note)
    if where == "head post-accumulate":
        return advantage.weight.register_post_accumulate_grad_hook(note)
    if where == "head backward":
        return advantage.register_full_backward_hook(note)
    if where == "global backward":
        return torch.nn.modules.module.register_module_full_backward_hook(note)
    assert where == "parametrized head"
    torch.nn.utils.parametrize.register_parametrization(value, "weight", _Scaled(calls))
    return None


@pytest.mark.parametrize(
    "where",
    [
        "trunk forward",
        "head grad",
        "head post-accumulate",
        "head backward",
        "global backward",
        "parametrized head",
    ],
)
def test_update_takes_the_module_path_when_a_hook_would_be_skipped(where: str) -> None:
    """A hook the closed-form update would not call (on the trunk, on the dueling head's
    layers or parameters, or global), or a parametrized layer, sends the update through
    the modules: the hook runs."""
    cfg = DQNConfig(model={"fcnet_hiddens": [8]}, dueling=True, double_q=True)
    learner = DQNLearner(Box(-1, 1, (3,)), Discrete(4), cfg, "cpu")
    batch = _batch(np.random.default_rng(0), 3, 4, b=16)
    learner.update(batch)  # the closed form, with nothing set
    calls: list[str] = []
    handle = _hook(where, learner.q.body, calls)
    try:
        learner.update(batch)
    finally:
        if handle is not None:
            handle.remove()
    assert calls, f"{where}: the update skipped the hook"


@pytest.mark.parametrize("dueling", [False, True])
@pytest.mark.parametrize("double_q", [False, True])
@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_closed_form_update_matches_the_module_path(
    dueling: bool, double_q: bool, loss: str
) -> None:
    """Ten updates on the closed-form path (rlblocks.train.fast.q_layers) give the module
    path's statistics, priorities and parameters (the module path forced by a no-op hook on
    the network's body)."""
    cfg = DQNConfig(
        model={"fcnet_hiddens": [16, 16]},
        dueling=dueling,
        double_q=double_q,
        td_error_loss_fn=loss,
        grad_clip=1.0,
    )
    learners = []
    for hooked in (False, True):
        torch.manual_seed(0)
        learner = DQNLearner(Box(-5, 5, (3,)), Discrete(4), cfg, "cpu")
        with torch.no_grad():
            for p in learner.target.parameters():
                p.add_(0.1)
        if hooked:
            learner.q.body.register_forward_pre_hook(lambda module, args: None)
        learners.append(learner)
    fast, plain = learners
    assert fast._fast_layers(fast.q, True) is not None
    assert plain._fast_layers(plain.q, True) is None
    rng = np.random.default_rng(2)
    for _ in range(10):
        batch = _batch(rng, 3, 4, b=32)
        (stats_a, prio_a), (stats_b, prio_b) = fast.update(batch), plain.update(batch)
        for key in stats_a:
            assert stats_a[key] == pytest.approx(stats_b[key], rel=1e-5, abs=1e-6), key
        np.testing.assert_allclose(prio_a, prio_b, rtol=1e-5, atol=1e-6)
    for (name, a), b in zip(fast.q.named_parameters(), plain.q.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("dueling", [False, True])
def test_dqn_acts_through_its_policys_q_argmax_actor(dueling: bool) -> None:
    """DQN acts through a :class:`Policy` whose built actor is the Q-argmax one: the
    policy's door, the learner's ``act`` and the module path (a no-op hook on the
    Q-network's body) give the same epsilon-greedy actions for the same torch seed."""
    cfg = DQNConfig(model={"fcnet_hiddens": [8]}, dueling=dueling)
    torch.manual_seed(0)
    learner = DQNLearner(Box(-1, 1, (3,)), Discrete(4, start=2), cfg, "cpu")
    policy = learner.acting_policy()
    assert isinstance(policy, Policy) and isinstance(policy.actor, QArgmaxActor)
    assert learner.acting_policy() is policy
    obs = np.random.default_rng(3).normal(size=(9, 3)).astype(np.float32)
    timestep = 3000  # epsilon strictly between 0 and 1
    assert 0.0 < cfg.epsilon_at(timestep) < 1.0
    runs = []
    for path in ("learner", "policy", "module"):
        if path == "module":
            learner.q.body.register_forward_pre_hook(lambda module, args: None)
            assert not policy.actor.layers.matches(False)  # type: ignore[attr-defined]
        torch.manual_seed(7)
        if path == "learner":
            runs.append([learner.act(obs, e, timestep) for e in (True, True, False)])
        else:
            policy.actor.epsilon = cfg.epsilon_at(timestep)  # type: ignore[attr-defined]
            runs.append(
                [policy.act(obs, [], explore=e, full=False)["actions"] for e in (True, True, False)]
            )
    for a, b, c in zip(*runs, strict=True):
        assert a.dtype == b.dtype == c.dtype == np.int64 and (a >= 2).all()
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
