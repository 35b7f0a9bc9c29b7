"""Checks shared by both runtimes of an exported policy (``OnnxPolicy``, ``TorchExportPolicy``).

* At load, :func:`check_structure` makes sure the sidecar has every field the runtime reads,
  and :func:`check_artifact` compares the sidecar with itself (input and output names as the
  action space and the state require them, action leaves in the action space's dtype and
  shape, ``dist_inputs`` as wide as the distribution needs) and with the artifact's graph
  (names where the graph has them, order, shapes with a symbolic batch dimension, dtypes).
* At every call, :func:`prepare_feeds` validates every input (the preprocessed observations,
  the recurrent state, ``prev_actions`` inside the action space, ``prev_rewards``) and one
  batch size across them, and fills the defaults.

Every problem is a ``ValueError`` naming the field or input, what was found and what was
allowed. Nothing here imports torch or onnxruntime.

Examples:
    >>> import gymnasium as gym
    >>> spec = FeedSpec(size=2, state_shapes=[(3,)], state_initial=[np.zeros(3, np.float32)],
    ...                 action_space=gym.spaces.Discrete(2), n_prev_actions=1,
    ...                 prev_action_dtype=np.dtype(np.int64), prev_action_initial=0,
    ...                 n_prev_rewards=0)
    >>> sorted(prepare_feeds(spec, np.zeros((4, 2), np.float32)))
    ['obs', 'prev_actions', 'state_in_0']
    >>> prepare_feeds(spec, np.zeros((1, 2)), prev_actions=[[7]])
    Traceback (most recent call last):
    ...
    ValueError: prev_actions[0, 0]: 7 is outside Discrete(2) (allowed: integers 0 to 1)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any, cast

import gymnasium as gym
import numpy as np

from rlblocks.spaces import Simplex, space_path_items

__all__ = [
    "FeedSpec",
    "TensorSpec",
    "check_artifact",
    "check_structure",
    "dist_inputs_width",
    "prepare_feeds",
]

Dim = int | str | None


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of an artifact's graph.

    Attributes:
        name: The graph's name for it; None where the graph names none (``torch.export``).
        shape: Each dimension an int, or a str / None for a symbolic one.
        dtype: A numpy dtype name (``"float32"``, ``"int64"``, ...).
    """

    name: str | None
    shape: tuple[Dim, ...]
    dtype: str


# --- the sidecar's structure ---------------------------------------------------------------
def _get(data: Any, key: str, field: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(data, Mapping) or key not in data:
        raise ValueError(f"{where}: the export sidecar has no field {field!r}")
    value = data[key]
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        raise ValueError(
            f"{where}: the export sidecar's field {field!r} is "
            f"{type(value).__name__} {value!r}; expected "
            f"{' or '.join(k.__name__ for k in kinds)}"
        )
    return value


def _tensor_entry(data: Any, field: str, where: str) -> None:
    _get(data, "name", f"{field}.name", str, where)
    _get(data, "dtype", f"{field}.dtype", str, where)
    shape = _get(data, "shape", f"{field}.shape", list, where)
    if (
        not shape
        or shape[0] != "B"
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape[1:])
    ):
        raise ValueError(
            f"{where}: the export sidecar's field {field + '.shape'!r} is "
            f"{shape!r}; expected 'B' (the batch) followed by sizes >= 0"
        )
    try:
        np.dtype(data["dtype"])
    except TypeError:
        raise ValueError(
            f"{where}: the export sidecar's field {field + '.dtype'!r} is "
            f"{data['dtype']!r}, not a numpy dtype name"
        ) from None


