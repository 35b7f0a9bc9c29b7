"""Which observations carry an action mask (rlblocks.masks): RLlib's
``Dict(action_mask, observations)``, PettingZoo's ``Dict(observation, action_mask)`` read as
it (single-agent envs and parallel multi-agent envs), and any other Dict with an
``action_mask`` key refused, never fed to the model as a feature.

The envs count every masked action taken (:attr:`MaskedBanditEnv.counts`): after training
it must be 0, where a random policy takes masked actions on about half of its steps.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, MultiBinary
from rlblocks.envs.masked_bandit import MaskedBanditEnv
from rlblocks.masks import mask_form, mask_form_space, refuse_unread_mask
from rlblocks.train import PPOTrainer

TINY = {
    "num_envs": 2,
    "train_batch_size": 64,
    "rollout_fragment_length": 32,
    "sgd_minibatch_size": 32,
    "num_sgd_iter": 1,
    "model": {"fcnet_hiddens": [16]},
    "seed": 0,
}


class Renamed(gym.ObservationWrapper):
    """The masked bandit with its observation keys renamed."""

    def __init__(self, env: gym.Env, names: dict[str, str]) -> None:
        super().__init__(env)
        self.names = names
        space = env.observation_space
        self.observation_space = Dict({names.get(k, k): s for k, s in space.spaces.items()})

    def observation(self, observation: Any) -> Any:
        return {self.names.get(k, k): v for k, v in observation.items()}


def test_the_pettingzoo_form_is_read_as_rllibs() -> None:
    space = Dict({"observation": Box(-1, 1, (3,)), "action_mask": MultiBinary(2)})
    mapped = mask_form_space(space)
    assert list(mapped.spaces) == ["action_mask", "observations"]
    value = {"observation": np.zeros(3), "action_mask": np.ones(2)}
    assert set(mask_form(value)) == {"action_mask", "observations"}
    other = Dict({"observation": Box(-1, 1, (3,))})
    assert mask_form_space(other) is other and mask_form({"a": 1}) == {"a": 1}


def test_a_single_agent_env_in_pettingzoos_form_never_takes_a_masked_action() -> None:
    MaskedBanditEnv.reset_counts()

    def make(_: Any) -> gym.Env:
        return Renamed(MaskedBanditEnv(), {"observations": "observation"})

    with PPOTrainer({**TINY, "env": make}) as trainer:
        assert set(trainer.policy.obs_space.original_space.spaces) == {
            "action_mask",
            "observations",
        }
        for _ in range(2):
            trainer.train()
    counts = MaskedBanditEnv.counts
    assert counts["steps"] >= 128 and counts["masked"] == 0, counts


@pytest.mark.parametrize(
    "names", [{"observations": "board"}, {"observations": "obs"}, {"action_mask": "action_mask"}]
)
def test_a_mask_next_to_other_keys_is_refused_not_fed_to_the_model(
    names: dict[str, str],
) -> None:
    def make(_: Any) -> gym.Env:
        env = Renamed(MaskedBanditEnv(), names)
        if names == {"action_mask": "action_mask"}:  # a third key next to the two
            env = gym.wrappers.TransformObservation(
                env,
                lambda o: {**o, "turn": np.zeros(1, np.float32)},
                Dict({**env.observation_space.spaces, "turn": Box(0, 1, (1,))}),
            )
        return env

    others = sorted(set(make(None).observation_space.spaces) - {"action_mask"})
    with pytest.raises(ValueError) as err:
        PPOTrainer({**TINY, "env": make})
    assert str(err.value).startswith(
        f"the observation space has an 'action_mask' key next to {others}: rlblocks masks "
        "actions for Dict(action_mask=..., observations=...)"
    )
    refuse_unread_mask(MaskedBanditEnv().observation_space)  # RLlib's form passes


def test_a_custom_model_may_read_a_mask_next_to_other_keys() -> None:
    """The parametric-actions model reads ``action_mask`` beside ``avail_actions``."""
    with PPOTrainer(
        {
            **TINY,
            "env": "rlblocks/ParametricCartPole-v0",
            "model": {"custom_model": "rlblocks.models.parametric:ParametricActionsModel"},
        }
    ) as trainer:
        assert trainer.train()["timesteps_total"] == 64


def test_a_parallel_env_in_pettingzoos_form_never_takes_a_masked_action() -> None:
    pytest.importorskip("pettingzoo")
    from pettingzoo import ParallelEnv
    from rlblocks.train.multiagent import MultiAgentPPOTrainer

    class TwoBandits(ParallelEnv):  # type: ignore[misc]
        """Two agents, each on its own masked bandit, observing PettingZoo's form."""

        metadata = {"name": "two_bandits"}
        possible_agents = ["a", "b"]

        def __init__(self) -> None:
            self.envs = {a: MaskedBanditEnv() for a in self.possible_agents}
            self.agents: list[str] = []

        def observation_space(self, agent: str) -> gym.Space:
            inner = self.envs[agent].observation_space
            return Dict({"observation": inner["observations"], "action_mask": inner["action_mask"]})

        def action_space(self, agent: str) -> gym.Space:
            return self.envs[agent].action_space

        def _pz(self, obs: dict[str, Any]) -> dict[str, Any]:
            return {"observation": obs["observations"], "action_mask": obs["action_mask"]}

        def reset(self, seed: int | None = None, options: Any = None) -> Any:
            self.agents = list(self.possible_agents)
            out = {}
            for i, (a, env) in enumerate(self.envs.items()):
                obs, _ = env.reset(seed=None if seed is None else seed + i)
                out[a] = self._pz(obs)
            return out, {a: {} for a in self.agents}

        def step(self, actions: dict[str, Any]) -> Any:
            obs, rew, term, trunc = {}, {}, {}, {}
            for a in self.agents:
                o, r, te, tr, _ = self.envs[a].step(actions[a])
                obs[a], rew[a], term[a], trunc[a] = self._pz(o), r, te, tr
            if any(term.values()) or any(trunc.values()):
                self.agents = []
            return obs, rew, term, trunc, {a: {} for a in obs}

    MaskedBanditEnv.reset_counts()
    with MultiAgentPPOTrainer({**TINY, "env": lambda _: TwoBandits()}) as trainer:
        for _ in range(2):
            trainer.train()
    counts = MaskedBanditEnv.counts
    assert counts["steps"] >= 128 and counts["masked"] == 0, counts


def pettingzoo_form_bandit(**kwargs: Any) -> gym.Env:
    """The masked bandit observing PettingZoo's ``{"observation", "action_mask"}``."""
    return Renamed(MaskedBanditEnv(**kwargs), {"observations": "observation"})


@pytest.mark.ray
def test_the_rllib_backend_reads_pettingzoos_form_too(tmp_path: Any) -> None:
    from rlblocks.cli import main

    env_id = "rlblocks-test/PettingZooFormBandit-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=f"{__name__}:pettingzoo_form_bandit")
    MaskedBanditEnv.reset_counts()
    argv = ["train", "--backend", "rllib", "--env", env_id, "--run-dir", str(tmp_path / "run")]
    argv += ["--stop-timesteps", "128", "--no-progress", "--no-default-stop-reward"]
    for key in ("num_envs=2", "train_batch_size=64", "sgd_minibatch_size=32", "seed=1"):
        argv += ["--set", key]
    assert main(argv) == 0
    counts = MaskedBanditEnv.counts
    assert counts["steps"] >= 128 and counts["masked"] == 0, counts
