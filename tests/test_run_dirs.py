"""Run directories a user can trust, through the command line in fresh processes (as the
console script runs): a reused directory is refused unless resumed or overwritten, a second
writer is refused naming the first one's pid, Ctrl-C saves a checkpoint that ``--resume``
continues without a gap, and ``--stop-timesteps`` ends the run at the budget."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import rlblocks
from rlblocks.cli import main
from rlblocks.train.checkpoint import checkpoint_meta, list_checkpoints
from rlblocks.train.logger import read_progress
from rlblocks.train.rundir import LOCK_FILE, claim_run_dir

TINY = ["--set", "num_envs=2", "--set", "train_batch_size=64", "--set", "sgd_minibatch_size=32"]
TINY += ["--set", "num_sgd_iter=1", "--set", "model.fcnet_hiddens=[8]", "--no-progress"]
DQN = ["--algo", "DQN", "--set", "timesteps_per_iteration=64", "--set", "learning_starts=32"]
DQN += ["--set", "target_network_update_freq=32"]
SAC = ["--algo", "SAC", "--env", "Pendulum-v1", "--set", "timesteps_per_iteration=64"]
SAC += ["--set", "learning_starts=32", "--set", "train_batch_size=32"]
ZOO = "rlblocks.envs.multiagent_zoo:parallel_env"
CODE = "import sys; from rlblocks.cli import main; sys.exit(main(sys.argv[1:]))"


def _env() -> dict[str, str]:
    where = str(Path(rlblocks.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": where, "OMP_NUM_THREADS": "1"}
    env.pop("RLBLOCKS_TRACEBACK", None)
    return env


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``rlblocks ARGS`` in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", CODE, *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def start(cwd: Path, *args: str) -> subprocess.Popen[str]:
    """``rlblocks ARGS`` started in the background, in a process group of its own (as a
    terminal's foreground job: see :func:`ctrl_c`)."""
    return subprocess.Popen(
        [sys.executable, "-c", CODE, *args],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def ctrl_c(proc: subprocess.Popen[str]) -> None:
    """What a Ctrl-C in a terminal does: SIGINT to every process of the job's group (the
    trainer and its env workers)."""
    os.killpg(proc.pid, signal.SIGINT)


def wait_for_rows(proc: subprocess.Popen[str], run: Path, rows: int) -> None:
    """Waits until the run has ``rows`` progress rows and a checkpoint (the process must
    still be training then)."""
    deadline = time.monotonic() + 240
    while len(read_progress(run)) < rows or not list_checkpoints(run):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the training wrote no progress"
        time.sleep(0.2)


def here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``rlblocks ARGS`` in this process (in the test's directory): exit code, stdout,
    stderr."""
    capsys.readouterr()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def iterations(run: Path) -> list[int]:
    return [int(r["training_iteration"]) for r in read_progress(run)]


def steps(run: Path) -> list[int]:
    return [int(r["timesteps_total"]) for r in read_progress(run)]


def test_a_reused_run_dir_is_refused_unless_resumed_or_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    base = ["train", "--env", "CartPole-v1", *TINY, "--run-dir", "run"]
    assert here(capsys, *base, "--stop-timesteps", "192")[0] == 0
    run = tmp_path / "run"
    (run / "policy.onnx").write_bytes(b"an export of this run")
    before = (run / "progress.csv").read_bytes()

    rc, out, err = here(capsys, *base, "--stop-timesteps", "64")
    line = error_line(subprocess.CompletedProcess(base, rc, out, err))
    assert line == (
        "rlblocks train: error: run directory 'run' holds a previous run (3 progress rows, "
        "1 checkpoint); pass --resume run to continue it, --overwrite to replace it, or pick "
        "another --run-dir"
    )
    assert (run / "progress.csv").read_bytes() == before

    assert here(capsys, *base, "--stop-timesteps", "64", "--overwrite")[0] == 0
    assert iterations(run) == [1]
    assert not (run / "policy.onnx").exists()  # the old run's export is gone with it
    assert [p.name for p in list_checkpoints(run)] == ["checkpoint_000001"]
    assert checkpoint_meta(run)["timesteps_total"] == 64

    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    for flags in ([], ["--overwrite"]):
        rc, _, err = here(capsys, *base[:-1], "mine", "--stop-timesteps", "64", *flags)
        assert rc == 2 and err == (
            "rlblocks train: error: run directory 'mine' holds files that are not an rlblocks "
            "run's (notes.txt); pick a new or empty --run-dir\n"
        )
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    assert (other / "notes.txt").read_text() == "keep me"


def test_a_trainer_made_in_python_refuses_a_previous_run_in_its_run_dir(tmp_path: Path) -> None:
    """``PPOTrainer(config, run_dir=...)`` claims the directory as ``rlblocks train`` does:
    a previous run there is refused (its files untouched), not appended to."""
    from rlblocks.train import PPOTrainer

    config = {
        "env": "CartPole-v1",
        "num_envs": 1,
        "rollout_fragment_length": 32,
        "train_batch_size": 32,
        "sgd_minibatch_size": 32,
        "num_sgd_iter": 1,
    }
    run = tmp_path / "run"
    with PPOTrainer(config, run_dir=run) as trainer:
        trainer.train()
        trainer.save()
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with pytest.raises(ValueError) as err:
        PPOTrainer(config, run_dir=run)
    assert str(err.value) == (
        f"run directory {str(run)!r} holds a previous run (1 progress row, 1 checkpoint); "
        f"continue it with PPOTrainer.restore({str(run)!r}), or pass another run_dir (or "
        "delete that run)"
    )
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    PPOTrainer.restore(run).close()  # the way it names still works


def test_default_run_dirs_are_claimed_fresh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs that pick the same default name in the same second get two directories."""
    base = tmp_path / "PPO_CartPole-v1_20260101-000000"
    first = claim_run_dir(base, fresh_name=True)
    second = claim_run_dir(base, fresh_name=True)
    try:
        assert first.path == base and second.path == base.with_name(base.name + "_1")
    finally:
        first.release()
        second.release()
    monkeypatch.chdir(tmp_path)
    assert here(capsys, "train", "--env", "CartPole-v1", *TINY, "--stop-timesteps", "64")[0] == 0
    (made,) = (tmp_path / "rlblocks_runs").iterdir()
    assert iterations(made) == [1]


def test_a_second_writer_is_refused_and_ctrl_c_saves_a_checkpoint_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    first = start(
        tmp_path, "train", "--env", "CartPole-v1", *TINY, "--set", "checkpoint_freq=1",
        "--no-default-stop-reward", "--stop-timesteps", "10000000", "--run-dir", "run",
    )  # fmt: skip
    try:
        wait_for_rows(first, run, 2)
        held = f"run directory 'run' is being written by another training (pid {first.pid})"
        refused = f"rlblocks train: error: {held}; wait for it to end, or pick another --run-dir"
        args = ("train", "--env", "CartPole-v1", "--run-dir", "run", "--overwrite")
        rc, _, err = here(capsys, *args)
        assert (rc, err) == (2, refused + "\n")
        assert here(capsys, "train", "--resume", "run") == (2, "", refused + "\n")
        ev = here(capsys, "evaluate", "run", "--episodes", "1")
        assert ev[0] == 0, ev  # readers are welcome
        ctrl_c(first)
        _, err = first.communicate(timeout=240)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, err
    last = iterations(run)[-1]
    assert checkpoint_meta(run)["iteration"] == last  # the checkpoint is where it stopped
    assert f"saved checkpoint: run/checkpoint_{last:06d}" in err
    assert "continue with: rlblocks train --resume run" in err and "Traceback" not in err

    budget = str(64 * (last + 2))
    assert (
        here(capsys, "train", "--resume", "run", "--stop-timesteps", budget, "--no-progress")[0]
        == 0
    )
    assert iterations(run) == list(range(1, last + 3))  # no gap, no repeated row
    assert steps(run) == [64 * i for i in range(1, last + 3)]


def test_ctrl_c_saves_off_policy_multiagent_and_async_env_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runs = {
        "dqn": [*DQN, "--env", "CartPole-v1"],
        "sac": SAC,
        "zoo": ["--env", ZOO, "--set", "num_envs=2", "--set", "train_batch_size=64"],
        "async": ["--env", "CartPole-v1", "--set", "vector_mode=async", "--set", "num_envs=2"],
    }
    procs = {
        name: start(
            tmp_path,
            "train",
            *args,
            "--set",
            "model.fcnet_hiddens=[8]",
            "--no-progress",
            "--set",
            "checkpoint_freq=1",
            "--no-default-stop-reward",
            "--stop-timesteps",
            "10000000",
            "--run-dir",
            name,
        )  # fmt: skip
        for name, args in runs.items()
    }  # side by side: the three start-ups overlap
    errs = {}
    try:
        for name, proc in procs.items():
            wait_for_rows(proc, tmp_path / name, 1)
            ctrl_c(proc)
        for name, proc in procs.items():
            errs[name] = proc.communicate(timeout=240)[1]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    for name, proc in procs.items():
        run, err = tmp_path / name, errs[name]
        assert proc.returncode == 130, (name, err)
        meta = checkpoint_meta(run)
        assert meta["iteration"] == iterations(run)[-1], name
        assert meta["timesteps_total"] == steps(run)[-1], name
        assert f"continue with: rlblocks train --resume {name}" in err, err
        more = str(steps(run)[-1] + 1)
        resumed = here(capsys, "train", "--resume", name, "--stop-timesteps", more, "--no-progress")
        assert resumed[0] == 0, resumed
        assert iterations(run) == list(range(1, meta["iteration"] + 2)), name


def test_a_killed_writer_does_not_block_the_next_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    proc = start(
        tmp_path, "train", "--env", "CartPole-v1", *TINY, "--set", "checkpoint_freq=1",
        "--no-default-stop-reward", "--stop-timesteps", "10000000", "--run-dir", "run",
    )  # fmt: skip
    try:
        wait_for_rows(proc, run, 1)
    finally:
        proc.kill()
        proc.communicate()
    assert (run / LOCK_FILE).read_text().strip() == str(proc.pid)  # left, but not held
    more = str(steps(run)[-1] + 1)
    assert (
        here(capsys, "train", "--resume", "run", "--stop-timesteps", more, "--no-progress")[0] == 0
    )


def test_stop_timesteps_ends_at_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cases = (
        (["--env", "CartPole-v1", *TINY], "100", [64, 100], ""),
        (["--env", "CartPole-v1", *TINY], "101", [64, 102], " (102: whole steps of its 2 envs)"),
        (  # a recurrent model's short last rollout: shorter sequences, one minibatch
            ["--env", "CartPole-v1", *TINY[2:], "--set", "model.use_lstm=true",
             "--set", "model.max_seq_len=8", "--set", "num_envs=1"],
            "70", [64, 70], "",
        ),
        ([*DQN, "--env", "CartPole-v1", "--set", "model.fcnet_hiddens=[8]"], "100", [64, 100], ""),
        (["--env", ZOO, "--set", "num_envs=2", "--set", "train_batch_size=64"], "96", [64, 96], ""),
    )  # fmt: skip
    for i, (args, budget, expected, note) in enumerate(cases):
        name = f"run{i}"
        args = ["train", *args, "--no-default-stop-reward", "--run-dir", name]
        args += ["--no-progress", "--stop-timesteps", budget]
        if i == 0:  # one in a fresh process, as a user runs it
            done = cli(tmp_path, *args)
            rc, out, err = done.returncode, done.stdout, done.stderr
        else:
            rc, out, err = here(capsys, *args)
        assert rc == 0, (args, err)
        assert f" {budget} steps{note}; run directory: {name}" in out, out
        assert steps(tmp_path / name) == expected, args
        assert f"done: {expected[-1]} steps" in out


def test_a_row_still_being_written_is_not_read(tmp_path: Path) -> None:
    """A training appends to progress.csv while others read it (`wait_for_rows`, `rlblocks
    plot`): a last line without its newline is left out, not read with missing fields."""
    (tmp_path / "progress.csv").write_text(
        "training_iteration,episode_return_mean\n1,0.5\n2,0.7\n3,0."
    )
    assert read_progress(tmp_path) == [
        {"training_iteration": 1, "episode_return_mean": 0.5},
        {"training_iteration": 2, "episode_return_mean": 0.7},
    ]
    (tmp_path / "progress.csv").write_text("training_iteration,episode_return_mean\n1,0.5\n")
    assert read_progress(tmp_path) == [{"training_iteration": 1, "episode_return_mean": 0.5}]


def test_evaluate_picks_again_when_a_live_run_removes_its_pick(tmp_path: Path) -> None:
    """A run being trained removes its older checkpoints as it saves (keep_checkpoints): one
    removed between evaluate's pick and its read makes evaluate pick the newest again."""
    import argparse
    import shutil

    from rlblocks.cli._args import chosen_checkpoint, restore_chosen

    run = tmp_path / "run"
    argv = ["train", "--env", "CartPole-v1", *TINY, "--set", "checkpoint_freq=1"]
    assert main([*argv, "--stop-timesteps", "192", "--run-dir", str(run)]) == 0
    kept = list_checkpoints(run)
    assert len(kept) == 3
    args = argparse.Namespace(run_dir=str(run), checkpoint="auto")
    pick, said = chosen_checkpoint(args)
    assert pick == kept[-1]
    shutil.rmtree(pick)  # as the training's prune would, after the pick
    trainer, said = restore_chosen(args, pick, said)
    try:
        assert Path(trainer.checkpoint_path) == kept[-2] and str(kept[-2]) in said
    finally:
        trainer.close()
    shutil.rmtree(run)  # nothing left to pick: the one-line error, not a retry loop
    with pytest.raises(ValueError, match="does not exist"):
        restore_chosen(args, pick, said)