def check_structure(sidecar: Mapping[str, Any], where: str) -> None:
    """Every field a runtime reads is present with the right type (no ``KeyError`` later).

    Raises:
        ValueError: Naming the missing or mistyped field.
    """
    obs = _get(sidecar, "observation", "observation", dict, where)
    _get(obs, "space", "observation.space", dict, where)
    _get(obs, "size", "observation.size", int, where)
    _get(obs, "preprocessor_options", "observation.preprocessor_options", dict, where)
    _get(sidecar, "action_space", "action_space", dict, where)
    for key in ("input_names", "output_names"):
        names = _get(sidecar, key, key, list, where)
        if not all(isinstance(n, str) for n in names):
            raise ValueError(
                f"{where}: the export sidecar's field {key!r} is {names!r}; "
                "expected a list of names"
            )
    for i, entry in enumerate(_get(sidecar, "inputs", "inputs", list, where)):
        _tensor_entry(entry, f"inputs[{i}]", where)
    outputs = _get(sidecar, "outputs", "outputs", dict, where)
    for i, entry in enumerate(_get(outputs, "actions", "outputs.actions", list, where)):
        _tensor_entry(entry, f"outputs.actions[{i}]", where)
        _get(entry, "path", f"outputs.actions[{i}].path", list, where)
    for key in ("dist_inputs", "value"):
        _tensor_entry(_get(outputs, key, f"outputs.{key}", dict, where), f"outputs.{key}", where)
    for i, entry in enumerate(_get(outputs, "state", "outputs.state", list, where)):
        _tensor_entry(entry, f"outputs.state[{i}]", where)


# --- the sidecar against itself and against the graph -------------------------------------
def _leaf_width(space: gym.Space) -> int | None:
    """Model outputs of the default distribution of one leaf (the catalog's table)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, gym.spaces.Box):
        if np.issubdtype(space.dtype, np.integer):
            return prod(space.shape) * int(np.max(space.high) - np.min(space.low) + 1)
        return 2 * prod(space.shape)
    if isinstance(space, Simplex):
        return prod(space.shape or ())
    return None


def dist_inputs_width(space: gym.Space, dist_class: str | None) -> int | None:
    """How wide ``dist_inputs`` must be for ``dist_class`` over ``space``; None where the
    width is not fixed by the catalog's table (a custom or masked distribution).

    Examples:
        >>> dist_inputs_width(gym.spaces.Box(-1, 1, (3,)), "DiagGaussian")
        6
        >>> dist_inputs_width(gym.spaces.Tuple((gym.spaces.Discrete(3),
        ...                                     gym.spaces.MultiDiscrete([2, 2]))),
        ...                   "MultiActionDistribution")
        7
        >>> dist_inputs_width(gym.spaces.Discrete(3), "MyCustomDist") is None
        True
    """
    leaf_kinds: dict[str, type | tuple[type, ...]] = {
        "Categorical": gym.spaces.Discrete,
        "MultiCategorical": (gym.spaces.MultiDiscrete, gym.spaces.Box),
        "DiagGaussian": gym.spaces.Box,
        "SquashedGaussian": gym.spaces.Box,
        "Beta": gym.spaces.Box,
        "Deterministic": gym.spaces.Box,
        "Dirichlet": Simplex,
    }
    if dist_class == "MultiActionDistribution":
        if not isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
            return None
        widths = [_leaf_width(leaf) for _, leaf in space_path_items(space)]
        return None if any(w is None for w in widths) else sum(w for w in widths if w)
    kinds = leaf_kinds.get(str(dist_class))
    if kinds is None or not isinstance(space, kinds):
        return None
    if dist_class == "Deterministic" and isinstance(space, gym.spaces.Box):
        return prod(space.shape)
    if (
        dist_class == "MultiCategorical"
        and isinstance(space, gym.spaces.Box)
        and not np.issubdtype(space.dtype, np.integer)
    ):
        return None
    return _leaf_width(space)


def _expected_specs(
    sidecar: Mapping[str, Any], action_space: gym.Space
) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The inputs and outputs the action space, observation size and state imply."""
    inputs = {i["name"]: i for i in sidecar["inputs"]}
    n_state = sum(1 for name in inputs if name.startswith("state_in_"))
    ins = [TensorSpec("obs", ("B", int(sidecar["observation"]["size"])), "float32")]
    for i in range(n_state):
        entry = inputs.get(f"state_in_{i}")
        shape = tuple(entry["shape"]) if entry is not None else ("B",)
        ins.append(TensorSpec(f"state_in_{i}", shape, "float32"))
    if "prev_actions" in inputs:
        n = inputs["prev_actions"]["shape"][1:2] or [1]
        dtype = (
            "int64"
            if isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))
            else "float32"
        )
        ins.append(TensorSpec("prev_actions", ("B", *n, *(action_space.shape or ())), dtype))
    if "prev_rewards" in inputs:
        n = inputs["prev_rewards"]["shape"][1:2] or [1]
        ins.append(TensorSpec("prev_rewards", ("B", *n), "float32"))
    outs = [
        TensorSpec(
            ".".join(["action", *map(str, path)]),
            ("B", *(leaf.shape or ())),
            np.dtype(leaf.dtype).name,
        )
        for path, leaf in space_path_items(action_space)
    ]
    dist = sidecar["outputs"]["dist_inputs"]
    width = dist_inputs_width(action_space, dist.get("dist_class"))
    dist_shape = tuple(dist["shape"]) if width is None else ("B", width)
    outs.append(TensorSpec("dist_inputs", dist_shape, "float32"))
    outs.append(TensorSpec("value", ("B",), "float32"))
    outs += [
        TensorSpec(f"state_out_{i}", spec.shape, "float32")
        for i, spec in enumerate(ins[1 : 1 + n_state])
    ]
    return ins, outs


