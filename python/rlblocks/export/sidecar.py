"""The JSON sidecar of an exported policy: how to feed the artifact without Python.

An artifact ``policy.onnx`` (or ``policy.pt2``) comes with ``policy.onnx.json``. It holds
the observation space (as JSON, so that any language can rebuild it), the flat layout the
preprocessor writes (:meth:`rlblocks.layout.Layout.describe`: each leaf's path, offset,
size and kind), the inputs (state shapes,
previous actions and rewards) and the outputs (one per action leaf, in the action space's
dtype, then ``dist_inputs``, ``value`` and the next state). For an ``action_mask``
observation (RLlib's convention, :mod:`rlblocks.masks`), ``observation.action_mask`` gives
the mask's ``offset`` and ``size`` in the ``obs`` row and the ``segments`` (``[start, end)``
per categorical action component, each needing an entry > 0). Nothing here imports torch.

Examples:
    >>> import gymnasium as gym
    >>> space = gym.spaces.Dict({"a": gym.spaces.Discrete(3, start=1),
    ...                          "b": gym.spaces.Box(-1, 1, (2,))})
    >>> space_from_json(space_to_json(space)) == space
    True
    >>> from rlblocks.preprocessors import get_preprocessor
    >>> [(leaf["path"], leaf["offset"], leaf["kind"])
    ...  for leaf in get_preprocessor(space)(space).layout.describe()]
    [('obs["a"]', 0, 'one_hot'), ('obs["b"]', 3, 'box')]
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from rlblocks.layout import LAYOUT_OPTIONS, is_string_space, layout
from rlblocks.preprocessors import Preprocessor, get_preprocessor
from rlblocks.spaces import Repeated, Simplex

if TYPE_CHECKING:
    from rlblocks.multiagent.union import UnionSpec

__all__ = [
    "FORMAT",
    "PREPROCESSOR_OPTIONS",
    "TURN_BASED_SIDECAR",
    "make_preprocessor",
    "multiagent_sidecar",
    "read_sidecar",
    "sidecar_path",
    "space_from_json",
    "space_to_json",
    "write_sidecar",
]

#: The ``format`` entry of every sidecar this version writes.
FORMAT = "rlblocks.export/1"

#: The model-config keys a preprocessor reads (image size and scaling of raw Atari frames,
#: the bounds and encodings of Sequence, Graph and string leaves).
PREPROCESSOR_OPTIONS = tuple(LAYOUT_OPTIONS)


def sidecar_path(artifact: str | Path) -> Path:
    """``policy.onnx`` -> ``policy.onnx.json``."""
    p = Path(artifact)
    return p.with_name(p.name + ".json")


def _bound(values: np.ndarray) -> Any:
    """One number when all entries agree (the usual case), else the nested list."""
    flat = np.asarray(values).ravel()
    if flat.size and (flat == flat[0]).all():
        return _number(flat[0])
    return np.vectorize(_number, otypes=[object])(values).tolist()


def _number(x: Any) -> Any:
    v = x.item() if isinstance(x, np.generic) else x
    if isinstance(v, float) and not np.isfinite(v):
        return "inf" if v > 0 else "-inf"
    return v


def space_to_json(space: gym.Space, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A JSON-able description of a (nested) space; :func:`space_from_json` inverts it.

    A space of strings that is not gymnasium ``Text`` (MiniGrid's ``MissionSpace``) is
    written as the ``Text`` space its layout encodes it as (``options``: the model config
    that sets ``text_max_length`` and ``text_charset``).

    Raises:
        ValueError: A space type without a JSON form.
    """
    if is_string_space(space):
        node = layout(space, options).root
        return {
            "type": "Text",
            "max_length": node.max_len,
            "min_length": node.min_len,
            "charset": "".join(node.charset),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": np.asarray(space.nvec).tolist(),
            "start": np.asarray(space.start).tolist(),
            "dtype": str(space.dtype),
        }
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, Simplex):
        return {"type": "Simplex", "shape": list(space.shape or ()), "dtype": str(space.dtype)}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(s, options) for s in space.spaces]}
    if isinstance(space, gym.spaces.Dict):
        return {
            "type": "Dict",
            "keys": list(space.spaces),
            "spaces": [space_to_json(s, options) for s in space.spaces.values()],
        }
    if isinstance(space, Repeated):
        return {
            "type": "Repeated",
            "child": space_to_json(space.child_space, options),
            "max_len": int(space.max_len),
        }
    if isinstance(space, gym.spaces.Sequence):
        return {
            "type": "Sequence",
            "feature": space_to_json(space.feature_space, options),
            "stack": bool(space.stack),
        }
    if isinstance(space, gym.spaces.Graph):
        edge = space.edge_space
        return {
            "type": "Graph",
            "node": space_to_json(space.node_space, options),
            "edge": None if edge is None else space_to_json(edge, options),
        }
    if isinstance(space, gym.spaces.OneOf):
        return {"type": "OneOf", "spaces": [space_to_json(s, options) for s in space.spaces]}
    raise ValueError(f"cannot describe {space} in the export sidecar")


