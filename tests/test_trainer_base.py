"""One Trainer base (issue 43, item 1): PPO, off-policy (DQN, SAC) and multi-agent PPO are
siblings under :class:`rlblocks.train.trainer.Trainer`, which alone holds the run directory,
checkpoint and close code and the refusal of an ``rllib`` block."""

from __future__ import annotations

import pytest
from rlblocks.train.multiagent import MultiAgentPPOTrainer
from rlblocks.train.offpolicy import DQNTrainer, OffPolicyTrainer, SACTrainer
from rlblocks.train.ppo import PPOTrainer
from rlblocks.train.trainer import Trainer

ALGORITHMS = (PPOTrainer, OffPolicyTrainer, MultiAgentPPOTrainer)


def test_the_algorithms_are_siblings_under_the_trainer_base() -> None:
    for cls in ALGORITHMS:
        assert cls.__bases__ == (Trainer,), cls
    for cls in (DQNTrainer, SACTrainer, MultiAgentPPOTrainer):
        assert not issubclass(cls, PPOTrainer), cls


@pytest.mark.parametrize("name", ["restore", "save", "state_dict", "close", "_start"])
def test_the_shared_machinery_is_written_once_in_the_base(name: str) -> None:
    assert name in vars(Trainer)
    for cls in (*ALGORITHMS, DQNTrainer, SACTrainer):
        assert name not in vars(cls), f"{cls.__name__} has its own copy of {name}"


@pytest.mark.parametrize("cls", [PPOTrainer, DQNTrainer, SACTrainer, MultiAgentPPOTrainer])
def test_every_trainer_refuses_an_rllib_block_in_the_same_words(cls: type[Trainer]) -> None:
    # refused before any env is made: the env named here does not exist
    with pytest.raises(ValueError) as err:
        cls({"env": "no_such_module:no_env", "rllib": {"learners": {"num_learners": 1}}})
    assert str(err.value) == (
        "the config's 'rllib' block sets RLlib options: train it with "
        "--backend rllib (RLlibTrainer), or remove the block"
    )
