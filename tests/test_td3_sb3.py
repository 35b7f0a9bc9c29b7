"""TD3's update against Stable-Baselines3's TD3 (issue 47's MuJoCo rows compare the two at
the zoo's settings): from the same weights, on the same batches and the same draw of target
smoothing noise, a run of updates leaves the same actor, critics and Polyak targets up to
float rounding, through the closed form and through autograd, and the deterministic actions
agree. So the gap between the two libraries' returns at a budget is not their update."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.train import TD3Config
from rlblocks.train.learners.td3 import TD3Learner
from sb3_twins import SpacesOnly, linears

sb3 = pytest.importorskip("stable_baselines3")

OBS, ACT, ROWS, HIDDEN, UPDATES = 5, 2, 32, [24, 16], 6
#: The spaces both libraries are built on (nothing steps the env).
SPACES = SpacesOnly(
    gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32),
    gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32),
)


def _ours_actor(model: Any) -> list[torch.nn.Linear]:
    """Our actor's hidden layers and its logits layer (2 * dim(A) rows: mean, log-std)."""
    return [*(h._model[0] for h in model._hidden_layers), model._logits._model[0]]


def _ours_critic(critic: Any) -> list[torch.nn.Linear]:
    head = critic.q_head
    return [*(h._model[0] for h in head._hidden_layers), head._logits._model[0]]


def _pairs(model: Any, learner: TD3Learner) -> list[tuple[list[Any], list[Any]]]:
    """(SB3's layers, ours) for the actor, its target, each critic and each target."""
    pairs = [
        (linears(model.actor.mu), _ours_actor(learner.actor)),
        (linears(model.actor_target.mu), _ours_actor(learner.target_actor)),
    ]
    for i in range(2):
        pairs.append((linears(model.critic.q_networks[i]), _ours_critic(learner.critics[i])))
        pairs.append(
            (linears(model.critic_target.q_networks[i]), _ours_critic(learner.target_critics[i]))
        )
    return pairs


def _batches() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    return [
        {
            "obs": rng.normal(size=(ROWS, OBS)).astype(np.float32),
            "actions": rng.uniform(-1, 1, (ROWS, ACT)).astype(np.float32),
            "next_obs": rng.normal(size=(ROWS, OBS)).astype(np.float32),
            "rewards": rng.normal(size=ROWS).astype(np.float32),
            "dones": (rng.random(ROWS) < 0.25).astype(np.float32),
        }
        for _ in range(UPDATES)
    ]


@pytest.mark.parametrize("closed_form", [True, False])
def test_updates_equal_stable_baselines3_td3(closed_form: bool) -> None:
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    torch.manual_seed(0)
    model = sb3.TD3(
        "MlpPolicy",
        SPACES,
        learning_rate=1e-3,
        batch_size=ROWS,
        learning_starts=0,
        policy_kwargs={"net_arch": HIDDEN},
        device="cpu",
        seed=0,
    )
    model.set_logger(configure(None, []))
    cfg = TD3Config(
        model={"fcnet_hiddens": HIDDEN},
        q_model={"fcnet_hiddens": HIDDEN},
        network_init="torch",
        train_batch_size=ROWS,
    )
    learner = TD3Learner(SPACES.observation_space, SPACES.action_space, cfg)
    if not closed_form:  # a no-op hook: the module (autograd) path, the same networks
        learner.actor.register_forward_pre_hook(lambda module, args: None)
    with torch.no_grad():  # SB3's weights into ours (the actor's mean rows of the logits)
        for theirs, ours in _pairs(model, learner):
            for a, b in zip(theirs, ours, strict=True):
                b.weight[: a.weight.shape[0]].copy_(a.weight)
                b.bias[: a.bias.shape[0]].copy_(a.bias)

    batches = _batches()
    feed = iter(batches)

    def sample(batch_size: int, env: Any = None) -> Any:
        b = next(feed)
        fields = {
            "observations": torch.as_tensor(b["obs"]),
            "actions": torch.as_tensor(b["actions"]),
            "next_observations": torch.as_tensor(b["next_obs"]),
            "dones": torch.as_tensor(b["dones"][:, None]),
            "rewards": torch.as_tensor(b["rewards"][:, None]),
        }
        if "discounts" in ReplayBufferSamples._fields:
            fields["discounts"] = None  # SB3's own gamma
        return ReplayBufferSamples(**fields)

    model.replay_buffer.sample = sample  # SB3's buffer hands over our batches, in order
    start = [w.detach().clone() for w in model.actor.mu.parameters()]
    torch.manual_seed(123)  # the same target-smoothing draws on both sides
    model.train(gradient_steps=UPDATES, batch_size=ROWS)
    torch.manual_seed(123)
    for b in batches:
        batch = SimpleNamespace(
            obs=b["obs"],
            actions=b["actions"],
            next_obs=b["next_obs"],
            rewards=b["rewards"],
            discounts=(1.0 - b["dones"]) * 0.99,
            weights=np.ones(ROWS, np.float32),
        )
        learner.update(batch, timestep=0)

    assert learner.updates == UPDATES  # three delayed actor steps and Polyak steps
    for theirs, ours in _pairs(model, learner):
        for a, b in zip(theirs, ours, strict=True):
            rows = a.weight.shape[0]
            np.testing.assert_allclose(b.weight[:rows].detach(), a.weight.detach(), atol=1e-5)
            np.testing.assert_allclose(b.bias[:rows].detach(), a.bias.detach(), atol=1e-5)
    # and the updates moved the actor (a comparison of two unchanged nets proves nothing)
    after = [w.detach() for w in model.actor.mu.parameters()]
    moved = max(float((w - w0).abs().max()) for w, w0 in zip(after, start, strict=True))
    assert moved > 1e-4
    obs = np.random.default_rng(4).normal(size=(7, OBS)).astype(np.float32)
    theirs_act, _ = model.predict(obs, deterministic=True)
    ours_act = learner.act(obs, explore=False, timestep=10**9)
    np.testing.assert_allclose(ours_act, theirs_act, atol=1e-5)
