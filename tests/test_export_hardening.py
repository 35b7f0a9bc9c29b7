"""Exported policies refuse what they cannot run, loudly and early (issue 28, export items).

* An empty batch gives empty actions and empty state of the right shapes and dtypes, for
  feed-forward, LSTM and attention policies in both runtimes (ONNX once aborted the process
  on it, and the torch program raised a RuntimeError).
* At load, the sidecar is compared with the artifact's graph (names, order, shapes, dtypes)
  and with its own action space: a reordered ``output_names`` or a sidecar from another
  policy is a ValueError naming the field, never a wrong action at the first call; through
  ``rlblocks evaluate --exported`` each is a one-line error, as is an env of other spaces.
* Every input of a call is validated, by one function both runtimes share: NaN / inf state,
  state of a wrong width or batch, previous actions outside the action space, non-finite
  previous rewards -> ValueError naming the input, the index, the value and what was allowed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from rlblocks.cli import main
from rlblocks.export import TorchExportPolicy, export_policy
from rlblocks.export.runtime import ExportedPolicy
from rlblocks.export.sidecar import read_sidecar, sidecar_path
from rlblocks.train import PPOTrainer
from test_export import FEED_FORWARD, RECURRENT, _observations, _shared_artifact, _trainer

pytest.importorskip("onnxruntime")

from rlblocks.export import OnnxPolicy  # noqa: E402  (needs onnxruntime)

Box, Discrete = gym.spaces.Box, gym.spaces.Discrete

CASES = {
    "fc-nested-tuple": FEED_FORWARD["fc-nested-tuple"],
    "fc-box": FEED_FORWARD["fc-box"],
    "fc-discrete": FEED_FORWARD["fc-discrete"],
    "lstm": RECURRENT["lstm"],  # Discrete(3), one previous action and reward
    "attention": RECURRENT["attention"],  # MultiDiscrete([2, 3]), two of each
    "lstm-box-prev": (
        Box(-1, 1, (5,)),
        Box(-1, 1, (2,)),
        {
            "use_lstm": True,
            "lstm_cell_size": 8,
            "fcnet_hiddens": [8],
            "lstm_use_prev_action": True,
            "lstm_use_prev_reward": True,
        },
    ),
}
KINDS = ["fc-nested-tuple", "lstm", "attention", "lstm-box-prev"]
RUNTIMES = {"onnx": (".onnx", OnnxPolicy), "torch-export": (".pt2", TorchExportPolicy)}


class _Artifacts:
    """``artifacts[case, fmt]``: the case exported in that format on first use, through the
    session's shared exports (tests/test_export.py reads the same trainers and artifacts)."""

    def __init__(self, shared: Any):
        self.shared = shared

    def __getitem__(self, key: tuple[str, str]) -> Path:
        case, fmt = key
        return _shared_artifact(self.shared, case, fmt, CASES[case])


@pytest.fixture(scope="module")
def artifacts(shared_exports: Any) -> _Artifacts:
    """Every case in both formats, each exported once (on first use)."""
    return _Artifacts(shared_exports)


def _load(artifacts: Any, case: str, fmt: str) -> ExportedPolicy:
    policy: ExportedPolicy = RUNTIMES[fmt][1](artifacts[case, fmt])
    return policy


def _obs(case: str, n: int) -> list[Any]:
    return _observations(CASES[case][0], n, seed=3)


# --- item 2: empty batches --------------------------------------------------------------------
@pytest.mark.parametrize("fmt", list(RUNTIMES))
@pytest.mark.parametrize("case", KINDS)
def test_empty_batch_gives_empty_actions_and_state(artifacts: Any, case: str, fmt: str) -> None:
    policy = _load(artifacts, case, fmt)
    full, full_state = policy.compute_actions(_obs(case, 2))
    empty, empty_state = policy.compute_actions([])
    full_leaves, empty_leaves = _flat(full), _flat(empty)
    assert len(empty_leaves) == len(full_leaves) >= 1
    for e, f in zip(empty_leaves, full_leaves, strict=True):
        assert e.shape == (0, *f.shape[1:]) and e.dtype == f.dtype
    assert len(empty_state) == len(full_state) == len(policy.initial_state(1))
    for e, f in zip(empty_state, full_state, strict=True):
        assert e.shape == (0, *f.shape[1:]) and e.dtype == f.dtype == np.float32
    # explicit empty state / previous actions / rewards, and a batched empty observation
    pa, pr = policy.initial_prev(0)
    again, state = policy.compute_actions(
        np.zeros((0, 5), np.float32), policy.initial_state(0) or None, pa, pr
    )
    assert [a.shape for a in _flat(again)] == [a.shape for a in empty_leaves]
    assert [s.shape for s in state] == [s.shape for s in empty_state]
    # every output of forward, with the dtype and trailing shape of a real batch
    x = policy.preprocess(_obs(case, 2))
    want = policy.forward(x)
    got = policy.forward(x[:0])
    assert list(got) == list(want) == policy.output_names
    for name in want:
        assert got[name].shape == (0, *want[name].shape[1:]), name
        assert got[name].dtype == want[name].dtype, name
    # a state of a wrong width is still refused when the batch is empty
    if state:
        with pytest.raises(ValueError, match=r"state\[0\]: shape"):
            policy.compute_actions([], [s[:, :1] for s in state], pa, pr)


