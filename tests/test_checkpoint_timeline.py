"""A run keeps one timeline and a valid checkpoint at every moment.

* Resuming from an older checkpoint moves the newer ones (and the whole old progress.csv)
  into ``abandoned_<time>/``, so a later plain resume cannot pick the abandoned timeline;
  progress.csv and TensorBoard are cut back to the resumed iteration.
* A save killed at any point between writing and cleaning up leaves a checkpoint that
  evaluation reads (without touching the run) and that the next save or resume repairs.
* ``--resume`` of a run whose stop condition is met says so and how to extend it; evaluation
  rewrites nothing of the run.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import rlblocks
from rlblocks.train import PPOConfig, PPOTrainer
from rlblocks.train.checkpoint import (
    find_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from rlblocks.train.logger import ProgressLogger, read_progress, truncate_progress
from rlblocks.train.numbers import format_return

PYTHONPATH = str(Path(rlblocks.__file__).resolve().parents[1])


def tiny(**kw: object) -> PPOConfig:
    return PPOConfig(
        env="CartPole-v1",
        num_envs=2,
        train_batch_size=64,
        sgd_minibatch_size=64,
        num_sgd_iter=1,
        model={"fcnet_hiddens": [8]},
        keep_checkpoints=0,
        **kw,
    )


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``rlblocks ARGS`` in this process, in ``cwd`` (the directory, ``sys.path`` and
    ``RLBLOCKS_TRACEBACK`` restored after)."""
    from rlblocks.cli import main

    out, err = io.StringIO(), io.StringIO()
    path, traceback = sys.path[:], os.environ.pop("RLBLOCKS_TRACEBACK", None)
    try:
        with (
            contextlib.chdir(cwd),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            code = main(list(args))
    finally:
        sys.path[:] = path
        if traceback is not None:
            os.environ["RLBLOCKS_TRACEBACK"] = traceback
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def iterations(run: Path) -> list[int]:
    return [int(r["training_iteration"]) for r in read_progress(run)]


def test_resuming_an_older_checkpoint_abandons_the_newer_ones(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with PPOTrainer(tiny(), run_dir=run) as trainer:
        for i in range(1, 7):
            trainer.train()
            if i % 2 == 0:
                trainer.save()
    assert [p.name for p in list_checkpoints(run)] == [f"checkpoint_00000{i}" for i in (2, 4, 6)]
    with pytest.warns(
        RuntimeWarning,
        match=r"abandons the later checkpoints .*checkpoint_000004, "
        r"checkpoint_000006",
    ):
        trainer = PPOTrainer.restore(run / "checkpoint_000002")
    with trainer:
        assert iterations(run) == [1, 2]
        trainer.train()
        trainer.train()
        trainer.save()
    abandoned = [p for p in run.iterdir() if p.name.startswith("abandoned_")]
    assert len(abandoned) == 1
    assert sorted(p.name for p in abandoned[0].iterdir()) == [
        "checkpoint_000004",
        "checkpoint_000006",
        "progress.csv",
    ]
    assert iterations(abandoned[0]) == [1, 2, 3, 4, 5, 6]  # the old timeline, whole
    assert load_checkpoint(abandoned[0] / "checkpoint_000006")["iteration"] == 6
    # The run directory holds the new timeline only: a plain resume picks its newest.
    assert [p.name for p in list_checkpoints(run)] == ["checkpoint_000002", "checkpoint_000004"]
    with PPOTrainer.restore(run) as trainer:
        assert trainer.iteration == 4
        trainer.train()
    assert iterations(run) == [1, 2, 3, 4, 5]


def test_resuming_the_newest_checkpoint_abandons_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with PPOTrainer(tiny(), run_dir=run) as trainer:
        trainer.train()
        trainer.save()
        trainer.train()  # logged, not checkpointed (a run killed after it)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        PPOTrainer.restore(run).close()
    assert not [p for p in run.iterdir() if p.name.startswith("abandoned_")]
    assert iterations(run) == [1]


def test_tensorboard_hides_the_events_after_the_resumed_iteration(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = ProgressLogger(tmp_path, tensorboard=True)
    for i in range(1, 7):
        log.write(
            {"training_iteration": i, "timesteps_total": 100 * i, "episode_return_mean": float(i)}
        )
    log.close()
    truncate_progress(tmp_path, 2)  # resumed from iteration 2
    log = ProgressLogger(tmp_path, tensorboard=True)
    log.write({"training_iteration": 3, "timesteps_total": 300, "episode_return_mean": 30.0})
    log.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    got = [(e.step, e.value) for e in events.Scalars("episode_return_mean")]
    assert got == [(100, 1.0), (200, 2.0), (300, 30.0)]


# --- a save killed midway ----------------------------------------------------------------

KILL = """
import os, shutil, sys
from rlblocks.train import checkpoint as c

run, what, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
c.save_checkpoint(run, {"iteration": 2, "timesteps_total": 20, "v": "old"})
calls = {"n": 0}
real = {"replace": os.replace, "rmtree": shutil.rmtree}


def dies(name):
    def call(path, *args, **kwargs):
        if name == what and (name == "replace" or str(path).endswith(".old")):
            calls["n"] += 1
            if calls["n"] == nth:
                os._exit(9)  # killed: no cleanup runs
        return real[name](path, *args, **kwargs)
    return call


os.replace, shutil.rmtree = dies("replace"), dies("rmtree")
c.save_checkpoint(run, {"iteration": 2, "timesteps_total": 20, "v": "new"})
"""

KILL_POINTS = {
    # where the save dies -> the copy that survives
    "before the old copy is moved aside": ("replace", 1, "old"),
    "between moving the old copy aside and the new one in": ("replace", 2, "old"),
    "before the old copy is deleted": ("rmtree", 2, "new"),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_save_killed_at_any_point_leaves_a_valid_checkpoint(point: str, tmp_path: Path) -> None:
    what, nth, survivor = KILL_POINTS[point]
    run = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-c", KILL, str(run), what, str(nth)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )
    assert out.returncode == 9, out.stderr
    left = sorted(p.name for p in run.iterdir())
    assert len(left) == 2, left  # the killed save left a temporary directory
    # Read only (as evaluation reads): the valid copy is found and nothing is changed.
    assert load_checkpoint(run)["v"] == survivor
    assert len(list_checkpoints(run)) == 1
    assert sorted(p.name for p in run.iterdir()) == left
    # The next save (or resume) repairs the run: the real name, no temporary directories.
    save_checkpoint(run, {"iteration": 3, "timesteps_total": 30, "v": "next"})
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint_000002", "checkpoint_000003"]
    assert load_checkpoint(run / "checkpoint_000002")["v"] == survivor


def test_resume_restores_the_old_copy_of_a_save_killed_between_its_renames(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with PPOTrainer(tiny(), run_dir=run) as trainer:
        trainer.train()
        trainer.save()
        weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    # The state a save of checkpoint_000001 killed between its two renames leaves.
    os.replace(run / "checkpoint_000001", run / ".checkpoint_000001.old")
    (run / ".checkpoint_000001.x7q2").mkdir()
    (run / ".checkpoint_000001.x7q2" / "state.pt").write_bytes(b"the new copy, half written")
    assert find_checkpoint(run).name == ".checkpoint_000001.old"
    with PPOTrainer.restore(run) as resumed:
        assert resumed.iteration == 1
        for key, value in resumed.model.state_dict().items():
            assert (value == weights[key]).all(), key
        assert resumed.checkpoint_path == run / "checkpoint_000001"
    assert sorted(p.name for p in run.iterdir() if p.is_dir()) == ["checkpoint_000001"]


# --- the command line --------------------------------------------------------------------


def test_resume_of_a_finished_run_says_how_to_extend_it_and_evaluate_writes_nothing(
    tmp_path: Path,
) -> None:
    small = [
        "--set",
        "num_envs=2",
        "--set",
        "train_batch_size=64",
        "--set",
        "sgd_minibatch_size=64",
        "--set",
        "num_sgd_iter=1",
        "--set",
        "model.fcnet_hiddens=[8]",
        "--no-progress",
    ]
    out = cli(
        "train",
        "--env",
        "CartPole-v1",
        *small,
        "--stop-timesteps",
        "128",
        "--run-dir",
        "run",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    run = tmp_path / "run"
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.iterdir() if p.is_file()}
    assert {"config.json", "progress.csv", "stop.json"} <= set(before)

    out = cli("train", "--resume", "run", "--no-progress", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        "rlblocks train: error: the run is already done: stop.timesteps_total=128 already "
        "reached at 128 steps; pass --stop-timesteps N larger than 128 to train on"
    )
    ret = read_progress(run)[-1]["episode_return_mean"]
    out = cli(
        "train",
        "--resume",
        "run",
        "--stop-reward",
        "1",
        "--stop-timesteps",
        "192",
        "--no-progress",
        cwd=tmp_path,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        f"rlblocks train: error: --stop-reward 1: the run already has a mean return of "
        f"{format_return(ret)} at 128 steps; pass a --stop-reward larger than {format_return(ret)}"
    )
    (run / "stop.json").write_text('{"episode_return_mean": 2, "timesteps_total": 128}')
    before["stop.json"] = ((run / "stop.json").read_bytes(), (run / "stop.json").stat().st_mtime_ns)
    out = cli("train", "--resume", "run", "--stop-timesteps", "192", "--no-progress", cwd=tmp_path)
    assert out.stderr.strip() == (
        f"rlblocks train: error: the run is already done: stop.episode_return_mean=2 already "
        f"reached with a mean return of {format_return(ret)} at 128 steps; pass --stop-reward "
        f"R larger than {format_return(ret)}, or --no-default-stop-reward to train on to the "
        "step budget"
    )

    out = cli("evaluate", "run", "--episodes", "1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.iterdir() if p.is_file()}
    assert after == before  # refused resumes and evaluation rewrote nothing

    out = cli(
        "train",
        "--resume",
        "run",
        "--stop-timesteps",
        "192",
        "--no-progress",
        "--no-default-stop-reward",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert iterations(run) == [1, 2, 3]
