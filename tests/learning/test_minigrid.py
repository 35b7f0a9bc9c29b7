"""MiniGrid trains with the CLI's defaults: ``rlblocks train --env minigrid:MiniGrid-Empty-5x5-v0``.

MiniGrid's observation is ``Dict(direction=Discrete(4), image=Box(0, 255, (7, 7, 3)),
mission=MissionSpace)``: the mission is a string space that is not gymnasium's ``Text``,
read as text with the config's ``text_max_length`` and printable-ASCII charset. The run is
the real command line, ``rlblocks.cli.main(["train", ...])``, with nothing set but the step
budget; the mean return of its last iteration must clearly beat its first iteration's (a
run measured 0.24, 0.31, 0.45, 0.70 over its first four iterations, 0.94 after ten).
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest

pytest.importorskip(
    "minigrid",
    reason="Farama's minigrid is not installed (it is in the test extra: rlblocks[test])",
)

ENV = "minigrid:MiniGrid-Empty-5x5-v0"
#: Environment steps of the run (four iterations of 2048 steps).
BUDGET = 8192
#: How much the last iteration's mean return must exceed the first iteration's.
MARGIN = 0.25


def test_minigrid_empty_learns_with_cli_defaults(tmp_path: Path) -> None:
    from rlblocks.cli import main

    run = tmp_path / "run"
    start = time.perf_counter()
    rc = main(
        [
            "train",
            "--env",
            ENV,
            "--stop-timesteps",
            str(BUDGET),
            "--run-dir",
            str(run),
            "--no-progress",
        ]
    )
    wall = time.perf_counter() - start
    assert rc == 0, f"rlblocks train --env {ENV} exited with {rc}"
    with open(run / "progress.csv", newline="") as f:
        curve = [
            (int(r["timesteps_total"]), round(float(r["episode_return_mean"]), 3))
            for r in csv.DictReader(f)
        ]
    assert curve and curve[-1][0] >= BUDGET, f"{ENV}: the run stopped early; curve {curve}"
    first, last = curve[0][1], curve[-1][1]
    print(f"{ENV}: first iteration {first}, last {last}, {wall:.0f} s; curve {curve}")
    assert last >= first + MARGIN, (
        f"{ENV}: the last iteration's mean return {last} is not {MARGIN} above the first "
        f"iteration's {first}; curve {curve}"
    )