def _flat(actions: Any) -> list[np.ndarray]:
    if isinstance(actions, tuple):
        return [x for a in actions for x in _flat(a)]
    if isinstance(actions, dict):
        return [x for k in actions for x in _flat(actions[k])]
    return [np.asarray(actions)]


# --- item 5: the sidecar against the graph, at load -------------------------------------------
def _variant(
    artifacts: Any, tmp_path: Path, graph: str, fmt: str, edit: Any, sidecar_of: str | None = None
) -> Path:
    """A copy of ``graph``'s artifact with ``sidecar_of``'s sidecar (default its own),
    edited by ``edit``."""
    src = artifacts[graph, fmt]
    dst = tmp_path / f"variant{src.suffix}"
    shutil.copyfile(src, dst)
    side = json.loads(sidecar_path(artifacts[sidecar_of or graph, fmt]).read_text())
    edit(side)
    sidecar_path(dst).write_text(json.dumps(side))
    return dst


def _reverse_outputs(side: dict[str, Any]) -> None:
    side["output_names"] = side["output_names"][::-1]


def _value_first(side: dict[str, Any]) -> None:
    names = side["output_names"]
    side["output_names"] = ["value", "dist_inputs", "action"] + names[3:]


def _reorder_inputs(side: dict[str, Any]) -> None:
    side["input_names"] = [
        side["input_names"][0],
        side["input_names"][2],
        side["input_names"][1],
        *side["input_names"][3:],
    ]


def _other_action_space(side: dict[str, Any]) -> None:
    side["action_space"] = {"type": "Discrete", "n": 5, "start": 0}


def _wider_state(side: dict[str, Any]) -> None:
    side["inputs"][1]["shape"] = ["B", 32]
    side["inputs"][1]["initial"] = [0.0] * 32


def _int32_action(side: dict[str, Any]) -> None:
    side["outputs"]["actions"][0]["dtype"] = "int32"


def _fixed_batch(side: dict[str, Any]) -> None:
    side["outputs"]["value"]["shape"] = [2]


def _no_dist_inputs(side: dict[str, Any]) -> None:
    del side["outputs"]["dist_inputs"]


def _initial_outside(side: dict[str, Any]) -> None:
    next(i for i in side["inputs"] if i["name"] == "prev_actions")["initial"] = 3


def _malformed_action_space(side: dict[str, Any]) -> None:
    side["action_space"]["n"] = -3


MISMATCHES = {
    # (graph, sidecar edit, what the error must say)
    "reordered-output-names": (
        "lstm",
        _reverse_outputs,
        r"output_names: the sidecar says \['state_out_\d'",
    ),
    "value-listed-first": ("lstm", _value_first, r"output_names: the sidecar says \['value'"),
    "reordered-input-names": (
        "lstm",
        _reorder_inputs,
        r"input_names: the sidecar says "
        r"\['obs', 'state_in_1', 'state_in_0'",
    ),
    "other-action-space": (
        "lstm",
        _other_action_space,
        r"action_space: the sidecar says Discrete\(5\), which needs output "
        r"'dist_inputs' .* to be float32 \['B', 5\]; the graph has float32 "
        r"\[.+, 3\]",
    ),
    "wider-state": (
        "lstm",
        _wider_state,
        r"input 'state_in_0' \(inputs\[1\]\) shape: the "
        r"sidecar says \['B', 32\], the graph has \[.+, 16\]",
    ),
    "int32-action": (
        "lstm",
        _int32_action,
        r"output 'action' \(outputs.actions\[0\]\) dtype: "
        r"the sidecar says int32, the graph has int64",
    ),
    "fixed-batch": ("lstm", _fixed_batch, r"'outputs.value.shape' is \[2\]; expected 'B'"),
    "missing-field": ("lstm", _no_dist_inputs, r"no field 'outputs.dist_inputs'"),
    "initial-outside": (
        "lstm",
        _initial_outside,
        r"prev_actions input's initial: the sidecar says 3, not an action of "
        r"Discrete\(3\) \(prev_actions\[0, 0\]: 3 is outside",
    ),
    "malformed-space": (
        "lstm",
        _malformed_action_space,
        r"sidecar's action_space \{'type': 'Discrete', 'n': -3, 'start': 0\} is "
        r"malformed \((ValueError|AssertionError): "  # gymnasium 1.4 | 1.2
        r"n \(counts\) have to be positive",
    ),
}


