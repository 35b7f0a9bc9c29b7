"""``rlblocks evaluate RUN_DIR --exported FILE`` through the command line (issue 44, items 7
and 8): a native multi-agent run's exported policies act together, with the checkpoint's
returns; evaluating an exported ONNX policy imports no Ray. Training, exporting and the
checkpoint's evaluation run in the test's process (:func:`conftest.run_cli`); the exported
evaluation runs in a fresh interpreter, whose imports are the ones checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import rlblocks
from conftest import run_cli

pytest.importorskip("pettingzoo", reason="pettingzoo is the multiagent extra")
pytest.importorskip("onnxruntime", reason="onnxruntime is the export extra")

_CODE = """
import sys
from rlblocks.cli import main
code = main(sys.argv[1:])
print("torch imported:", "torch" in sys.modules, file=sys.stderr)
print("ray imported:", "ray" in sys.modules, file=sys.stderr)
sys.exit(code)
"""

TINY = ["--set", "num_envs=2", "--set", "train_batch_size=64", "--set", "sgd_minibatch_size=32"]
TINY += ["--set", "num_sgd_iter=1", "--set", "model.fcnet_hiddens=[8]", "--no-progress"]


def here(*args: str) -> str:
    """``rlblocks ARGS``' stdout, run in this process (exit code 0 asserted)."""
    out = run_cli(*args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def cli(*args: str) -> tuple[str, bool]:
    """``rlblocks ARGS``' stdout in a fresh interpreter (exit code 0 asserted) and whether it
    imported Ray (whether it imported torch: :data:`TORCH`, the last call's)."""
    where = str(Path(rlblocks.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": where, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _CODE, *args], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr
    TORCH[:] = ["torch imported: True" in out.stderr]
    return out.stdout, out.stderr.rstrip().endswith("ray imported: True")


TORCH: list[bool] = []


def evaluate(*args: str) -> tuple[dict[str, Any], bool]:
    """``rlblocks evaluate ARGS`` in a fresh interpreter: its result and whether it imported
    Ray."""
    stdout, ray = cli("evaluate", *args, "--episodes", "4", "--seed", "7")
    return json.loads(stdout), ray


def evaluate_here(run: Path) -> dict[str, Any]:
    """``rlblocks evaluate RUN`` (the checkpoint) in this process, with :func:`evaluate`'s
    episodes and seed."""
    return json.loads(here("evaluate", str(run), "--episodes", "4", "--seed", "7"))


@pytest.mark.ray  # checks that Ray is not imported: meaningful where it is installed
def test_a_multiagent_runs_exported_policies_act_together(tmp_path: Path) -> None:
    run = tmp_path / "ma"
    env = "rlblocks.envs.multiagent_zoo:parallel_env"
    by_space = ["--set", "multiagent.policy_mapping=by_space"]
    here("train", "--env", env, *TINY, *by_space, "--stop-timesteps", "64", "--run-dir", str(run))
    here("export", str(run))
    files = {p: run / f"policy_{p}.onnx" for p in ("scout", "pilot")}
    assert all(f.is_file() for f in files.values())
    checkpoint = evaluate_here(run)
    for named in (files["pilot"], run):  # one of the artifacts, or their folder
        exported, ray = evaluate(str(run), "--exported", str(named))
        assert not ray
        assert exported["exported"] == {p: str(f) for p, f in files.items()}
        assert exported["episode_returns"] == checkpoint["episode_returns"]
        for key, value in checkpoint.items():
            if key.startswith(("agent_", "module_")):
                assert exported[key] == value, key


@pytest.mark.ray  # checks that Ray is not imported: meaningful where it is installed
def test_evaluating_an_exported_onnx_policy_imports_neither_torch_nor_ray(tmp_path: Path) -> None:
    """The run's config.json and its checkpoint's meta.json say all that an exported
    policy's evaluation needs: the same returns as the checkpoint's own evaluation. (DQN's
    argmax-Q artifact reads the same files: docs/qlearning.md's first block evaluates it.)"""
    run = tmp_path / "cp"
    here("train", "--env", "CartPole-v1", *TINY, "--stop-timesteps", "64", "--run-dir", str(run))
    here("export", str(run))
    checkpoint = evaluate_here(run)
    exported, ray = evaluate(str(run), "--exported", str(run / "policy.onnx"))
    assert not ray and TORCH == [False]
    assert exported["episode_returns"] == checkpoint["episode_returns"]
    assert exported["checkpoint"] == checkpoint["checkpoint"]
