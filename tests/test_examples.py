"""Every script in examples/ runs its ``--smoke`` version (in-process, a few seconds each)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: Examples that are not re-creations of RLlib's models guide: tested on their own below
#: (``dqn_atari``'s ``--backend rllib`` variant: tests/rllib/).
RLLIB_SCRIPTS = {"dqn_atari"}
SCRIPTS = sorted(
    p.stem
    for p in EXAMPLES.glob("*.py")
    if not p.stem.startswith("_") and p.stem not in RLLIB_SCRIPTS
)
sys.path.insert(0, str(EXAMPLES))  # the scripts import their shared helpers (_runner.py)


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"rlblocks_example_{name}", EXAMPLES / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_seed_customisation_has_an_example() -> None:
    expected = {
        "autoregressive_actions",
        "custom_action_dist",
        "custom_loss",
        "custom_model",
        "custom_rnn",
        "dict_obs_images",
        "framestack_model",
        "parametric_actions",
    }
    assert expected <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_example_docstring_and_flags(name: str) -> None:
    source = (EXAMPLES / f"{name}.py").read_text()
    assert source.startswith('"""') and "Re-creates RLlib's models guide, " in source
    assert '"--smoke"' in source or "example_parser(" in source  # shared flags, _runner.py
    assert 'if __name__ == "__main__":' in source


_CASES = [(name, ["--smoke"]) for name in SCRIPTS] + [
    ("custom_loss", ["--smoke", "--loss", "autoencoder"])
]


@pytest.mark.parametrize(
    "name, argv",
    _CASES,
)
def test_example_smoke_trains_one_iteration(
    name: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("rlblocks.train")
    monkeypatch.chdir(tmp_path)  # anything a run writes lands in a temporary directory
    result = _load(name).main(argv)
    assert result["timesteps_total"] > 0
    assert result["training_iteration"] == 1
    for key, value in result.items():
        if isinstance(value, float) and key.endswith("loss"):
            assert math.isfinite(value), (key, value)
    if name == "custom_loss":  # model.metrics() reaches the training result
        assert math.isfinite(result[f"{argv[-1] if '--loss' in argv else 'imitation'}_loss"])


def test_dqn_atari_smoke_runs_natively_with_frame_once_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dqn_atari.py --smoke`` on the native DQN trainer (no Ray): one iteration of Pong
    with updates, each 84x84 frame stored once (<= 7.1 KB per stored step), in < 60 s."""
    pytest.importorskip("ale_py", reason="the atari extra (ale-py) is not installed")
    import time

    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    result = _load("dqn_atari").main(["--smoke"])
    assert time.perf_counter() - start < 60
    assert result["training_iteration"] == 1 and result["timesteps_total"] >= 200
    assert result["num_updates"] > 0 and math.isfinite(result["qf_loss"])
    assert result["buffer_bytes_per_step"] <= 7100