@pytest.mark.parametrize("fmt", list(RUNTIMES))
@pytest.mark.parametrize("name", list(MISMATCHES))
def test_sidecar_that_disagrees_with_the_graph_is_refused_at_load(
    artifacts: Any, tmp_path: Path, name: str, fmt: str
) -> None:
    graph, edit, message = MISMATCHES[name]
    if fmt == "torch-export" and name == "reordered-input-names":
        message = r"input_names: the sidecar says .*, its field 'inputs' lists"
    if fmt == "torch-export" and name in ("reordered-output-names", "value-listed-first"):
        # a torch.export program names nothing: the sidecar's own lists disagree
        message = r"output_names: the sidecar says .*, its field 'outputs' lists"
    path = _variant(artifacts, tmp_path, graph, fmt, edit)
    with pytest.raises(ValueError, match=message):
        RUNTIMES[fmt][1](path)
    # the untouched sidecar loads and acts (the check is not merely always failing)
    RUNTIMES[fmt][1](artifacts[graph, fmt]).compute_single_action(_obs(graph, 1)[0])


@pytest.mark.parametrize("fmt", list(RUNTIMES))
def test_sidecar_of_another_policy_is_refused_at_load(
    artifacts: Any, tmp_path: Path, fmt: str
) -> None:
    # a Box-action graph with a Discrete policy's sidecar (same observation size)
    path = _variant(artifacts, tmp_path, "fc-box", fmt, lambda side: None, sidecar_of="fc-discrete")
    with pytest.raises(
        ValueError,
        match=r"output 'action' \(outputs.actions\[0\]\) dtype: the "
        r"sidecar says int64, the graph has float32",
    ):
        RUNTIMES[fmt][1](path)
    # ... and the other way round: a recurrent graph with a feed-forward sidecar
    path = _variant(artifacts, tmp_path, "lstm", fmt, lambda side: None, sidecar_of="fc-discrete")
    n_inputs = len(read_sidecar(artifacts["lstm", fmt])["input_names"])
    assert n_inputs > 1
    with pytest.raises(
        ValueError,
        match=rf"input_names: the sidecar says \['obs'\] \(1 inputs\), "
        rf"the graph has {n_inputs} inputs",
    ):
        RUNTIMES[fmt][1](path)


def test_cli_evaluate_exported_mismatches_are_one_line(
    artifacts: Any, tmp_path: Path, capsys: Any
) -> None:
    run = tmp_path / "run"
    PPOTrainer({"env": "CartPole-v1", "num_envs": 1}, run_dir=run).save()
    assert main(["export", str(run)]) == 0
    good = run / "policy.onnx"
    reordered = tmp_path / "reordered.onnx"
    shutil.copyfile(good, reordered)
    side = json.loads(sidecar_path(good).read_text())
    _value_first(side)
    sidecar_path(reordered).write_text(json.dumps(side))
    # a policy of other spaces: Box(5) observations (the run's env observes Box(4))
    other_obs = artifacts["fc-discrete", "onnx"]
    # CartPole's observations but Box actions
    cartpole = gym.make("CartPole-v1")
    trainer = _trainer(cartpole.observation_space, Box(-1, 1, (1,)), {"fcnet_hiddens": [8]})
    try:
        other_actions = export_policy(trainer, tmp_path / "box.onnx")
    finally:
        trainer.close()
    cases = [
        (reordered, r"output_names: the sidecar says \['value'"),
        (
            other_obs,
            r"the exported policy observes Box\(-1.0, 1.0, \(5,\), float32\), "
            r"the environment's observation space is Box\(",
        ),
        (
            other_actions,
            r"the exported policy acts in Box\(-1.0, 1.0, \(1,\), float32\), "
            r"the environment's action space is Discrete\(2\)",
        ),
    ]
    capsys.readouterr()
    for path, message in cases:
        assert main(["evaluate", str(run), "--episodes", "1", "--exported", str(path)]) == 2
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert err.startswith("rlblocks evaluate: error:") and "\n" not in err, err
        assert "Traceback" not in captured.err and captured.out == ""
        assert re.search(message, err), err
    assert main(["evaluate", str(run), "--episodes", "1", "--exported", str(good)]) == 0