def _bound_array(value: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    arr = np.asarray(value, dtype=object)
    arr = np.vectorize(lambda v: float(v) if isinstance(v, str) else v, otypes=[object])(arr)
    return np.broadcast_to(arr.astype(np.float64), shape).astype(dtype)


def space_from_json(data: Mapping[str, Any]) -> gym.Space:
    """Rebuilds a space from :func:`space_to_json`'s description.

    Raises:
        ValueError: An unknown ``type``.
    """
    kind = data.get("type")
    if kind == "Discrete":
        return gym.spaces.Discrete(int(data["n"]), start=int(data["start"]))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(
            np.asarray(data["nvec"]), dtype=np.dtype(data["dtype"]), start=np.asarray(data["start"])
        )
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(data["n"])
    if kind == "Box":
        shape = tuple(int(d) for d in data["shape"])
        dtype = np.dtype(data["dtype"])
        return gym.spaces.Box(
            _bound_array(data["low"], shape, dtype),
            _bound_array(data["high"], shape, dtype),
            shape,
            dtype,
        )
    if kind == "Simplex":
        return Simplex(tuple(data["shape"]), dtype=np.dtype(data["dtype"]))
    if kind == "Tuple":
        return gym.spaces.Tuple(tuple(space_from_json(s) for s in data["spaces"]))
    if kind == "Dict":
        return gym.spaces.Dict(
            {k: space_from_json(s) for k, s in zip(data["keys"], data["spaces"], strict=True)}
        )
    if kind == "Repeated":
        return Repeated(space_from_json(data["child"]), int(data["max_len"]))
    if kind == "Sequence":
        return gym.spaces.Sequence(space_from_json(data["feature"]), stack=bool(data["stack"]))
    if kind == "Graph":
        edge = data["edge"]
        return gym.spaces.Graph(
            space_from_json(data["node"]), None if edge is None else space_from_json(edge)
        )
    if kind == "OneOf":
        return gym.spaces.OneOf(tuple(space_from_json(s) for s in data["spaces"]))
    if kind == "Text":
        return gym.spaces.Text(
            int(data["max_length"]), min_length=int(data["min_length"]), charset=data["charset"]
        )
    raise ValueError(f"export sidecar: unknown space type {kind!r}")


def make_preprocessor(sidecar: Mapping[str, Any]) -> Preprocessor:
    """The C++ preprocessor that writes the artifact's ``obs`` input (from the sidecar)."""
    obs = sidecar["observation"]
    space = space_from_json(obs["space"])
    prep = get_preprocessor(space)(space, dict(obs["preprocessor_options"]))
    if prep.size != int(obs["size"]):
        raise ValueError(
            f"export sidecar: the preprocessor of {space} writes {prep.size} "
            f"floats, the artifact expects {obs['size']}"
        )
    return prep


def write_sidecar(artifact: str | Path, data: Mapping[str, Any]) -> Path:
    """Writes ``data`` (with ``format``) next to ``artifact``; returns the sidecar's path."""
    path = sidecar_path(artifact)
    path.write_text(json.dumps({"format": FORMAT, **data}, indent=1) + "\n")
    return path


def read_sidecar(artifact: str | Path) -> dict[str, Any]:
    """Reads the sidecar of ``artifact``.

    Raises:
        ValueError: No sidecar next to the artifact, unreadable, or another format.
    """
    path = sidecar_path(artifact)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(
            f"{str(path)!r} is missing: an exported policy needs the JSON "
            "sidecar that `rlblocks export` writes next to it"
        ) from None
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read the export sidecar {str(path)!r}: {err}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is not an rlblocks export sidecar ({FORMAT})")
    return data


#: The ``turn_based`` note of a turn-based game's ``multiagent`` entry: the policy plays the
#: seat to move (PettingZoo's ``agent_selection``; any seat of its ``agents``), and reads
#: PettingZoo classic's observation dict with its keys renamed as ``observation_keys`` says
#: (:func:`rlblocks.masks.mask_form`).
TURN_BASED_SIDECAR: dict[str, Any] = {
    "acts_for": "agent_selection",
    "observation_keys": {"observation": "observations", "action_mask": "action_mask"},
}


def multiagent_sidecar(policy_id: Any, spec: UnionSpec) -> dict[str, Any]:
    """The sidecar's ``multiagent`` entry for one policy: its id, and its agents with their
    own spaces from its union ``spec``.

    Examples:
        >>> from gymnasium.spaces import Box, Discrete
        >>> from rlblocks.multiagent import UnionSpec
        >>> spec = UnionSpec.build({"a": Box(-1, 1, (2,))}, {"a": Discrete(2)})
        >>> entry = multiagent_sidecar("shared", spec)
        >>> entry["policy_id"], entry["agents"], entry["agent_action_spaces"]["a"]["type"]
        ('shared', ['a'], 'Discrete')
    """
    return {
        "policy_id": str(policy_id),
        "agents": [str(a) for a in spec.agents],
        "agent_id_one_hot": spec.agent_id_one_hot,
        "agent_observation_spaces": {str(a): space_to_json(s) for a, s in spec.obs_spaces.items()},
        "agent_action_spaces": {str(a): space_to_json(s) for a, s in spec.action_spaces.items()},
    }
