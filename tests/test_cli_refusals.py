"""The command line refuses early and says what it means (issue 44, items 5 and 6): what the
spaces and the algorithm decide is refused before Ray is imported, in the native backend's
words; options are never abbreviated; ``--num-envs`` and ``--seed`` are flags; a key given
twice is refused; a YAML error keeps its position marker.

Each case runs ``rlblocks`` in a fresh interpreter, which reports afterwards (on its last
stderr line) whether it imported Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import rlblocks

_CODE = """
import sys
from rlblocks.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as stop:
    code = stop.code
print("ray imported:", "ray" in sys.modules, file=sys.stderr)
sys.exit(code)
"""

TINY = ["--set", "train_batch_size=32", "--set", "sgd_minibatch_size=16"]
TINY += ["--set", "num_sgd_iter=1", "--set", "model.fcnet_hiddens=[8]", "--no-progress"]


def cli(*args: str, cwd: Path | None = None) -> tuple[int, list[str], bool]:
    """``(exit code, stderr lines before the report, whether Ray was imported)``."""
    where = str(Path(rlblocks.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": where, "OMP_NUM_THREADS": "1"}
    env.pop("RLBLOCKS_TRACEBACK", None)
    out = subprocess.run(
        [sys.executable, "-c", _CODE, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )
    lines = out.stderr.rstrip("\n").splitlines()
    assert lines and lines[-1].startswith("ray imported: "), out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, lines[:-1], lines[-1] == "ray imported: True"


def error(lines: list[str]) -> str:
    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1, lines
    return errors[0].split(": error: ", 1)[1]


@pytest.mark.parametrize(
    ("env", "algo"), [("Pendulum-v1", "DQN"), ("rlblocks.envs:rlblocks/MaskedBandit-v0", "SAC")]
)
@pytest.mark.ray  # checks that Ray is not imported: meaningful where it is installed
def test_rllib_refuses_what_the_spaces_decide_before_ray_in_the_native_words(
    env: str, algo: str, tmp_path: Path
) -> None:
    code, lines, ray = cli(
        "train",
        "--env",
        env,
        "--algo",
        algo,
        "--backend",
        "rllib",
        "--run-dir",
        str(tmp_path / "r"),
    )
    assert code == 2 and not ray
    assert not (tmp_path / "r").exists()
    if algo == "DQN":  # the native trainer refuses the same spaces in the same words
        native_code, native_lines, _ = cli(
            "train", "--env", env, "--algo", algo, "--no-progress", "--run-dir", str(tmp_path / "n")
        )
        assert native_code == 2
        assert error(lines) == error(native_lines)
        assert error(lines).startswith("DQN needs a Discrete action space, got Box(")
    else:
        assert "SAC does not read action masks" in error(lines)


@pytest.mark.ray  # checks that Ray is not imported: meaningful where it is installed
def test_off_policy_algos_on_a_multiagent_env_say_the_real_rule(tmp_path: Path) -> None:
    zoo = "rlblocks.envs.multiagent_zoo:parallel_env"
    code, lines, ray = cli("train", "--env", zoo, "--algo", "DQN", "--run-dir", str(tmp_path))
    assert code == 2 and not ray
    assert "MultiAgentPPOTrainer (rlblocks train picks it" not in error(lines)
    assert error(lines).startswith("rlblocks train trains multi-agent envs with PPO")
    code, lines, ray = cli(
        "train", "--env", zoo, "--algo", "SAC", "--backend", "rllib", "--run-dir", str(tmp_path)
    )
    assert code == 2 and not ray
    assert (
        error(lines) == "--backend rllib trains multi-agent envs with PPO, APPO or IMPALA, not SAC"
    )


@pytest.mark.ray  # checks that Ray is not imported: meaningful where it is installed
def test_appo_chooses_its_env_runner_and_refuses_before_ray(tmp_path: Path) -> None:
    run = str(tmp_path / "r")
    base = ["train", "--env", "CartPole-v1", "--backend", "rllib", "--algo", "APPO"]
    code, lines, ray = cli(*base, "--set", "target_kl=0.1", "--run-dir", run)
    assert code == 2 and not ray
    assert any("--num-env-runners 1" in line for line in lines), lines
    assert error(lines).startswith("target_kl=0.1: a native-trainer option")
    code, lines, ray = cli(*base, "--num-env-runners", "0", "--run-dir", run)
    assert code == 2 and not ray
    assert error(lines) == "APPO samples asynchronously: give --num-env-runners >= 1"


def test_num_envs_and_seed_are_flags_and_options_are_not_abbreviated(tmp_path: Path) -> None:
    run = tmp_path / "r"
    code, lines, _ = cli(
        "train", "--env", "CartPole-v1", "--num-envs", "1", "--seed", "3", *TINY,
        "--stop-timesteps", "32", "--run-dir", str(run),
    )  # fmt: skip
    assert code == 0, lines
    config = json.loads((run / "config.json").read_text())
    assert (config["num_envs"], config["seed"]) == (1, 3)
    code, lines, _ = cli("train", "--resume", str(run), "--seed", "4")
    assert code == 2 and "--num-envs and --seed cannot be combined with it" in error(lines)
    code, lines, _ = cli("train", "--env", "CartPole-v1", "--num-envs-per", "2")
    assert code == 2 and "unrecognized arguments: --num-envs-per 2" in lines[-1]
    code, lines, _ = cli("train", "--env", "CartPole-v1", "--num-envs", "2", "--set", "num_envs=4")
    assert error(lines) == "--num-envs 2 and --set num_envs=4 both set num_envs; give it once"


def test_a_key_set_twice_is_refused() -> None:
    code, lines, _ = cli("train", "--env", "CartPole-v1", "--set", "seed=3", "--set", "seed=4")
    assert code == 2
    assert error(lines) == "--set seed=4: seed is already set by --set seed=3; give each key once"
    code, lines, _ = cli(
        "train", "--env", "CartPole-v1", "--set", "model.fcnet_hiddens=[4]", "--set", "model={}"
    )
    assert code == 2 and "model is already set by --set model.fcnet_hiddens=[4]" in error(lines)


def test_a_yaml_error_keeps_its_marker_lines(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: CartPole-v1\nlr: 1\n  gamma: 2\n")
    code, lines, _ = cli("train", "--config", str(bad))
    assert code == 2
    assert len(lines) == 3, lines
    assert error(lines[:1]).endswith("mapping values are not allowed here (line 3, column 8)")
    assert lines[1].strip() == "gamma: 2"
    assert lines[2].index("^") == lines[1].index(":")
