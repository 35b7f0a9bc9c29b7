"""A model key the user gave that the built model never reads is named at the start of the
run (``rlblocks.cli.model_notes``): the vision net reads no ``fcnet_*`` key, as RLlib's."""

from __future__ import annotations

import gymnasium as gym
import pytest
from rlblocks.catalog import ModelCatalog
from rlblocks.cli.model_notes import unread_model_keys_note
from rlblocks.models.heads import ContinuousActionQModel

from tests.conftest import run_cli

IMAGE = gym.spaces.Box(0, 255, (10, 10, 3))
VECTOR = gym.spaces.Box(-1.0, 1.0, (4,))


def _model(obs: gym.Space, config: dict, action: gym.Space | None = None):
    n = None if isinstance(action, gym.spaces.Box) else 2
    action = action or gym.spaces.Discrete(2)
    return ModelCatalog.get_model_v2(obs, action, n, config, framework="torch")


@pytest.mark.parametrize("wrapper", [{}, {"use_lstm": True}, {"use_attention": True}])
def test_the_vision_net_alone_or_wrapped_leaves_fcnet_keys_unread(wrapper: dict) -> None:
    given = {"fcnet_hiddens": [32], "fcnet_activation": "relu", **wrapper}
    note = unread_model_keys_note(_model(IMAGE, given), given)
    assert note is not None
    assert "model.fcnet_hiddens=[32], model.fcnet_activation='relu' are not used" in note
    assert "conv_filters=[[16, [5, 5], 2], [32, [5, 5], 2]]" in note


@pytest.mark.parametrize(
    "obs",
    [VECTOR, gym.spaces.Dict({"img": IMAGE, "vec": VECTOR})],
    ids=["fully-connected", "complex-input"],
)
def test_models_that_read_fcnet_keys_get_no_note(obs: gym.Space) -> None:
    given = {"fcnet_hiddens": [32]}
    assert unread_model_keys_note(_model(obs, given), given) is None


def test_no_note_without_a_given_fcnet_key() -> None:
    assert unread_model_keys_note(_model(IMAGE, {}), {"conv_activation": "relu"}) is None


def test_a_critic_that_reads_the_key_counts() -> None:
    """SAC with a Box action: its critic's Q head (a fully connected net over features and
    action) reads fcnet_hiddens even where the actor is a vision net alone."""
    given = {"fcnet_hiddens": [32]}
    box = gym.spaces.Box(-1.0, 1.0, (2,))
    actor = _model(IMAGE, given)
    base = _model(IMAGE, given, box)
    critic = ContinuousActionQModel(IMAGE, box, None, given, "q", base_model=base)
    assert unread_model_keys_note(actor, given) is not None
    assert unread_model_keys_note(actor, given, critic) is None


def test_the_cli_says_so_at_the_start(tmp_path) -> None:
    args = ["train", "--env", "rlblocks.envs.zoo_observations:ImageBandit", "--no-progress"]
    args += ["--stop-timesteps", "64", "--set", "num_envs=1", "--set", "train_batch_size=64"]
    args += ["--set", "sgd_minibatch_size=32", "--set", "num_sgd_iter=1"]
    given = run_cli(*args, "--set", "model.fcnet_hiddens=[8]", "--run-dir", str(tmp_path / "a"))
    plain = run_cli(*args, "--run-dir", str(tmp_path / "b"))
    assert given.returncode == 0 and plain.returncode == 0, given.stderr + plain.stderr
    assert "note: model.fcnet_hiddens=[8] is not used: the model is the vision net" in given.stdout
    assert "is not used" not in plain.stdout
