"""Without the ``ray`` extra: ``rlblocks.rllib`` and every Ray option say which extra to
install (skipped where Ray is installed; ``tests/rllib`` covers that side)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

if importlib.util.find_spec("ray") is not None:
    pytest.skip("Ray is installed here", allow_module_level=True)

from rlblocks.train import PPOConfig  # noqa: E402
from rlblocks.train.envs import vector_env_from_config  # noqa: E402


def test_import_names_the_extra():
    with pytest.raises(ImportError, match=r'pip install "rlblocks\[ray\]"'):
        import rlblocks.rllib  # noqa: F401


def test_vector_mode_ray_names_the_extra():
    with pytest.raises(ValueError, match=r"vector_mode='ray'.*rlblocks\[ray\]"):
        vector_env_from_config(PPOConfig(env="CartPole-v1", num_envs=2, vector_mode="ray"))


def test_cli_backend_rllib_names_the_extra(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlblocks.cli",
            "train",
            "--env",
            "CartPole-v1",
            "--backend",
            "rllib",
            "--run-dir",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "rlblocks train: error:" in out.stderr and "rlblocks[ray]" in out.stderr
    assert not (tmp_path / "r").exists()
