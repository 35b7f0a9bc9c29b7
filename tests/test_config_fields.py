"""The one validation layer (rlblocks.config_fields): every config kind derives its defaults
and checks from one table and refuses a bad value with the same words."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from rlblocks.config import MODEL_DEFAULTS, ModelConfig
from rlblocks.config_fields import checks_of, config_keys
from rlblocks.train.offpolicy_config import DQNConfig, OffPolicyConfig, SACConfig
from rlblocks.train.trainer_config import PPOConfig, TrainerConfig


def test_the_model_table_gives_every_key_a_default_and_a_check() -> None:
    checks = checks_of(ModelConfig)
    assert list(checks) == list(MODEL_DEFAULTS)
    for key, default in MODEL_DEFAULTS.items():
        # each default passes its own check and comes back in the same RLlib form
        value = checks[key](default, key)
        assert ModelConfig.from_dict({key: default})[key] == default, (key, value)


@pytest.mark.parametrize("cls", [TrainerConfig, PPOConfig, OffPolicyConfig, DQNConfig, SACConfig])
def test_every_trainer_key_is_in_the_table(cls: type[TrainerConfig]) -> None:
    """A field the table does not check would take any value: only the keys checked across
    fields (a fragment length that follows the batch, a block checked against the model)
    stay outside it."""
    unchecked = set(config_keys(cls)) - set(checks_of(cls))
    assert unchecked <= {"rollout_fragment_length", "multiagent"}, unchecked


@pytest.mark.parametrize(
    ("cls", "key", "value", "message"),
    [
        # a subclass that changes a default keeps the base's check
        (DQNConfig, "lr", 0.0, "lr must be a finite number > 0.0, got 0.0"),
        (PPOConfig, "grad_clip", -1.0, "grad_clip must be a finite number > 0.0, got -1.0"),
        (SACConfig, "num_envs", 0, "num_envs must be an int >= 1, got 0"),
        (SACConfig, "train_batch_size", 0, "train_batch_size must be an int >= 1, got 0"),
        (SACConfig, "tau", 1.5, "tau must be in (0.0, 1.0], got 1.5"),
        (DQNConfig, "learning_starts", -1, "learning_starts must be an int >= 0, got -1"),
        (PPOConfig, "lambda", 2.0, "lambda must be in [0.0, 1.0], got 2.0"),
        (SACConfig, "twin_q", 1, "twin_q must be True or False, got 1"),
        (DQNConfig, "td_error_loss_fn", "l1", "td_error_loss_fn must be one of 'huber', 'mse'"),
    ],
)
def test_trainer_configs_refuse_with_the_tables_check(
    cls: type[TrainerConfig], key: str, value: object, message: str
) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace("[", r"\[")):
        cls.from_dict({key: value})


def test_an_int_is_an_int_in_every_config() -> None:
    """numpy integers pass every "is an int >= k" check (the model's always took them; the
    trainers' refused them with a message saying the value was not an int >= 1)."""
    assert ModelConfig.from_dict({"dim": np.int64(42)}).dim == 42
    cfg = PPOConfig(num_envs=np.int64(4), train_batch_size=np.int32(64))
    assert (cfg.num_envs, cfg.rollout_fragment_length) == (4, 16)
    assert type(cfg.num_envs) is int
    for bad in (True, 1.0, "1"):
        with pytest.raises(ValueError, match="num_envs must be an int >= 1"):
            PPOConfig(num_envs=bad)
        with pytest.raises(ValueError, match="dim must be an int >= 1"):
            ModelConfig.from_dict({"dim": bad})


def test_mutable_defaults_are_not_shared() -> None:
    a, b = DQNConfig(), DQNConfig()
    a.epsilon.append([1.0, 0.0])
    a.model["x"] = 1
    assert b.epsilon == [[0.0, 1.0], [10000.0, 0.05]] and b.model == {}
    c = ModelConfig()
    assert c.entity_encoder is not ModelConfig().entity_encoder
    assert [f.name for f in dataclasses.fields(ModelConfig)][:2] == [
        "fcnet_hiddens",
        "fcnet_activation",
    ]