# --- item 6: every input of a call ------------------------------------------------------------
def _bad_inputs(case: str, policy: ExportedPolicy, b: int) -> list[tuple[str, dict[str, Any], str]]:
    """``(label, compute_actions keyword arguments, expected message)`` for ``b`` rows."""
    state = policy.initial_state(b)
    pa, pr = policy.initial_prev(b)
    width = state[0].shape[1:]
    nan_state = [s.copy() for s in state]
    nan_state[0][1, 2] = np.nan
    inf_state = [s.copy() for s in state]
    inf_state[-1][0, 0] = -np.inf
    wide = [np.zeros((b, width[0] + 1, *width[1:]), np.float32), *state[1:]]
    cases = [
        (
            "nan-state",
            {"state": nan_state},
            r"state\[0\]\[1, 2(, 0)?\]: nan is not finite \(the state must be finite\)",
        ),
        (
            "inf-state",
            {"state": inf_state},
            rf"state\[{len(state) - 1}\]\[0, 0(, 0)?\]: -inf is not finite",
        ),
        (
            "wide-state",
            {"state": wide},
            rf"state\[0\]: shape \({b}, {width[0] + 1}.*expected \({b}, {width[0]}",
        ),
        (
            "state-batch",
            {"state": [s[:2] for s in state]},
            rf"state\[0\]: 2 rows .*but obs has {b} rows",
        ),
        (
            "state-count",
            {"state": state[:-1] if len(state) > 1 else [*state, *state]},
            rf"state: expected {len(state)} arrays, got",
        ),
        ("state-not-a-list", {"state": state[0]}, r"state: expected a list of"),
        (
            "nan-reward",
            {"state": state, "prev_rewards": _with(pr, (2, 0), np.nan)},
            r"prev_rewards\[2, 0\]: nan is not finite \(previous rewards must be finite\)",
        ),
        ("reward-batch", {"prev_rewards": pr[:1]}, rf"prev_rewards: 1 rows .*obs has {b} rows"),
        (
            "reward-shape",
            {"prev_rewards": np.zeros((b, pr.shape[1] + 2), np.float32)},
            rf"prev_rewards: shape \({b}, {pr.shape[1] + 2}\), expected \({b}, {pr.shape[1]}\)",
        ),
        ("action-batch", {"prev_actions": pa[:1]}, rf"prev_actions: 1 rows .*obs has {b} rows"),
        (
            "action-shape",
            {"prev_actions": np.zeros((b, 3, 4), pa.dtype)},
            rf"prev_actions: shape \({b}, 3, 4\), expected \({b}, {pa.shape[1]}",
        ),
        (
            "nan-action",
            {"prev_actions": _with(pa.astype(np.float64), (1, 0), np.nan)},
            r"prev_actions\[1, 0(, 0)?\]: nan is not finite",
        ),
    ]
    if case == "lstm":  # Discrete(3)
        cases += [
            (
                "action-high",
                {"prev_actions": _with(pa, (3, 0), 3)},
                r"prev_actions\[3, 0\]: 3 is outside Discrete\(3\) \(allowed: integers 0 to 2\)",
            ),
            (
                "action-7",
                {"prev_actions": _with(pa, (0, 0), 7)},
                r"prev_actions\[0, 0\]: 7 is outside Discrete\(3\) \(allowed: integers 0 to 2\)",
            ),
            (
                "action-negative",
                {"prev_actions": _with(pa, (2, 0), -1)},
                r"prev_actions\[2, 0\]: -1 is outside Discrete\(3\)",
            ),
            (
                "action-fraction",
                {"prev_actions": _with(pa.astype(np.float32), (1, 0), 0.5)},
                r"prev_actions\[1, 0\]: 0.5 is not an integer",
            ),
        ]
    elif case == "attention":  # MultiDiscrete([2, 3]), two previous actions
        cases += [
            (
                "component-0",
                {"prev_actions": _with(pa, (1, 1, 0), 2)},
                r"prev_actions\[1, 1, 0\]: 2 is outside component \[0\] of "
                r"MultiDiscrete\(\[2 3\]\) \(allowed: integers 0 to 1\)",
            ),
            (
                "component-1",
                {"prev_actions": _with(pa, (0, 0, 1), 3)},
                r"prev_actions\[0, 0, 1\]: 3 is outside component \[1\] of "
                r"MultiDiscrete\(\[2 3\]\) \(allowed: integers 0 to 2\)",
            ),
            (
                "component-negative",
                {"prev_actions": _with(pa, (3, 1, 1), -1)},
                r"prev_actions\[3, 1, 1\]: -1 is outside component \[1\]",
            ),
        ]
    else:  # Box(-1, 1, (2,)): any finite value, of the action shape
        cases += [
            (
                "box-inf",
                {"prev_actions": _with(pa, (2, 0, 1), np.inf)},
                r"prev_actions\[2, 0, 1\]: inf is not finite",
            ),
            (
                "box-float32-overflow",
                {"prev_actions": _with(pa.astype(np.float64), (0, 0, 0), 1e300)},
                r"prev_actions\[0, 0, 0\]: inf is not finite \(previous actions \(as float32\)",
            ),
        ]
    return cases


