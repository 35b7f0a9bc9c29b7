"""Env copies stepped in worker processes (``num_env_workers``,
:class:`rlblocks.multiagent.workers.WorkerVectorEnv`): the same steps, seeds, errors, training
and checkpoints as in process, and no process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rlblocks.multiagent.envs import MultiAgentVectorEnv
from rlblocks.nest import tree_leaves

pytest.importorskip("pettingzoo", reason="pettingzoo is the multiagent extra")

from rlblocks.envs.multiagent_zoo import parallel_env  # noqa: E402
from rlblocks.multiagent.workers import WorkerVectorEnv  # noqa: E402

ZOO = "rlblocks.envs.multiagent_zoo:parallel_env"
TINY = {
    "num_envs": 3,
    "train_batch_size": 48,
    "sgd_minibatch_size": 32,
    "num_sgd_iter": 1,
    "model": {"fcnet_hiddens": [8]},
}


def _same(x: Any, y: Any) -> bool:
    a, b = tree_leaves(x), tree_leaves(y)
    return len(a) == len(b) and all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))


def _run(hub: MultiAgentVectorEnv, steps: int) -> list[dict[str, Any]]:
    """Every step's results under one seeded stream of in-space actions (scouts take 0-2,
    pilots 0-4 under ``by_space``; the shared policy's lanes 0-2)."""
    out: list[dict[str, Any]] = [{p: hub.reset_lanes(p, 11) for p in hub.policy_ids}]
    rng = np.random.default_rng(0)
    for _ in range(steps):
        actions = {p: rng.integers(0, 3, hub.lanes(p).num_envs) for p in hub.policy_ids}
        out.append(hub.step(actions))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of this process counts as gone once reaped
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def _wait_gone(pids: list[int], within_s: float = 60.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


@pytest.mark.parametrize("mapping", ["shared", "by_space"])
def test_workers_step_what_the_in_process_env_steps(mapping: str) -> None:
    """Agents enter and leave mid-episode; ``shared`` sends Dict (masked) union values
    through the pipe, ``by_space`` puts the scouts' Box values in shared memory."""
    local = MultiAgentVectorEnv(parallel_env, 5, mapping)
    with WorkerVectorEnv(parallel_env, 5, 2, mapping) as hub:
        assert hub.num_workers == 2 and hub.policy_ids == local.policy_ids
        ours, theirs = _run(local, 40), _run(hub, 40)
        first, got = ours[0], theirs[0]  # same seeds: the same first observations
        assert all(_same(list(first[p]), list(got[p])) for p in first)
        for want, step in zip(ours[1:], theirs[1:], strict=True):
            for pid, res in want.items():
                other = step[pid]
                for field in ("rewards", "terminated", "truncated", "valid", "starts", "live"):
                    assert np.array_equal(getattr(res, field), getattr(other, field)), field
                assert _same(list(res.raw), list(other.raw))
                assert [f is None for f in res.finals] == [f is None for f in other.finals]
                assert _same(
                    [f for f in res.finals if f is not None],
                    [f for f in other.finals if f is not None],
                )
            assert all(np.array_equal(local.live_lanes(p), hub.live_lanes(p)) for p in want)
        assert hub.episodes_total == local.episodes_total > 5
        assert hub.metrics() == local.metrics()
    local.close()


def test_an_env_error_in_a_worker_is_the_in_process_one_line_error() -> None:
    """Copy 3 (the second worker's) takes an action outside its scouts' space."""

    def fail(hub: MultiAgentVectorEnv) -> str:
        lanes = hub.lanes("shared").num_envs
        hub.reset_lanes("shared", 0)
        actions = np.zeros(lanes, np.int64)
        actions[3 * 4 :] = 4  # lanes of copies 3 and 4: scouts take 0-2
        with pytest.raises(ValueError) as err:
            hub.step({"shared": actions})
        return str(err.value)

    local = MultiAgentVectorEnv(parallel_env, 5)
    want = fail(local)
    local.close()
    with WorkerVectorEnv(parallel_env, 5, 2) as hub:
        got = fail(hub)
    assert got == want and "\n" not in got
    assert got.startswith("env 'env' (copy 3) failed in step: ValueError: HeterogeneousBandit")


def test_close_and_a_dead_worker_leave_no_process() -> None:
    hub = WorkerVectorEnv(parallel_env, 3, 3)
    pids = [w.process.pid for w in hub._workers]
    hub.reset_lanes("shared", 0)
    os.kill(pids[0], signal.SIGINT)  # Ctrl-C reaches the workers too: they ignore it
    hub.step({"shared": np.zeros(12, np.int64)})
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(ValueError, match=r"^env 'env': the worker process of copies 1 to 1 exited"):
        hub.step({"shared": np.zeros(12, np.int64)})
    hub.close()
    hub.close()  # idempotent
    assert hub.num_workers == 0 and _wait_gone(pids) == []
    with pytest.raises(ValueError, match="worker processes are closed"):
        hub.step({"shared": np.zeros(12, np.int64)})


def test_workers_exit_when_their_parent_dies() -> None:
    code = (
        "import os, sys\n"
        "from rlblocks.envs.multiagent_zoo import parallel_env\n"
        "from rlblocks.multiagent.workers import WorkerVectorEnv\n"
        "hub = WorkerVectorEnv(parallel_env, 2, 2)\n"
        "print(*[w.process.pid for w in hub._workers], flush=True)\n"
        "os._exit(3)\n"  # no close, no atexit: as if the parent were killed
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 3, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2 and _wait_gone(pids) == []


def test_the_trainer_with_workers_trains_as_in_process_and_resumes_exactly(
    tmp_path: Path,
) -> None:
    from rlblocks.train import MultiAgentPPOTrainer, restore_trainer

    config = {"env": ZOO, **TINY, "multiagent": {"policy_mapping": "by_space"}}
    local = MultiAgentPPOTrainer(config, run_dir=tmp_path / "local")
    want = [local.train() for _ in range(2)]
    local.close()
    trainer = MultiAgentPPOTrainer({**config, "num_env_workers": 2}, run_dir=tmp_path / "w")
    assert isinstance(trainer.hub, WorkerVectorEnv)
    # the key is outside PPO's loss: the closed-form update still runs
    assert all(p.learner._backprop is not None for p in trainer.policies.values())
    first = trainer.train()
    path = trainer.save()
    second = trainer.train()
    trainer.close()
    keys = ("policy_loss/scout", "vf_loss/pilot", "agent_timesteps_total", "episodes_total")
    for key in keys:
        assert first[key] == want[0][key] and second[key] == want[1][key], key
    resumed = restore_trainer(path)  # the zoo env pickles: its episodes continue
    assert isinstance(resumed.hub, WorkerVectorEnv)
    again = resumed.train()
    resumed.close()
    for key in keys:
        assert again[key] == second[key], key


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"env": ZOO, "num_envs": 2, "num_env_workers": 3}, r"num_env_workers=3: each worker"),
        ({"env": "CartPole-v1", "num_env_workers": 1}, r"env 'CartPole-v1' is single-agent"),
        (
            {"env": "rlblocks.envs.turn_zoo:env", "num_envs": 2, "num_env_workers": 1},
            r"is a turn-based game; its copies are stepped in the trainer's process",
        ),
    ],
)
def test_what_workers_cannot_step_is_refused(config: dict[str, Any], message: str) -> None:
    from rlblocks.train import MultiAgentPPOTrainer, PPOTrainer

    cls = PPOTrainer if config["env"] == "CartPole-v1" else MultiAgentPPOTrainer
    with pytest.raises(ValueError, match=message):
        cls({**TINY, **config})


