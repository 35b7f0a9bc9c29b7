"""The catalog's small-image rule (difference 39): an image of at most 3x3 cells (tictactoe's
3x3x2 board) gets the fully connected net, a larger one keeps the vision net, and
``conv_filters`` set by the user wins; ``rlblocks train`` says so at the start and the
run's checkpoint rebuilds the model it trained."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlblocks.catalog import ModelCatalog, is_small_image
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.visionnet import VisionNetwork
from tests.conftest import run_cli

BOARD = gym.spaces.Box(0, 1, (3, 3, 2), np.int8)
MOVES = gym.spaces.Discrete(9)
CONVS = [[16, [2, 2], 1], [32, [3, 3], 1]]  # "same" 2x2, then a "valid" 3x3: 1x1


def _inner(model: object) -> object:
    return getattr(model, "inner", model)  # an ActionMaskModel's wrapped model


def _masked_board() -> gym.Space:
    """PettingZoo classic's observation, preprocessed as the trainers do."""
    space = gym.spaces.Dict(
        {"action_mask": gym.spaces.MultiBinary(9), "observations": BOARD}
    )
    return ModelCatalog.get_preprocessor_for_space(space).observation_space


@pytest.mark.parametrize(
    ("shape", "small"),
    [((3, 3, 2), True), ((1, 1, 4), True), ((3, 4, 2), False), ((6, 7, 2), False)],
)
def test_an_image_of_at_most_3x3_cells_is_small(shape: tuple[int, ...], small: bool) -> None:
    assert is_small_image(gym.spaces.Box(0, 1, shape)) is small
    assert not is_small_image(gym.spaces.Box(0, 1, (9,)))  # no image at all


def test_a_3x3_board_gets_the_fc_net_and_an_84x84_image_keeps_the_conv_net() -> None:
    n = MOVES.n
    board = ModelCatalog.get_model_v2(BOARD, MOVES, n, {"fcnet_hiddens": [32, 32]})
    assert isinstance(board, FullyConnectedNetwork)
    first = board._hidden_layers[0]._model[0]  # the flattened 3x3x2 board in
    assert (first.in_features, first.out_features) == (18, 32)
    masked = ModelCatalog.get_model_v2(_masked_board(), MOVES, n, {})
    assert isinstance(_inner(masked), FullyConnectedNetwork)
    frames = ModelCatalog.get_model_v2(gym.spaces.Box(0, 255, (84, 84, 3)), MOVES, n, {})
    assert isinstance(frames, VisionNetwork)
    four = ModelCatalog.get_model_v2(gym.spaces.Box(0, 1, (6, 7, 2)), MOVES, n, {})
    assert isinstance(four, VisionNetwork)  # connect_four's board is no small image


def test_conv_filters_set_by_the_user_keep_the_conv_net_on_a_small_image() -> None:
    model = ModelCatalog.get_model_v2(BOARD, MOVES, MOVES.n, {"conv_filters": CONVS})
    assert isinstance(model, VisionNetwork) and model.model_config["conv_filters"] == CONVS
    masked = ModelCatalog.get_model_v2(_masked_board(), MOVES, MOVES.n, {"conv_filters": CONVS})
    assert isinstance(_inner(masked), VisionNetwork)


def _trained_model(run: Path) -> object:
    from rlblocks.train import MultiAgentPPOTrainer

    trainer = MultiAgentPPOTrainer.restore(run, log=False)
    try:
        return _inner(trainer.model)
    finally:
        trainer.close()


@pytest.mark.filterwarnings("ignore:resuming:RuntimeWarning")  # PettingZoo's envs restart
def test_cli_tictactoe_trains_the_fc_net_says_so_and_set_conv_filters_wins(
    tmp_path: Path,
) -> None:
    pytest.importorskip("pettingzoo.classic.tictactoe_v3", reason="PettingZoo classic")
    small = ["--set", "train_batch_size=256", "--set", "sgd_minibatch_size=128", "--no-progress"]
    env = "pettingzoo.classic.tictactoe_v3:env"
    fc, conv = tmp_path / "fc", tmp_path / "conv"
    done = run_cli("train", "--env", env, *small, "--run-dir", str(fc), "--stop-timesteps", "256")
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if "small image" in line]
    assert len(said) == 1 and "(3, 3, 2)" in said[0] and "fully connected" in said[0]
    assert json.loads((fc / "config.json").read_text())["model"].get("conv_filters") is None
    assert isinstance(_trained_model(fc), FullyConnectedNetwork)

    filters = json.dumps(CONVS)
    done = run_cli(
        "train",
        "--env",
        env,
        *small,
        "--set",
        f"model.conv_filters={filters}",
        "--run-dir",
        str(conv),
        "--stop-timesteps",
        "256",
    )
    assert done.returncode == 0, done.stderr
    assert "small image" not in done.stdout
    assert json.loads((conv / "config.json").read_text())["model"]["conv_filters"] == CONVS
    assert isinstance(_trained_model(conv), VisionNetwork)
