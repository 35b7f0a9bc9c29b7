"""The returns a run prints carry enough digits for the env's scale (issue 46, item 5): the
end-of-run line of ``rlblocks train`` said "mean return 1.0" for MiniGrid's 0.96."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import run_cli
from rlblocks.train.numbers import format_return

ENV_ID = "rlblocks-test/NinetySix-v0"


class NinetySix(gym.Env):
    """One step per episode, reward 0.96 (a MiniGrid-like return just below 1)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.96, True, False, {}


@pytest.mark.parametrize(
    "value, text",
    [
        (0.96, "0.96"),
        (0.9599999785423279, "0.96"),  # a float32 0.96
        (0.99999, "0.99999"),  # never "1.0": more decimals until it is not whole
        (-0.5004, "-0.5004"),
        (396.607, "396.6"),
        (-22.25, "-22.25"),
        (5819.31, "5819.3"),  # at least one decimal: 4 digits alone would read whole
        (-200.0, "-200.0"),
        (500, "500.0"),
        (1.5e-5, "0.000015"),
        (float("nan"), "nan"),
        (float("-inf"), "-inf"),
    ],
)
def test_format_return(value: float, text: str) -> None:
    assert format_return(value) == text
    if np.isfinite(value) and value != round(value):
        assert float(format_return(value)) != round(value)


def test_end_of_run_line_prints_the_return_s_digits(tmp_path: Path) -> None:
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=NinetySix)
    run = tmp_path / "run"
    small = ["--set", "train_batch_size=64", "--set", "sgd_minibatch_size=32"]
    out = run_cli(
        "train", "--env", ENV_ID, "--num-envs", "2", "--stop-timesteps", "64", *small,
        "--set", "num_sgd_iter=1", "--set", "model.fcnet_hiddens=[8]", "--no-progress",
        "--no-default-stop-reward", "--run-dir", str(run),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    done = re.search(r"mean return (\S+) \(last", out.stdout)
    assert done is not None, out.stdout
    assert done.group(1) == "0.96"
    evaluated = run_cli("evaluate", str(run), "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr
    result = json.loads(evaluated.stdout)  # the JSON keeps every digit of the returns
    assert result["episode_return_mean"] == pytest.approx(0.96, abs=1e-12)
    assert result["episode_returns"] == pytest.approx([0.96, 0.96], abs=1e-12)