def _sidecar_specs(sidecar: Mapping[str, Any]) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The inputs and outputs as the sidecar's ``inputs`` / ``outputs`` fields list them."""
    ins = [TensorSpec(i["name"], tuple(i["shape"]), i["dtype"]) for i in sidecar["inputs"]]
    out = sidecar["outputs"]
    entries = [*out["actions"], out["dist_inputs"], out["value"], *out["state"]]
    return ins, [TensorSpec(o["name"], tuple(o["shape"]), o["dtype"]) for o in entries]


def _fields(specs: list[TensorSpec], kind: str) -> list[str]:
    if kind == "inputs":
        return [f"inputs[{i}]" for i in range(len(specs))]
    n_actions = sum(1 for s in specs if s.name is not None and s.name.startswith("action"))
    names = [f"outputs.actions[{i}]" for i in range(n_actions)] + [
        "outputs.dist_inputs",
        "outputs.value",
    ]
    return names + [f"outputs.state[{i}]" for i in range(len(specs) - len(names))]


def _shape_text(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join(repr(d) if isinstance(d, str) else str(d) for d in shape) + "]"


def _same_shape(sidecar_shape: Sequence[Dim], graph_shape: Sequence[Dim]) -> bool:
    if len(sidecar_shape) != len(graph_shape):
        return False
    for want, got in zip(sidecar_shape, graph_shape, strict=True):
        symbolic = got is None or isinstance(got, str)
        if want == "B" and not symbolic:
            return False
        if want != "B" and (symbolic or int(got) != int(want)):  # type: ignore[arg-type]
            return False
    return True


def check_artifact(
    sidecar: Mapping[str, Any],
    action_space: gym.Space,
    graph_inputs: Sequence[TensorSpec],
    graph_outputs: Sequence[TensorSpec],
    where: str,
) -> None:
    """Compares the sidecar with itself and with the graph's inputs and outputs.

    The graph's names are compared where it has them (ONNX); its order, shapes (a symbolic
    dimension where the sidecar says ``"B"``) and dtypes always. The sidecar's names must be
    the ones its action space and state imply, each action leaf in the leaf space's dtype
    and shape, and ``dist_inputs`` as wide as its distribution needs.

    Raises:
        ValueError: ``"<where>: <field>: the sidecar says X, the graph has Y"`` (or what the
            action space needs); also an initial state or initial previous action that does
            not fit its input.
    """
    names = {"inputs": list(sidecar["input_names"]), "outputs": list(sidecar["output_names"])}
    graph = {"inputs": list(graph_inputs), "outputs": list(graph_outputs)}
    listed_in, listed_out = _sidecar_specs(sidecar)
    listed = {"inputs": listed_in, "outputs": listed_out}
    want_in, want_out = _expected_specs(sidecar, action_space)
    wanted = {"inputs": want_in, "outputs": want_out}
    for kind in ("inputs", "outputs"):
        field = f"{kind[:-1]}_names"
        graph_names = [s.name for s in graph[kind]]
        named = all(n is not None for n in graph_names)
        if len(graph_names) != len(names[kind]):
            raise ValueError(
                f"{where}: {field}: the sidecar says {names[kind]} "
                f"({len(names[kind])} {kind}), the graph has {len(graph_names)} "
                f"{kind}" + (f" {graph_names}" if named else "")
            )
        if named and graph_names != names[kind]:
            raise ValueError(
                f"{where}: {field}: the sidecar says {names[kind]}, the graph has {graph_names}"
            )
        listed_names = [s.name for s in listed[kind]]
        if listed_names != names[kind]:
            raise ValueError(
                f"{where}: {field}: the sidecar says {names[kind]}, its field "
                f"{kind!r} lists {listed_names}"
            )
        wanted_names = [s.name for s in wanted[kind]]
        if wanted_names != names[kind]:
            raise ValueError(
                f"{where}: {field}: the sidecar says {names[kind]}, its action "
                f"space {action_space} and state need {wanted_names}"
            )
    for kind in ("inputs", "outputs"):
        for field, side, want, got in zip(
            _fields(listed[kind], kind), listed[kind], wanted[kind], graph[kind], strict=True
        ):
            label = f"{kind[:-1]} {side.name!r} ({field})"
            if side.dtype != got.dtype:
                raise ValueError(
                    f"{where}: {label} dtype: the sidecar says {side.dtype}, the "
                    f"graph has {got.dtype}"
                )
            if not _same_shape(side.shape, got.shape):
                raise ValueError(
                    f"{where}: {label} shape: the sidecar says "
                    f"{_shape_text(side.shape)}, the graph has "
                    f"{_shape_text(got.shape)}"
                )
            if side.dtype != want.dtype or tuple(side.shape) != tuple(want.shape):
                if side.name == "obs":
                    source = f"observation.size: the sidecar says {want.shape[1]}"
                elif side.name in ("value", "prev_rewards"):
                    source = f"{field}: the sidecar says {side.dtype} {_shape_text(side.shape)}"
                else:
                    source = f"action_space: the sidecar says {action_space}"
                raise ValueError(
                    f"{where}: {source}, which needs {label} to be {want.dtype} "
                    f"{_shape_text(want.shape)}; the graph has {got.dtype} "
                    f"{_shape_text(got.shape)}"
                )
    for i, entry in enumerate(sidecar["inputs"]):
        if entry["name"].startswith("state_in_"):
            initial = np.shape(entry.get("initial"))
            if initial != tuple(entry["shape"][1:]):
                raise ValueError(
                    f"{where}: inputs[{i}].initial: the sidecar's initial state "
                    f"has shape {list(initial)}, its shape field says "
                    f"{_shape_text(entry['shape'])}"
                )
    spec = FeedSpec.from_sidecar(sidecar, action_space)
    if spec.n_prev_actions:
        try:
            first = np.broadcast_to(
                _numeric(spec.prev_action_initial, "initial"),
                (1, spec.n_prev_actions, *spec.action_shape),
            )
            _check_prev_actions(first, spec, 1)
        except ValueError as err:
            raise ValueError(
                f"{where}: the prev_actions input's initial: the sidecar says "
                f"{spec.prev_action_initial!r}, not an action of {action_space} "
                f"({err})"
            ) from None


# --- the inputs of a call -------------------------------------------------------------------
@dataclass(frozen=True)
class FeedSpec:
    """What an artifact takes, from its (checked) sidecar.

    Attributes:
        size: The width of the ``obs`` rows.
        state_shapes: Each state array's shape without the batch dimension.
        state_initial: The initial state, one array per state input.
        action_space: The action space (``prev_actions`` must lie in it).
        n_prev_actions, n_prev_rewards: How many previous actions / rewards the artifact
            reads (0: none).
        prev_action_dtype: ``prev_actions``' dtype (int64, or float32 for Box).
        prev_action_initial: The previous action before an episode's first step.
    """

    size: int
    state_shapes: list[tuple[int, ...]]
    state_initial: list[np.ndarray]
    action_space: gym.Space
    n_prev_actions: int
    prev_action_dtype: np.dtype
    prev_action_initial: Any
    n_prev_rewards: int

    @classmethod
    def from_sidecar(cls, sidecar: Mapping[str, Any], action_space: gym.Space) -> FeedSpec:
        inputs = {i["name"]: i for i in sidecar["inputs"]}
        states = [inputs[n] for n in sidecar["input_names"] if n.startswith("state_in_")]
        pa, pr = inputs.get("prev_actions"), inputs.get("prev_rewards")
        return cls(
            size=int(sidecar["observation"]["size"]),
            state_shapes=[tuple(int(d) for d in s["shape"][1:]) for s in states],
            state_initial=[np.asarray(s["initial"], np.float32) for s in states],
            action_space=action_space,
            n_prev_actions=int(pa["shape"][1]) if pa is not None else 0,
            prev_action_dtype=np.dtype(pa["dtype"] if pa is not None else np.float32),
            prev_action_initial=pa.get("initial", 0) if pa is not None else 0,
            n_prev_rewards=int(pr["shape"][1]) if pr is not None else 0,
        )

    @property
    def action_shape(self) -> tuple[int, ...]:
        return tuple(self.action_space.shape or ())


def _index(idx: Sequence[Any]) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def _numeric(value: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception as err:  # ragged lists and odd objects raise several types
        raise ValueError(f"{name}: cannot be read as an array ({err})") from None
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{name}: expected numbers (int or float), got dtype {arr.dtype}")
    return arr


def _shape(arr: np.ndarray, want: tuple[int, ...], name: str, what: str) -> None:
    if arr.shape != want:
        raise ValueError(f"{name}: shape {arr.shape}, expected {want} ({what})")


def _finite(arr: np.ndarray, name: str, what: str) -> None:
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        idx = tuple(np.argwhere(~np.isfinite(arr))[0])
        raise ValueError(f"{name}{_index(idx)}: {arr[idx]} is not finite ({what} must be finite)")


def _float32(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous float32 copy (or view); values beyond float32 become inf, which the
    caller then reports."""
    if arr.dtype == np.float32 and arr.flags.c_contiguous:
        return arr
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(arr, np.float32)


def _check_batch(arr: np.ndarray, b: int, name: str) -> None:
    if arr.ndim == 0 or arr.shape[0] != b:
        got = "a scalar" if arr.ndim == 0 else f"{arr.shape[0]} rows (shape {arr.shape})"
        raise ValueError(
            f"{name}: {got}, but obs has {b} rows: every input needs the same batch size"
        )


def _check_obs(x: Any, size: int) -> np.ndarray:
    arr = _numeric(x, "obs")
    if arr.ndim != 2 or arr.shape[1] != size:
        raise ValueError(
            f"obs: shape {arr.shape}, expected (B, {size}) (the preprocessed observations)"
        )
    out = _float32(arr)
    if out is not arr:
        _finite(arr, "obs", "the observations")
    _finite(out, "obs", "the observations (as float32)")
    return out


def _check_state(state: Any, spec: FeedSpec, b: int) -> list[np.ndarray]:
    n = len(spec.state_shapes)
    if state is None:
        return [np.repeat(s[None], b, axis=0) for s in spec.state_initial]
    if not isinstance(state, (list, tuple)):
        raise ValueError(
            f"state: expected a list of {n} arrays (or None), got {type(state).__name__}"
        )
    if len(state) != n:
        if n == 0:
            raise ValueError(
                f"state: the policy is not recurrent (pass None or []), got {len(state)} arrays"
            )
        raise ValueError(f"state: expected {n} arrays, got {len(state)}")
    out = []
    for i, (s, shape) in enumerate(zip(state, spec.state_shapes, strict=True)):
        name = f"state[{i}]"
        arr = _numeric(s, name)
        _check_batch(arr, b, name)
        _shape(arr, (b, *shape), name, f"batch {b} x the state shape {shape}")
        _finite(arr, name, "the state")
        arr = _float32(arr)
        _finite(arr, name, "the state (as float32)")
        out.append(arr)
    return out


def _integer_bounds(space: gym.Space, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        return np.asarray(start, np.int64), np.asarray(start + int(space.n) - 1, np.int64)
    md = cast(gym.spaces.MultiDiscrete, space)
    lo = np.asarray(md.start, np.int64)
    hi = lo + np.asarray(md.nvec, np.int64) - 1
    return np.broadcast_to(lo, shape), np.broadcast_to(hi, shape)


def _check_prev_actions(value: Any, spec: FeedSpec, b: int) -> np.ndarray:
    n, shape, space = spec.n_prev_actions, spec.action_shape, spec.action_space
    if value is None:
        initial = np.asarray(spec.prev_action_initial, spec.prev_action_dtype)
        return np.broadcast_to(initial, (b, n, *shape)).copy()
    name = "prev_actions"
    arr = _numeric(value, name)
    _check_batch(arr, b, name)
    if n == 1 and arr.shape == (b, *shape):
        arr = arr.reshape(b, 1, *shape)
    _shape(
        arr, (b, n, *shape), name, f"batch {b} x {n} previous actions x the action shape {shape}"
    )
    _finite(arr, name, "previous actions")
    if spec.prev_action_dtype.kind == "f":  # Box: any finite value (actions are not clipped)
        out = _float32(arr)
        _finite(out, name, "previous actions (as float32)")
        return out
    if arr.dtype.kind == "f":
        frac = arr != np.floor(arr)
        if frac.any():
            idx = tuple(np.argwhere(frac)[0])
            raise ValueError(
                f"{name}{_index(idx)}: {arr[idx]} is not an integer (actions of "
                f"{space} are integers)"
            )
    lo, hi = _integer_bounds(space, shape)
    bad = (arr < lo) | (arr > hi)
    if bad.any():
        idx = tuple(np.argwhere(bad)[0])
        comp = idx[2:]
        low, high = int(lo[comp]), int(hi[comp])
        which = f"component {_index(comp)} of " if comp else ""
        value_text = arr[idx].item()
        if isinstance(value_text, float) and value_text.is_integer():
            value_text = int(value_text)
        raise ValueError(
            f"{name}{_index(idx)}: {value_text} is outside {which}{space} "
            f"(allowed: integers {low} to {high})"
        )
    return np.ascontiguousarray(arr, spec.prev_action_dtype)


def _check_prev_rewards(value: Any, spec: FeedSpec, b: int) -> np.ndarray:
    n = spec.n_prev_rewards
    if value is None:
        return np.zeros((b, n), np.float32)
    name = "prev_rewards"
    arr = _numeric(value, name)
    _check_batch(arr, b, name)
    if n == 1 and arr.shape == (b,):
        arr = arr.reshape(b, 1)
    _shape(arr, (b, n), name, f"batch {b} x {n} previous rewards")
    _finite(arr, name, "previous rewards")
    out = _float32(arr)
    _finite(out, name, "previous rewards (as float32)")
    return out


def prepare_feeds(
    spec: FeedSpec, x: Any, state: Any = None, prev_actions: Any = None, prev_rewards: Any = None
) -> dict[str, np.ndarray]:
    """The artifact's inputs for one call, every one validated (None: the default).

    ``x`` is the preprocessed ``(B, size)`` batch; ``state`` a list of ``(B, *shape)`` arrays;
    ``prev_actions`` ``(B, n, *action_shape)`` inside the action space (``(B,
    *action_shape)`` when ``n == 1``); ``prev_rewards`` ``(B, n)`` (``(B,)`` when ``n == 1``).

    Raises:
        ValueError: Naming the input, the offending index and value, and what was allowed:
            a wrong shape or batch size, NaN / inf, a previous action outside the action
            space, or an input this artifact does not read.
    """
    obs = _check_obs(x, spec.size)
    b = int(obs.shape[0])
    feeds = {"obs": obs}
    for i, s in enumerate(_check_state(state, spec, b)):
        feeds[f"state_in_{i}"] = s
    if spec.n_prev_actions:
        feeds["prev_actions"] = _check_prev_actions(prev_actions, spec, b)
    elif prev_actions is not None:
        raise ValueError("prev_actions: this policy reads no previous actions (pass None)")
    if spec.n_prev_rewards:
        feeds["prev_rewards"] = _check_prev_rewards(prev_rewards, spec, b)
    elif prev_rewards is not None:
        raise ValueError("prev_rewards: this policy reads no previous rewards (pass None)")
    return feeds
