"""The differential fuzzer (tools/fuzz_flatten.py): a bounded run, and proof that it reports
what it is there to find (a crashed worker, a differing output, a differing refusal
message)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.native

FUZZ = Path(__file__).parents[1] / "tools" / "fuzz_flatten.py"
# Every case drives every kind of input (valid, corrupted, aliased, filter pushes, kernels)
# on its own random space: more cases are more spaces, not more kinds. CI's sanitizer run
# (tools/asan_check.sh) sets 1500 and compares the same two implementations.
CASES = int(os.environ.get("RLBLOCKS_FUZZ_CASES", "100"))


def fuzz(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(FUZZ), *args], capture_output=True, text=True, timeout=900
    )


def test_native_core_and_numpy_twin_agree_on_random_and_corrupted_inputs() -> None:
    result = fuzz("--cases", str(CASES), "--seed", "0")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 findings" in result.stdout


@pytest.mark.parametrize(
    "inject, finding",
    [
        ("crash", "native worker crashed"),
        ("differ", "outputs differ"),
        ("message", "messages differ"),  # the flattening core's refusals, word for word
    ],
)
def test_the_fuzzer_reports_crashes_and_differences(inject: str, finding: str) -> None:
    result = fuzz("--cases", "5", "--inject", inject)
    assert result.returncode == 1 and finding in result.stdout, result.stdout[-2000:]


def test_the_fuzzer_drives_aliased_outputs_and_huge_filter_values() -> None:
    result = fuzz("--cases", "3", "--seed", "0", "--show")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "(aliased out, batched_out)" in result.stdout
    assert "(aliased out, list_out)" in result.stdout
    assert "(filter push, MeanStdFilter)" in result.stdout
    kernels = (
        "categorical_draw",
        "masked_categorical_draw",
        "diag_gaussian_draw",
        "squashed_gaussian_sample",
        "squashed_gaussian_grad",
        "dense_forward",
    )
    for kernel in kernels:
        assert f"(kernel, {kernel})" in result.stdout