def _with(arr: np.ndarray, index: tuple[int, ...], value: Any) -> np.ndarray:
    out = np.array(arr, copy=True)
    out[index] = value
    return out


@pytest.mark.parametrize("case", ["lstm", "attention", "lstm-box-prev"])
def test_recurrent_inputs_are_validated_the_same_way_by_both_runtimes(
    artifacts: Any, case: str
) -> None:
    b = 4
    runtimes = {fmt: _load(artifacts, case, fmt) for fmt in RUNTIMES}
    obs = _obs(case, b)
    for label, kwargs, message in _bad_inputs(case, runtimes["onnx"], b):
        errors = []
        for policy in runtimes.values():
            with pytest.raises(ValueError, match=message) as err:
                policy.compute_actions(obs, **kwargs)
            errors.append(str(err.value))
        assert errors[0] == errors[1], (label, errors)
    # the edges of what is allowed still act, and both runtimes agree on the result
    onnx = runtimes["onnx"]
    state = onnx.initial_state(b)
    pa, pr = onnx.initial_prev(b)
    if case == "lstm":
        pa = np.array([[0], [2], [1], [2]], np.float64)  # integral floats are accepted
    elif case == "attention":
        pa[:, :, 0], pa[:, :, 1] = 1, 2
    else:
        pa[:] = 5.0  # outside the Box bounds: previous actions are not clipped
    pr = pr.reshape(b, -1)
    pr[:] = -3.5
    results = [p.compute_actions(obs, [s.copy() for s in state], pa, pr) for p in runtimes.values()]
    for got, want in zip(_flat(results[0][0]), _flat(results[1][0]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_previous_rewards_of_shape_b_and_previous_actions_without_the_window(
    artifacts: Any,
) -> None:
    # one previous action / reward: (B,) rewards and (B,) actions mean the same as (B, 1)
    policy = _load(artifacts, "lstm", "onnx")
    obs = _obs("lstm", 3)
    pa = np.array([2, 0, 1])
    pr = np.array([1.0, -2.0, 0.5], np.float32)
    flat = policy.compute_actions(obs, None, pa, pr)[0]
    windowed = policy.compute_actions(obs, None, pa[:, None], pr[:, None])[0]
    np.testing.assert_array_equal(flat, windowed)
    with pytest.raises(ValueError, match=r"prev_rewards: shape \(3, 3\), expected \(3, 1\)"):
        policy.compute_actions(obs, None, pa, np.zeros((3, 3)))


@pytest.mark.parametrize("fmt", list(RUNTIMES))
def test_feed_forward_policy_refuses_state_and_previous_inputs(artifacts: Any, fmt: str) -> None:
    policy = _load(artifacts, "fc-nested-tuple", fmt)
    obs = _obs("fc-nested-tuple", 2)
    with pytest.raises(
        ValueError, match=r"state: the policy is not recurrent \(pass None or \[\]\), got 1"
    ):
        policy.compute_actions(obs, [np.zeros((2, 4), np.float32)])
    with pytest.raises(ValueError, match=r"prev_actions: this policy reads no previous actions"):
        policy.compute_actions(obs, None, np.zeros((2, 1)))
    with pytest.raises(ValueError, match=r"prev_rewards: this policy reads no previous rewards"):
        policy.compute_actions(obs, None, None, np.zeros((2, 1)))
    with pytest.raises(ValueError, match=r"obs: shape \(2, 4\), expected \(B, 5\)"):
        policy.forward(np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"obs\[1, 3\]: nan is not finite"):
        policy.forward(_with(np.zeros((2, 5), np.float32), (1, 3), np.nan))
    assert policy.compute_actions(obs, [])[1] == []