def test_cli_trains_with_env_workers(tmp_path: Path) -> None:
    from rlblocks.cli import main

    run = tmp_path / "run"
    sets = ["--set", "num_env_workers=2", "--set", "train_batch_size=48", "--num-envs", "2"]
    args = ["train", "--env", ZOO, *sets, "--run-dir", str(run), "--no-progress"]
    assert main([*args, "--stop-timesteps", "96"]) == 0
    assert (run / "progress.csv").read_text().count("\n") == 3  # header + 2 iterations


def _prep(pid: str, space: Any) -> Any:
    from rlblocks.catalog import ModelCatalog

    return ModelCatalog.get_preprocessor_for_space(space)


def test_workers_write_the_preprocessed_rows_of_a_masked_union() -> None:
    """``shared``: a Dict union (mask, OneOf blocks); the workers' rows are the runner's."""
    from rlblocks.wrappers.vector_steps import Preprocessed

    local = MultiAgentVectorEnv(parallel_env, 4)
    with WorkerVectorEnv(parallel_env, 4, 2, preprocessor_for=_prep) as hub:
        prep = _prep("shared", hub.specs["shared"].observation_space)
        for want, got in zip(_run(local, 30), _run(hub, 30), strict=True):
            raw, rows = want["shared"], got["shared"]
            raw, rows = getattr(raw, "raw", raw), getattr(rows, "raw", rows)
            assert isinstance(rows, Preprocessed)
            np.testing.assert_array_equal(rows.rows, prep.transform_batch(raw))
    local.close()


class _NaNAt:
    """Two agents observing ``Dict(x=Box(2))``; in a copy first reset with a seed of 2
    modulo 3, agent ``b`` observes a NaN at the third step."""

    def __init__(self) -> None:
        import gymnasium as gym
        from pettingzoo import ParallelEnv

        class Env(ParallelEnv):  # type: ignore[misc]
            metadata = {"name": "nan_at"}
            possible_agents = ["a", "b"]

            def observation_space(self, agent: str) -> Any:
                return gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,), np.float32)})

            def action_space(self, agent: str) -> Any:
                return gym.spaces.Discrete(2)

            def _obs(self) -> dict[str, Any]:
                x = {a: {"x": np.zeros(2, np.float32)} for a in self.agents}
                if self.bad and self.t == 3:
                    x["b"]["x"][1] = np.nan
                return x

            def reset(self, seed: Any = None, options: Any = None) -> Any:
                self.agents, self.t = list(self.possible_agents), 0
                if seed is not None:
                    self.bad = seed % 3 == 2
                return self._obs(), {a: {} for a in self.agents}

            def step(self, actions: Any) -> Any:
                self.t += 1
                flags = {a: False for a in self.agents}
                rewards = {a: 0.0 for a in self.agents}
                return self._obs(), rewards, flags, dict(flags), {a: {} for a in self.agents}

        self.env = Env()


def test_a_non_finite_observation_in_a_worker_is_refused_as_in_process() -> None:
    from rlblocks.train import MultiAgentPPOTrainer

    def make(_: Any) -> Any:
        return _NaNAt().env

    messages = []
    for workers in (0, 2):
        config = {**TINY, "env": make, "num_env_workers": workers}
        with MultiAgentPPOTrainer(config) as trainer, pytest.raises(ValueError) as err:
            trainer.train()
        messages.append(str(err.value))
    assert messages[0] == messages[1], messages
    assert "returned a non-finite observation" in messages[0] and "nan" in messages[0]
