"""DQN's update against Stable-Baselines3's DQN (issue 46's DQN rows compare the two at the
zoo's settings): with the settings that match (plain Q head, the target network's max in the
bootstrap, Huber loss, gradient norm clipped at 10, Adam), from the same weights and on the
same batches, a run of updates leaves the same Q-network up to float rounding, through the
closed form and through autograd, gradient clipping and n-step batches (SB3's ``discounts``)
included. Where the two
differ by design is listed in docs/qlearning.md ("DQN beside Stable-Baselines3")."""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.train.learners.dqn import DQNLearner
from rlblocks.train.offpolicy_config import DQNConfig
from sb3_twins import SpacesOnly, linears

sb3 = pytest.importorskip("stable_baselines3")

OBS, ACTIONS, ROWS, HIDDEN, UPDATES, GAMMA = 5, 3, 32, [24, 16], 6, 0.99
#: Below these batches' gradient norms (0.2-0.3), so every update is clipped on both sides.
CLIP = 0.1
#: The spaces both libraries are built on (nothing steps the env).
SPACES = SpacesOnly(
    gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32), gym.spaces.Discrete(ACTIONS)
)


def _ours(net: Any) -> list[torch.nn.Linear]:
    """Our Q-network's hidden layers and its Q-value layer (its value branch is unused
    without the dueling head)."""
    body = net.body
    return [*(h._model[0] for h in body._hidden_layers), body._logits._model[0]]


def _batches(n_step: int) -> list[dict[str, np.ndarray]]:
    """Random batches; with ``n_step`` > 1 each row's return spans 1..n_step steps (an
    episode's end cuts it short), its discount gamma**k, as SB3's n-step buffer gives them."""
    rng = np.random.default_rng(5)
    out = []
    for _ in range(UPDATES):
        k = rng.integers(1, n_step + 1, ROWS)
        out.append(
            {
                "obs": rng.normal(size=(ROWS, OBS)).astype(np.float32),
                "actions": rng.integers(0, ACTIONS, ROWS).astype(np.int64),
                "next_obs": rng.normal(size=(ROWS, OBS)).astype(np.float32),
                "rewards": (3.0 * rng.normal(size=ROWS)).astype(np.float32),
                "dones": (rng.random(ROWS) < 0.25).astype(np.float32),
                "discounts": (GAMMA**k).astype(np.float32),
            }
        )
    return out


@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("closed_form", [True, False])
def test_updates_equal_stable_baselines3_dqn(closed_form: bool, n_step: int) -> None:
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    torch.manual_seed(0)
    model = sb3.DQN(
        "MlpPolicy",
        SPACES,
        learning_rate=2e-3,
        batch_size=ROWS,
        learning_starts=0,
        gamma=GAMMA,
        max_grad_norm=CLIP,
        policy_kwargs={"net_arch": HIDDEN},
        device="cpu",
        seed=0,
    )
    model.set_logger(configure(None, []))
    cfg = DQNConfig(
        model={"fcnet_hiddens": HIDDEN, "fcnet_activation": "relu"},
        dueling=False,
        double_q=False,
        lr=2e-3,
        gamma=GAMMA,
        n_step=n_step,
        train_batch_size=ROWS,
        grad_clip=CLIP,
    )
    learner = DQNLearner(SPACES.observation_space, SPACES.action_space, cfg, "cpu")
    if not closed_form:  # a no-op hook: the module (autograd) path, the same network
        learner.q.body.register_forward_pre_hook(lambda module, args: None)
    assert (learner._fast_layers(learner.q, training=True) is not None) == closed_form
    # the defaults that match: SB3's max_grad_norm and Huber loss
    sb3_clip = inspect.signature(sb3.DQN).parameters["max_grad_norm"].default
    assert DQNConfig().grad_clip == sb3_clip and cfg.td_error_loss_fn == "huber"
    torch.manual_seed(1)  # a target unlike the online net: its argmax is not the online one's
    for layer in linears(model.q_net_target):
        layer.reset_parameters()
    with torch.no_grad():  # SB3's weights into ours (online and target)
        for theirs, ours in ((model.q_net, learner.q), (model.q_net_target, learner.target)):
            for a, b in zip(linears(theirs), _ours(ours), strict=True):
                b.weight.copy_(a.weight)
                b.bias.copy_(a.bias)

    batches = _batches(n_step)
    feed = iter(batches)

    def sample(batch_size: int, env: Any = None) -> Any:
        b = next(feed)
        return ReplayBufferSamples(
            observations=torch.as_tensor(b["obs"]),
            actions=torch.as_tensor(b["actions"][:, None]),
            next_observations=torch.as_tensor(b["next_obs"]),
            dones=torch.as_tensor(b["dones"][:, None]),
            rewards=torch.as_tensor(b["rewards"][:, None]),
            discounts=torch.as_tensor(b["discounts"][:, None]) if n_step > 1 else None,
        )

    model.replay_buffer.sample = sample  # SB3's buffer hands over our batches, in order
    start = [w.detach().clone() for w in model.q_net.parameters()]
    model.train(gradient_steps=UPDATES, batch_size=ROWS)
    for b in batches:
        discount = b["discounts"] if n_step > 1 else np.float32(GAMMA)
        batch = SimpleNamespace(
            obs=b["obs"],
            actions=b["actions"],
            next_obs=b["next_obs"],
            rewards=b["rewards"],
            discounts=(1.0 - b["dones"]) * discount,
            weights=np.ones(ROWS, np.float32),
        )
        stats, _ = learner.update(batch, timestep=0)
        assert stats["grad_norm"] > CLIP  # the norm before clipping

    assert learner.updates == UPDATES
    for a, b in zip(linears(model.q_net), _ours(learner.q), strict=True):
        np.testing.assert_allclose(b.weight.detach(), a.weight.detach(), atol=1e-6)
        np.testing.assert_allclose(b.bias.detach(), a.bias.detach(), atol=1e-6)
    # the updates moved the network (two unchanged nets would prove nothing)
    after = [w.detach() for w in model.q_net.parameters()]
    moved = max(float((w - w0).abs().max()) for w, w0 in zip(after, start, strict=True))
    assert moved > 1e-3
    # SB3 syncs its target in _on_step (env steps), not in train: both targets unchanged
    for a, b in zip(linears(model.q_net_target), _ours(learner.target), strict=True):
        np.testing.assert_array_equal(b.weight.detach(), a.weight.detach())
    learner.sync_targets()  # tau = 1: a copy, as SB3's default tau
    for a, b in zip(linears(model.q_net), _ours(learner.target), strict=True):
        np.testing.assert_allclose(b.weight.detach(), a.weight.detach(), atol=1e-6)
    obs = np.random.default_rng(4).normal(size=(9, OBS)).astype(np.float32)
    theirs_act, _ = model.predict(obs, deterministic=True)
    np.testing.assert_array_equal(learner.act(obs, explore=False, timestep=10**9), theirs_act)


