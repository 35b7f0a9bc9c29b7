"""The replay buffer's differential fuzzer (tools/fuzz_replay.py): a bounded run, native and
twin agreeing on every outcome and message, and proof that it reports what it is there to
find (a crashed worker, a differing output)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.native

FUZZ = Path(__file__).parents[1] / "tools" / "fuzz_replay.py"
CASES = int(os.environ.get("RLBLOCKS_REPLAY_FUZZ_CASES", "300"))


def fuzz(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(FUZZ), *args], capture_output=True, text=True, timeout=900
    )


def test_native_replay_and_numpy_twin_agree_on_random_operation_sequences() -> None:
    result = fuzz("--cases", str(CASES), "--seed", "0")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{CASES} cases, 0 findings" in result.stdout


@pytest.mark.parametrize(
    ("inject", "finding"), [("crash", "native worker crashed"), ("differ", "outputs differ")]
)
def test_the_replay_fuzzer_reports_crashes_and_differences(inject: str, finding: str) -> None:
    result = fuzz("--cases", "3", "--inject", inject)
    assert result.returncode == 1 and finding in result.stdout, result.stdout[-2000:]


def test_the_replay_fuzzer_drives_state_corruption_and_refusals() -> None:
    result = fuzz("--cases", "40", "--seed", "0", "--show")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    for seen in ("state['", "frame 0 of the stack", "batch_size:", "ok "):
        assert seen in result.stdout, seen
