"""A user's error at the command line is one line on stderr and exit code 2, never a
traceback, and leaves nothing corrupted or half-made behind; resume says what it cannot do.

The CLI runs in this process (``rlblocks.cli.main``, its output read at the file
descriptors, so a worker process's traceback would show) in the folder of the user's package
``my_pkg`` (tests/fixtures/user_envs), whose ``bad_envs`` module holds envs that fail the ways
real envs do; one case runs in a fresh interpreter as the installed console script would.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import rlblocks
import torch
from rlblocks.train import PPOConfig, PPOTrainer
from rlblocks.train.checkpoint import list_checkpoints, save_checkpoint
from rlblocks.train.logger import ProgressLogger, append_whole, read_progress

USER_DIR = Path(__file__).parent / "fixtures" / "user_envs"
FAULTY = "my_pkg.bad_envs:Faulty-v0"
SMALL = [
    "--set",
    "num_envs=2",
    "--set",
    "train_batch_size=64",
    "--set",
    "sgd_minibatch_size=32",
    "--set",
    "num_sgd_iter=1",
    "--set",
    "model.fcnet_hiddens=[8]",
    "--no-progress",
]


def rlblocks_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``rlblocks ARGS`` in a fresh interpreter, as the console script runs: ``-P`` keeps the
    current directory off ``sys.path``, so ``my_pkg`` is found as the CLI adds it."""
    where = str(Path(rlblocks.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": where}
    env.pop("RLBLOCKS_TRACEBACK", None)
    code = "import sys; from rlblocks.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-P", "-c", code, *args],
        cwd=USER_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


CASES = {
    "unknown env_config key": (
        ["--env", "my_pkg.envs:Corridor-v0", "--set", "env_config.nope=1"],
        "env 'my_pkg.envs:Corridor-v0' could not be made with env_config {'nope': 1}: "
        "TypeError: Corridor.__init__() got an unexpected keyword argument 'nope'",
    ),
    "an uninstalled dependency of the env": (
        ["--env", "my_pkg.bad_envs:NeedsAPackage-v0"],
        "could not be made with env_config {} at my_pkg/bad_envs.py:21 in __init__ `raise "
        "gym.error.DependencyNotInstalled( ...`: DependencyNotInstalled: No module named "
        "'no_such_physics_engine'. Install it with `pip install no-such-physics-engine`",
    ),
    "an observation missing a Dict key": (  # PPO steps the sub-envs: the preprocessor finds it
        ["--env", FAULTY],
        "obs[0]: missing key 'b'; Dict('a': Box(-1.0, 1.0, (2,), float32), 'b': Discrete(3)) "
        "needs keys ['a', 'b']",
    ),
    "a NaN observation": (
        ["--env", FAULTY, "--set", "env_config.fault=nan_obs"],
        "env 'my_pkg.bad_envs:Faulty-v0' (sub-env 0) returned a non-finite observation: "
        'obs["a"][1] = nan',
    ),
    "a NaN observation, async envs": (
        ["--env", FAULTY, "--set", "env_config.fault=nan_obs", "--set", "vector_mode=async"],
        'returned a non-finite observation: obs["a"][1] = nan',
    ),
    "an infinite reward": (
        ["--env", FAULTY, "--set", "env_config.fault=inf_reward"],
        "env 'my_pkg.bad_envs:Faulty-v0' (sub-env 0) returned a non-finite reward: inf",
    ),
    "lr=inf": (
        ["--env", "CartPole-v1", "--set", "lr=inf"],
        "lr must be a finite number > 0.0, got inf",
    ),
    "a seed beyond 2**63": (
        ["--env", "CartPole-v1", "--set", f"seed={2**70}"],
        f"seed must be an int in [0, {2**63 - 1}], got {2**70}",
    ),
    "--stop-timesteps 0": (
        ["--env", "CartPole-v1", "--stop-timesteps", "0"],
        "--stop-timesteps must be a whole number of steps > 0, got 0",
    ),
    "--stop-timesteps -5": (
        ["--env", "CartPole-v1", "--stop-timesteps", "-5"],
        "--stop-timesteps must be a whole number of steps > 0, got -5",
    ),
    "--stop-reward nan": (
        ["--env", "CartPole-v1", "--stop-reward", "nan"],
        "--stop-reward must be a finite number, got nan",
    ),
    "model=5": (
        ["--env", "CartPole-v1", "--set", "model=5"],
        "--set model=5: model must be a mapping of keys (e.g. --set "
        "model.fcnet_hiddens=[64,64]), got int",
    ),
    "env_config=[1]": (
        ["--env", "CartPole-v1", "--set", "env_config=[1]"],
        "--set env_config=[1]: env_config must be a mapping of keys",
    ),
    "--set stop.timesteps_total=64.9": (
        ["--env", "CartPole-v1", "--set", "stop.timesteps_total=64.9"],
        "stop.timesteps_total must be a whole number of steps > 0, got 64.9",
    ),
    "an exception in the user's step": (
        ["--env", FAULTY, "--set", "env_config.fault=raise"],
        "env 'my_pkg.bad_envs:Faulty-v0' failed in step at my_pkg/bad_envs.py:55 in step "
        "`self.t = self.t / (self.at - self.at)`: ZeroDivisionError: division by zero",
    ),
    "an exception in the user's step, async envs (no worker traceback)": (
        ["--env", FAULTY, "--set", "env_config.fault=raise", "--set", "vector_mode=async"],
        "env 'my_pkg.bad_envs:Faulty-v0' failed in step at my_pkg/bad_envs.py:55 in step "
        "`self.t = self.t / (self.at - self.at)`: ZeroDivisionError: division by zero",
    ),
    "a KeyError of the user's own code is not taken for a missing Dict key": (
        ["--env", FAULTY, "--set", "env_config.fault=key_error"],
        'failed in step at my_pkg/bad_envs.py:57 in step `self.t = {"steps": '
        "self.t}[\"step_count\"]`: KeyError: 'step_count'",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_users_error_is_one_line_and_leaves_no_run_dir(
    case: str, tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    args, message = CASES[case]
    run = tmp_path / "run"
    out = cli("train", "--stop-timesteps", "640", *SMALL, *args, "--run-dir", str(run))
    line = error_line(out)
    assert line.startswith("rlblocks train: error: ") and message in line, line
    assert ("missing key" in line) == (case == "an observation missing a Dict key"), line
    assert not run.exists()  # a failed start leaves no (empty) run directory


def test_the_console_script_finds_the_users_package_and_exits_2(tmp_path: Path) -> None:
    """A fresh interpreter, as the installed console script: its ``sys.path`` lacks the
    current directory (``-P``), the CLI adds it to find ``my_pkg``, and the user's error is
    one line on stderr with exit status 2 (the in-process cases above read ``main``'s code)."""
    args, message = CASES["an exception in the user's step"]
    run = tmp_path / "run"
    out = rlblocks_cli("train", "--stop-timesteps", "640", *SMALL, *args, "--run-dir", str(run))
    line = error_line(out)
    assert line.startswith("rlblocks train: error: ") and message in line, line
    assert not run.exists()


#: The env failures the off-policy trainers meet as PPO's runner does (same one line).
ENV_FAULTS = [
    "an exception in the user's step",
    "an exception in the user's step, async envs (no worker traceback)",
    "a NaN observation",
    "an infinite reward",
]


@pytest.mark.parametrize("algo", ["DQN", "SAC"])
@pytest.mark.parametrize("case", ENV_FAULTS)
def test_an_env_failure_is_one_line_for_the_off_policy_trainers(
    algo: str, case: str, tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """A NaN observation never reaches the replay buffer; what the env raises names the
    user's frame, with direct sub-env steps and with async envs."""
    args, message = CASES[case]
    run = tmp_path / "run"
    out = cli(
        "train", "--algo", algo, "--stop-timesteps", "640", "--set", "learning_starts=32",
        "--set", "model.fcnet_hiddens=[8]", "--no-progress", *args, "--run-dir", str(run),
    )  # fmt: skip
    line = error_line(out)
    assert line.startswith("rlblocks train: error: ") and message in line, line


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``rlblocks ARGS`` in this process: the one error line (exit code 2, no traceback)."""
    from rlblocks.cli import main

    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


STOP_BLOCKS = {
    "timesteps_total: [1]": "stop.timesteps_total must be a whole number of steps > 0, got [1]",
    "episode_return_mean: {a: 1}": "stop.episode_return_mean must be a finite number, got {'a': 1}",
    "timesteps_total: 0": "stop.timesteps_total must be a whole number of steps > 0, got 0",
    "timesteps_total: .nan": "stop.timesteps_total must be a whole number of steps > 0, got nan",
    "episode_return_mean: .inf": "stop.episode_return_mean must be a finite number, got inf",
    "timesteps_total: true": "stop.timesteps_total must be a whole number of steps > 0, got True",
    "timesteps_total: 64.9": "stop.timesteps_total must be a whole number of steps > 0, got 64.9",
    "episode_return_mean: true": "stop.episode_return_mean must be a finite number, got True",
    "timesteps: 100": "stop: unknown keys ['timesteps'] (known: episode_return_mean, "
    "timesteps_total)",
}


@pytest.mark.parametrize("block", list(STOP_BLOCKS))
def test_a_bad_stop_block_names_the_key(
    block: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "ppo.yaml"
    config.write_text(f"env: CartPole-v1\nstop: {{{block}}}\n")
    run = tmp_path / "run"
    line = run_main(
        capsys, "train", "--config", str(config), "--run-dir", str(run), "--no-progress"
    )
    assert line == f"rlblocks train: error: {STOP_BLOCKS[block]}"
    assert not run.exists()


def test_config_files_read_exponents_as_numbers(tmp_path: Path) -> None:
    from rlblocks.cli.train_config import load_config_file
    from rlblocks.train.tuned import split_stop

    config = tmp_path / "ppo.yaml"
    config.write_text(
        "env: CartPole-v1\nlr: 1e-3\nstop: {timesteps_total: 1e5, episode_return_mean: 4.5E2}\n"
    )
    data, reward, steps = split_stop(load_config_file(config))
    assert data == {"env": "CartPole-v1", "lr": 0.001}
    assert (reward, steps) == (450.0, 100_000) and isinstance(steps, int)
    assert PPOConfig.from_dict(data).lr == 0.001


def test_plot_refuses_an_out_dir_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = ProgressLogger(tmp_path / "run")
    log.write({"training_iteration": 1, "timesteps_total": 64, "episode_return_mean": 9.0})
    out = tmp_path / "missing" / "deeper" / "x.png"
    line = run_main(capsys, "plot", str(tmp_path / "run"), "--out", str(out))
    assert line == (
        f"rlblocks plot: error: cannot write the plot to '{out}': its directory "
        f"'{out.parent}' does not exist"
    )
    assert not (tmp_path / "missing").exists()
    from rlblocks.cli import main

    assert main(["plot", str(tmp_path / "run"), "--out", str(tmp_path / "x.png")]) == 0
    assert (tmp_path / "x.png").stat().st_size > 0


def test_version() -> None:
    out = rlblocks_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"rlblocks {rlblocks.__version__}"


MISSING_EXTRAS = {
    "tensorboard": (
        ("tensorboard", "torch.utils.tensorboard"),
        ["--env", "CartPole-v1", "--set", "tensorboard=true"],
        'tensorboard=True needs the tensorboard package: pip install "rlblocks[train]"',
    ),
    "ale-py": (
        ("ale_py",),
        ["--env", "ALE/Pong-v5"],
        "unknown gymnasium environment 'ALE/Pong-v5' (ALE ids need the atari extra: "
        'pip install "rlblocks[atari]")',
    ),
}


class Block:
    """An import finder that makes the packages named ``prefixes`` missing."""

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        self.prefixes = prefixes

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.startswith(self.prefixes):
            raise ImportError(f"No module named {name!r}")


def test_a_missing_tensorboard_names_the_extra_and_leaves_no_run_dir(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    # tensorboard is installed here: the finder (and its modules' removal from sys.modules,
    # both undone after the test) make it missing, as without the extra.
    blocked, args, message = MISSING_EXTRAS["tensorboard"]
    for name in [n for n in sys.modules if n.startswith(blocked)]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Block(blocked), *sys.meta_path])
    run = tmp_path / "run"
    line = error_line(cli("train", *SMALL, *args, "--run-dir", str(run)))
    assert line.startswith(f"rlblocks train: error: {message}"), line
    assert not run.exists()  # not even config.json


def test_a_missing_ale_py_names_the_extra_and_leaves_no_run_dir(tmp_path: Path) -> None:
    # A fresh interpreter: ale_py, once imported, has registered its ids with gymnasium.
    blocked, args, message = MISSING_EXTRAS["ale-py"]
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.startswith({blocked!r}):\n"
        "            raise ImportError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from rlblocks.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    where = str(Path(rlblocks.__file__).resolve().parents[1])
    run = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-c", code, "train", *SMALL, *args, "--run-dir", str(run)],
        cwd=USER_DIR,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": where},
    )
    line = error_line(out)
    assert line.startswith(f"rlblocks train: error: {message}"), line
    assert not run.exists()  # not even config.json


def test_a_run_dir_that_cannot_be_made(
    tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    line = error_line(
        cli("train", "--env", "CartPole-v1", *SMALL, "--run-dir", str(blocker / "run"))
    )
    assert line == (
        f"rlblocks train: error: cannot use '{blocker / 'run'}' as the run "
        "directory: Not a directory"
    )
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        line = error_line(
            cli("train", "--env", "CartPole-v1", *SMALL, "--run-dir", str(locked / "run"))
        )
        assert "Permission denied" in line


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_disk_is_one_line_and_tears_no_row(
    tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    # /dev/full fails every write with ENOSPC, as a full disk does.
    run = tmp_path / "run"
    run.mkdir()
    (run / "progress.csv").symlink_to("/dev/full")
    line = error_line(cli("train", "--env", "CartPole-v1", *SMALL, "--run-dir", str(run)))
    assert line == (
        f"rlblocks train: error: cannot write '{run / 'progress.csv'}': No space left on device"
    )
    assert list_checkpoints(run) == []


def test_append_whole_cuts_a_failed_write_back(tmp_path: Path) -> None:
    log = ProgressLogger(tmp_path)
    log.write({"training_iteration": 1, "episode_return_mean": 1.5})
    before = (tmp_path / "progress.csv").read_bytes()
    # A file that accepts the first bytes of a write and then fails: a pipe with no reader
    # would block, so emulate the partial write with a size limit (RLIMIT_FSIZE).
    code = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from rlblocks.train.logger import append_whole\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "p = Path(sys.argv[1]); size = p.stat().st_size\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (size + 5, size + 5))\n"
        "try:\n"
        "    append_whole(p, b'2,9999999.5\\n' * 10)\n"
        "except ValueError as err:\n"
        "    print(err)\n"
    )
    where = str(Path(rlblocks.__file__).resolve().parents[1])
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "progress.csv")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": where},
    )
    assert "cannot write" in out.stdout, out.stderr
    assert (tmp_path / "progress.csv").read_bytes() == before  # no torn row
    append_whole(tmp_path / "progress.csv", b"2,3.0\n")
    assert [r["episode_return_mean"] for r in read_progress(tmp_path)] == [1.5, 3.0]


def test_orphaned_checkpoint_temp_dirs_are_removed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    save_checkpoint(run, {"iteration": 1, "timesteps_total": 10})
    # What a save killed mid-write leaves: a temporary directory and a replaced old one.
    for name in (".checkpoint_000002.k3j_x9a", ".checkpoint_000001.old"):
        (run / name).mkdir()
        (run / name / "state.pt").write_bytes(b"half a pickle")
    save_checkpoint(run, {"iteration": 2, "timesteps_total": 20})
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint_000001", "checkpoint_000002"]
    (run / ".checkpoint_000003.zz").mkdir()  # and on resume
    with PPOTrainer(
        PPOConfig(env="CartPole-v1", num_envs=2, train_batch_size=64), run_dir=tmp_path / "real"
    ) as trainer:
        trainer.train()
        trainer.save()
    (tmp_path / "real" / ".checkpoint_000009.zz").mkdir()
    PPOTrainer.restore(tmp_path / "real").close()
    assert not (tmp_path / "real" / ".checkpoint_000009.zz").exists()


def tiny_async(**kw: object) -> PPOConfig:
    return PPOConfig(
        env="CartPole-v1",
        num_envs=2,
        train_batch_size=64,
        sgd_minibatch_size=32,
        num_sgd_iter=2,
        model={"fcnet_hiddens": [8]},
        seed=5,
        **kw,
    )


def test_async_resume_is_exact(tmp_path: Path) -> None:
    with PPOTrainer(tiny_async(vector_mode="async"), run_dir=tmp_path / "a") as a:
        a.train()
        a.save()
        straight = [a.train() for _ in range(3)]
        weights = {k: v.clone() for k, v in a.model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # an exact resume warns about nothing
        b = PPOTrainer.restore(tmp_path / "a")
    with b:
        resumed = [b.train() for _ in range(3)]
        for key, value in b.model.state_dict().items():
            assert torch.equal(value, weights[key]), key
    for s, r in zip(straight, resumed, strict=True):
        for key in ("timesteps_total", "episodes_total", "episode_return_mean", "policy_loss"):
            assert s[key] == r[key] or (math.isnan(s[key]) and math.isnan(r[key])), key


def test_resuming_native_vector_envs_warns_once_and_says_so(
    tmp_path: Path, cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    with PPOTrainer(tiny_async(vector_mode="native"), run_dir=tmp_path / "n") as trainer:
        trainer.train()
        trainer.save()
    with pytest.warns(
        RuntimeWarning, match="episodes in progress at the checkpoint are dropped"
    ) as record:
        PPOTrainer.restore(tmp_path / "n").close()
    assert len(record) == 1
    out = cli("train", "--resume", str(tmp_path / "n"), "--stop-timesteps", "128", "--no-progress")
    assert out.returncode == 0, out.stderr
    warning = [ln for ln in out.stderr.splitlines() if ln.startswith("rlblocks: warning:")]
    assert len(warning) == 1 and "vector_mode='native'" in warning[0]
    steps = [r["timesteps_total"] for r in read_progress(tmp_path / "n")]
    assert len(steps) >= 2 and steps[-1] >= 128 > steps[-2]  # native CartPole: NEXT_STEP resets
    line = error_line(
        cli("train", "--resume", str(tmp_path / "n"), "--stop-timesteps", "100", "--no-progress")
    )
    assert line == (
        f"rlblocks train: error: --stop-timesteps 100: the run already has {steps[-1]} steps"
    )