def _episode_flags(rng: np.random.Generator, steps: int) -> list[tuple[bool, bool]]:
    """(terminated, truncated) per step: episodes that terminate or are truncated, the last
    one truncated (rlblocks samples a step once its next observation is known; SB3 stores it
    with the step). No step has both flags (SB3 then bootstraps, rlblocks does not: see the
    docs)."""
    flags = []
    for _ in range(steps - 1):
        u = rng.random()
        flags.append((bool(u < 0.12), bool(0.12 <= u < 0.2)))
    return [*flags, (False, True)]


@pytest.mark.parametrize("n_step", [1, 3])
def test_n_step_returns_equal_stable_baselines3s_buffer(n_step: int) -> None:
    """Every transition of a stream with terminations and truncations gives the same n-step
    reward, discount and next observation in both buffers."""
    from rlblocks.replay import ReplayBuffer
    from stable_baselines3.common.buffers import NStepReplayBuffer

    steps, gamma = 60, 0.9
    rng = np.random.default_rng(7)
    theirs = NStepReplayBuffer(
        100, SPACES.observation_space, SPACES.action_space, "cpu", n_steps=n_step, gamma=gamma
    )
    ours = ReplayBuffer(200, 1, (OBS,), np.float32, n_step=n_step, gamma=gamma, seed=0)
    obs = rng.normal(size=OBS).astype(np.float32)
    for term, trunc in _episode_flags(rng, steps):
        action, reward = int(rng.integers(ACTIONS)), float(rng.normal())
        nxt = rng.normal(size=OBS).astype(np.float32)
        infos = [{"TimeLimit.truncated": trunc}]
        theirs.add(obs[None], nxt[None], np.array([[action]]), np.array([reward]),
                   np.array([term or trunc]), infos)  # fmt: skip
        ours.add(obs[None], [action], [reward], [term], [trunc], nxt[None])
        # after an episode's end the next one starts from a fresh observation
        obs = rng.normal(size=OBS).astype(np.float32) if term or trunc else nxt

    def key(o: Any, a: Any, r: Any, d: Any, n: Any) -> tuple[Any, ...]:
        return (*np.round(o, 5).tolist(), int(a), round(float(r), 5), round(float(d), 5),
                *np.round(n, 5).tolist())  # fmt: skip

    s = theirs._get_samples(np.arange(steps))
    expected = {
        key(o, a, r, g * (1.0 - d), n)
        for o, a, r, g, d, n in zip(
            s.observations.numpy(), s.actions.numpy()[:, 0], s.rewards.numpy()[:, 0],
            (s.discounts.numpy()[:, 0] if s.discounts is not None else np.full(steps, gamma)),
            s.dones.numpy()[:, 0], s.next_observations.numpy(), strict=True,
        )
    }  # fmt: skip
    assert len(expected) == steps
    got = set()
    for _ in range(60):  # with replacement: 60 x 50 draws of 60 transitions see them all
        b = ours.sample(50)
        got |= {
            key(*row)
            for row in zip(b.obs, b.actions, b.rewards, b.discounts, b.next_obs, strict=True)
        }
    assert got == expected
