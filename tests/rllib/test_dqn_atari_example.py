"""``examples/dqn_atari.py --backend rllib --smoke`` (RLlib's DQN on ALE Pong with rlblocks'
frame pipeline and frame-stacking replay buffer) runs to the end; skipped without Ray or ale_py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("ale_py")

ROOT = Path(__file__).resolve().parents[2]


def test_dqn_atari_smoke_trains_and_reports_the_buffer():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "dqn_atari.py"), "--backend", "rllib", "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "qf_loss" in done.stdout
    assert "FrameStackPrioritizedEpisodeReplayBuffer" in done.stdout
    assert "observation bytes per stored step" in done.stdout
