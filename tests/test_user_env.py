"""A user's own environment from the command line: gymnasium's ``module:EnvId`` form.

The training run starts in a fresh interpreter with ``-P`` (no script directory on sys.path,
as with the installed ``rlblocks`` console script) in a folder holding the user's package
``my_pkg`` (tests/fixtures/user_envs), so the module is really imported by the CLI; the
other commands run ``rlblocks.cli.main`` in this process, in that folder.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import rlblocks
from rlblocks.train import PPOConfig, PPOTrainer
from rlblocks.train.envs import env_spec, registered_id

USER_DIR = Path(__file__).parent / "fixtures" / "user_envs"
ENV = "my_pkg.envs:Corridor-v0"


def rlblocks_cli(*args: str, cwd: Path = USER_DIR) -> subprocess.CompletedProcess[str]:
    where = str(Path(rlblocks.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": where}
    code = "import sys; from rlblocks.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-P", "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def progress_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "progress.csv") as f:
        return list(csv.DictReader(f))


def test_train_evaluate_and_resume_a_users_env(
    tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    run = tmp_path / "run"
    out = rlblocks_cli(
        "train",
        "--env",
        ENV,
        "--set",
        "env_config.length=4",
        "--set",
        "train_batch_size=512",
        "--stop-reward",
        "-3.2",
        "--stop-timesteps",
        "40000",
        "--no-progress",
        "--run-dir",
        str(run),
    )
    assert out.returncode == 0, out.stderr
    assert json.loads((run / "config.json").read_text())["env_config"] == {"length": 4}
    rows = progress_rows(run)
    # Length 4: the best return is -3 (three steps right); a random walk needs far more.
    assert float(rows[-1]["episode_return_mean"]) >= -3.2

    out = cli("evaluate", str(run), "--episodes", "5", "--seed", "0")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["episode_return_mean"] == -3.0

    steps = int(rows[-1]["timesteps_total"])
    out = cli(
        "train",
        "--resume",
        str(run),
        "--stop-timesteps",
        str(steps + 1024),
        "--no-default-stop-reward",
        "--no-progress",
    )
    assert out.returncode == 0, out.stderr
    assert int(progress_rows(run)[-1]["timesteps_total"]) >= steps + 1024


def test_env_config_reaches_the_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(USER_DIR))
    config = PPOConfig(env=ENV, env_config={"length": 7}, num_envs=2, train_batch_size=64)
    trainer = PPOTrainer(config)
    try:
        assert trainer.evaluate(1, seed=0)["episode_len_mean"] > 0
        assert env_spec(ENV).id == "Corridor-v0"
        assert registered_id(ENV) == "Corridor-v0"
        assert trainer.runner.preprocessor.observation_space.original_space.n == 7
    finally:
        trainer.close()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            "no_such_pkg.envs:Corridor-v0",
            "env 'no_such_pkg.envs:Corridor-v0': module 'no_such_pkg.envs' could not be imported "
            "(ModuleNotFoundError: No module named 'no_such_pkg')",
        ),
        (
            "my_pkg.envs:Corridr-v0",
            "unknown gymnasium environment 'Corridr-v0' (importing 'my_pkg.envs' did not register "
            "it); did you mean 'Corridor-v0'?",
        ),
        (
            "my_pkg.envs:",
            "env 'my_pkg.envs:': expected 'module:EnvId', e.g. 'my_pkg.envs:MyEnv-v0'",
        ),
    ],
)
def test_a_bad_module_env_is_one_line(
    env: str, message: str, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    # "did you mean" reads gymnasium's registry, which other tests in this process fill
    # (MiniGrid's and ALE's ids): that case runs in a fresh interpreter
    run = rlblocks_cli if env == "my_pkg.envs:Corridr-v0" else cli
    out = run("train", "--env", env, "--no-progress", "--run-dir", "unused")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"rlblocks train: error: {message}"]
    assert not (USER_DIR / "unused").exists()
