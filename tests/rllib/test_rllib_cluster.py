"""``rlblocks train --backend rllib --ray-address`` on two simulated Ray nodes
(``ray.cluster_utils.Cluster``) that do not see the user's env module: rlblocks ships it
through the job's ``runtime_env``; without shipping, the env runners' import error is one
line and exit code 2.

The user module lives in a temporary directory that only the driver's ``PYTHONPATH`` names;
the nodes are started from this process (whose environment does not name it) and the
driver runs in another empty directory (Ray puts the driver's working directory on its
workers' ``sys.path``).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

import numpy as np  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from rlblocks.rllib.runtime_env import (  # noqa: E402
    SHIP_ENV_VAR,
    config_modules,
    runtime_env_for,
    user_code_paths,
)
from rlblocks.rllib.startup import LOCAL_RAY_SYSTEM_CONFIG  # noqa: E402

MODULE = "rlb_cluster_user_envs"

USER_MODULE = textwrap.dedent(
    '''
    """A user's env module: CartPole that leaves a marker per construction."""
    import os

    import gymnasium as gym
    from gymnasium.envs.classic_control import CartPoleEnv


    class MarkedCartPole(CartPoleEnv):
        def __init__(self, marker_dir=None, **kwargs):
            super().__init__(**kwargs)
            if marker_dir:
                import ray

                where = "driver"
                if ray.is_initialized() and ray.get_runtime_context().get_actor_id():
                    where = ray.get_runtime_context().get_node_id()  # in a Ray actor
                name = f"{where}-{os.getpid()}"
                with open(os.path.join(marker_dir, name), "w") as f:
                    f.write(__file__)


    gym.register("MarkedCartPole-v0", entry_point=MarkedCartPole, max_episode_steps=100)
    '''
)


@pytest.fixture(scope="module")
def cluster():
    """A head and a worker node, one CPU each, for the whole module."""
    if ray.is_initialized():
        ray.shutdown()
    head = {"num_cpus": 1, "include_dashboard": False, "_system_config": LOCAL_RAY_SYSTEM_CONFIG}
    made = Cluster(initialize_head=True, head_node_args=head)
    try:
        made.add_node(num_cpus=1)
        made.wait_for_nodes()
        yield made
    finally:
        if ray.is_initialized():
            ray.shutdown()
        made.shutdown()


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    """A directory holding the user's env module (on no node's path)."""
    where = tmp_path_factory.mktemp("user_code")
    (where / f"{MODULE}.py").write_text(USER_MODULE)
    return where


def train(cluster, user_dir: Path, work: Path, run: Path, markers: Path, ship: bool):
    work.mkdir()
    markers.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", SHIP_ENV_VAR)}
    env["PYTHONPATH"] = str(user_dir)  # the driver's path only
    if not ship:
        env[SHIP_ENV_VAR] = "0"
    assert str(user_dir) not in os.environ.get("PYTHONPATH", "")  # the nodes' environment
    args = [
        sys.executable,
        "-m",
        "rlblocks.cli",
        "train",
        "--env",
        f"{MODULE}:MarkedCartPole-v0",
        "--backend",
        "rllib",
        "--num-env-runners",
        "2",
        "--ray-address",
        cluster.address,
        "--run-dir",
        str(run),
        "--stop-timesteps",
        "100",
        "--no-progress",
        "--no-default-stop-reward",
        *("--set", "num_envs=1", "--set", "train_batch_size=100"),
        *("--set", "sgd_minibatch_size=50", "--set", "num_sgd_iter=1"),
        *("--set", "model.fcnet_hiddens=[16]", "--set", f"env_config.marker_dir={markers}"),
    ]
    return subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=240)


def test_a_user_env_trains_on_nodes_that_do_not_have_it(cluster, user_dir, tmp_path):
    run, markers = tmp_path / "run", tmp_path / "markers"
    out = train(cluster, user_dir, tmp_path / "work", run, markers, ship=True)
    assert out.returncode == 0, out.stderr[-3000:]
    with open(run / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and int(rows[0]["timesteps_total"]) >= 100
    # both env runners built the env in Ray worker processes, from the shipped copy
    made = {p.name: p.read_text() for p in markers.iterdir()}
    remote = {name: file for name, file in made.items() if not name.startswith("driver-")}
    nodes = {node.node_id for node in cluster.list_all_nodes()}
    assert len(remote) >= 2, made
    assert all(not Path(file).is_relative_to(user_dir) for file in remote.values()), remote
    assert all(Path(file).name == f"{MODULE}.py" for file in remote.values()), remote
    # one CPU per node and per env runner: a runner on each node, reached through the address
    assert {name.rsplit("-", 1)[0] for name in remote} == nodes


def test_env_runners_that_cannot_import_the_env_are_one_line(cluster, user_dir, tmp_path):
    run = tmp_path / "run"
    out = train(cluster, user_dir, tmp_path / "work", run, tmp_path / "markers", ship=False)
    assert out.returncode == 2, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "rlblocks train: error: env runners failed to start: "
        f"ModuleNotFoundError: No module named '{MODULE}'"
    ), out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "IndexError" not in out.stderr, out.stderr[-3000:]
    assert not run.exists()  # a failed start leaves no run directory


def test_the_modules_a_config_names_and_what_is_shipped(user_dir, tmp_path, monkeypatch):
    from rlblocks.catalog import ModelCatalog
    from rlblocks.train.trainer_config import PPOConfig

    pkg = tmp_path / "rlb_user_pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "models.py").write_text("class Net:\n    pass\n")
    monkeypatch.syspath_prepend(str(user_dir))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(SHIP_ENV_VAR, raising=False)
    import rlb_user_pkg.sub.models as models

    monkeypatch.setitem(ModelCatalog._custom_models, "rlb_test_registered_net", models.Net)
    config = PPOConfig(
        env=f"{MODULE}:MarkedCartPole-v0",
        env_config={"mode": "easy:hard", "helper": "gymnasium.spaces:Box"},
        model={"custom_model": "rlb_test_registered_net"},
    )
    # every "name:rest" string is a candidate ("easy:hard" too: no module, nothing shipped)
    assert config_modules(config) == [
        MODULE,
        "easy",
        "gymnasium.spaces",
        "rlb_user_pkg.sub.models",
    ]
    # a single-file module ships as its file, a package as its top-level directory;
    # site-packages (gymnasium), rlblocks and an unknown module ship nothing
    assert user_code_paths(config) == [(user_dir / f"{MODULE}.py").resolve(), pkg.resolve()]
    assert user_code_paths({"env": "rlblocks.envs:rlblocks/RepeatAfterMe-v0"}) == []
    assert user_code_paths({"env": "no_such_module_anywhere:X-v0"}) == []
    # the user's runtime_env is kept, its py_modules first and not repeated
    base = {"py_modules": [str(pkg.resolve())], "env_vars": {"A": "1"}}
    assert runtime_env_for(config, base) == {
        "py_modules": [str(pkg.resolve()), str((user_dir / f"{MODULE}.py").resolve())],
        "env_vars": {"A": "1"},
    }
    assert base["py_modules"] == [str(pkg.resolve())]  # not changed in place
    monkeypatch.setenv(SHIP_ENV_VAR, "0")
    assert user_code_paths(config) == [] and runtime_env_for(config) == {}


def test_a_submitted_jobs_py_modules_are_kept(monkeypatch):
    from rlblocks.rllib import _ray

    monkeypatch.delenv(_ray._RAY_JOB_CONFIG, raising=False)
    assert _ray._with_job_py_modules({"py_modules": ["/a"]}) == ({"py_modules": ["/a"]}, False)
    job = {"runtime_env": {"py_modules": ["gcs://_ray_pkg_x.zip", "/a"], "pip": ["x"]}}
    monkeypatch.setenv(_ray._RAY_JOB_CONFIG, json.dumps(job))
    # Ray merges the job's other fields; both naming py_modules needs ours to list theirs
    assert _ray._with_job_py_modules({"py_modules": ["/a", "/b"]}) == (
        {"py_modules": ["gcs://_ray_pkg_x.zip", "/a", "/b"]},
        True,
    )
    assert _ray._with_job_py_modules({"env_vars": {"A": "1"}}) == (
        {"env_vars": {"A": "1"}},
        False,
    )
    assert _ray._with_job_py_modules(None) == ({}, False)


def test_vector_mode_ray_joins_ray_address_else_starts_ray_at_the_drivers_priority(
    cluster, monkeypatch
):
    """The native trainer's ``vector_mode="ray"`` starts Ray as ``--backend rllib`` does
    (``init_ray``): a submitted job's ``RAY_ADDRESS`` cluster is joined (a plain
    ``ray.init(num_cpus=...)`` refuses to join one), and a local Ray runs its workers at the
    driver's priority, not Ray's niceness 15."""
    import gymnasium as gym
    from rlblocks.wrappers.ray_vector import RayVectorEnv

    def actors_nodes_and_niceness():
        if ray.is_initialized():
            ray.shutdown()
        venv = RayVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_actors=1)
        try:
            venv.reset(seed=0)
            venv.step(np.zeros(2, np.int64))
            nice = ray.get(ray.remote(num_cpus=0)(lambda: os.nice(0)).remote())
            return len([n for n in ray.nodes() if n["Alive"]]), nice
        finally:
            venv.close()
            ray.shutdown()

    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    assert actors_nodes_and_niceness() == (2, 0)  # the cluster's head and worker nodes
    monkeypatch.delenv("RAY_ADDRESS")
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    assert actors_nodes_and_niceness() == (1, 0)  # a local Ray of its own
