"""``ExportedPolicy``: acting with an exported artifact from raw gymnasium observations.

The observations go through rlblocks' C++ preprocessor (batched, validated: bad input is
the preprocessor's ``ValueError``), the result is fed to the artifact with the recurrent
state (and previous actions / rewards where the model reads them), and the actions come
back in the action space's structure. Subclasses run the artifact: :class:`OnnxPolicy`
(onnxruntime, no torch) and :class:`TorchExportPolicy` (``torch.export.load``). This module
imports neither torch nor onnxruntime.

Examples:
    >>> policy = OnnxPolicy("policy.onnx")                      # doctest: +SKIP
    >>> action, state = policy.compute_single_action(obs)       # doctest: +SKIP
    >>> actions, state = policy.compute_actions([obs] * 8, state=None)  # doctest: +SKIP
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np

from rlblocks.export.sidecar import make_preprocessor, read_sidecar, space_from_json

__all__ = ["ExportedPolicy"]


class ExportedPolicy(ABC):
    """Base class: preprocessing, state and action structure around an exported artifact.

    Args:
        path: The artifact (its sidecar ``path + ".json"`` must lie next to it).

    Attributes:
        sidecar: The sidecar's content (see :mod:`rlblocks.export.sidecar`).
        preprocessor: The C++ preprocessor writing the ``obs`` input.
        action_space: The action space.
        recurrent: Whether the artifact takes and returns state.

    Raises:
        ValueError: A missing or foreign sidecar, or an artifact that does not match it.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"exported policy {str(self.path)!r} does not exist")
        self.sidecar = read_sidecar(self.path)
        self.preprocessor = make_preprocessor(self.sidecar)
        self.size = int(self.sidecar["observation"]["size"])
        self.action_space = space_from_json(self.sidecar["action_space"])
        self.input_names: list[str] = list(self.sidecar["input_names"])
        self.output_names: list[str] = list(self.sidecar["output_names"])
        inputs = {i["name"]: i for i in self.sidecar["inputs"]}
        self._initial = [np.asarray(inputs[n]["initial"], np.float32)
                         for n in self.input_names if n.startswith("state_in_")]
        self.recurrent = bool(self._initial)
        self._prev_actions = inputs.get("prev_actions")
        self._prev_rewards = inputs.get("prev_rewards")
        self._leaves = self.sidecar["outputs"]["actions"]
        self._n_actions = len(self._leaves)
        self.clip_actions = bool(self.sidecar.get("clip_actions", False))

    # --- backends --------------------------------------------------------------------------
    @abstractmethod
    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The artifact's outputs (``self.output_names`` order) for ``feeds``."""

    # --- state -----------------------------------------------------------------------------
    def initial_state(self, batch_size: int = 1) -> list[np.ndarray]:
        """The model's initial state for ``batch_size`` rows (``[B, ...]`` float32 each)."""
        return [np.repeat(s[None], batch_size, axis=0) for s in self._initial]

    def initial_prev(self, batch_size: int = 1) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``prev_actions`` / ``prev_rewards`` before an episode's first step (None where the
        model reads none): the action space's lowest action (its ``start``; 0.0 for Box)
        and 0.0."""
        pa = pr = None
        if self._prev_actions is not None:
            shape = self._prev_actions["shape"][1:]
            initial = np.asarray(self._prev_actions.get("initial", 0),
                                 np.dtype(self._prev_actions["dtype"]))
            pa = np.broadcast_to(initial, (batch_size, *shape)).copy()
        if self._prev_rewards is not None:
            pr = np.zeros((batch_size, *self._prev_rewards["shape"][1:]), np.float32)
        return pa, pr

    # --- acting ----------------------------------------------------------------------------
    def preprocess(self, obs: Any) -> np.ndarray:
        """Raw observations (a list, or a batched structure) -> float32 ``(B, size)``.

        Raises:
            ValueError: The preprocessor's error (wrong shape, wrong keys, an index out of
                range or NaN), or a NaN / inf in a Box leaf.
        """
        x = self.preprocessor.transform_batch(obs)
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(x.shape[0], self.size)
        if not np.isfinite(x).all():
            row = int(np.nonzero(~np.isfinite(x).all(axis=1))[0][0])
            raise ValueError(f"obs[{row}]: NaN or inf in the observation (the exported "
                             "policy needs finite inputs)")
        return x

    def forward(
        self,
        x: np.ndarray,
        state: list[Any] | None = None,
        prev_actions: Any = None,
        prev_rewards: Any = None,
    ) -> dict[str, np.ndarray]:
        """Every output of the artifact for a preprocessed batch ``x`` ``(B, size)``.

        ``state`` defaults to the initial state, ``prev_actions`` / ``prev_rewards`` to
        :meth:`initial_prev`.
        """
        b = int(x.shape[0])
        feeds: dict[str, np.ndarray] = {"obs": np.asarray(x, np.float32)}
        if self.recurrent:
            state = self.initial_state(b) if state is None else state
            if len(state) != len(self._initial):
                raise ValueError(f"state: expected {len(self._initial)} arrays, got "
                                 f"{len(state)}")
            for i, s in enumerate(state):
                feeds[f"state_in_{i}"] = np.ascontiguousarray(s, np.float32)
        pa0, pr0 = self.initial_prev(b)
        if pa0 is not None:
            feeds["prev_actions"] = pa0 if prev_actions is None else np.ascontiguousarray(
                prev_actions, pa0.dtype)
        if pr0 is not None:
            feeds["prev_rewards"] = pr0 if prev_rewards is None else np.ascontiguousarray(
                prev_rewards, np.float32)
        return dict(zip(self.output_names, self._run(feeds), strict=True))

    def _structure(self, flat: list[np.ndarray]) -> Any:
        """Action leaves -> the action space's (batched) structure."""
        if len(self._leaves) == 1 and not self._leaves[0]["path"]:
            return flat[0]
        return _unflatten(self.action_space, iter(flat))

    def compute_actions(
        self,
        obs: Any,
        state: list[Any] | None = None,
        prev_actions: Any = None,
        prev_rewards: Any = None,
    ) -> tuple[Any, list[np.ndarray]]:
        """Deterministic actions for a batch of raw observations.

        Args:
            obs: A list of observations or a batched structure (leading batch dim).
            state: The state returned by the previous call (None: the initial state).
            prev_actions: ``[B, n, *action_shape]`` (None: as at an episode start).
            prev_rewards: ``[B, n]`` (None: zeros).

        Returns:
            ``(actions, state_out)``: numpy actions in the action space's batched structure
            and dtype, and the next state (empty for feed-forward models).
        """
        out = self.forward(self.preprocess(obs), state, prev_actions, prev_rewards)
        flat = [out[name] for name in self.output_names[: self._n_actions]]
        state_out = [out[f"state_out_{i}"] for i in range(len(self._initial))]
        return self._structure(flat), state_out

    def compute_single_action(
        self, obs: Any, state: list[Any] | None = None
    ) -> tuple[Any, list[np.ndarray]]:
        """One observation -> ``(action, state_out)`` (state arrays without a batch dim)."""
        batched = None if state is None else [np.asarray(s)[None] for s in state]
        actions, state_out = self.compute_actions([obs], batched)
        return _map(lambda a: a[0], actions), [s[0] for s in state_out]


def _unflatten(space: Any, leaves: Any) -> Any:
    import gymnasium as gym

    if isinstance(space, gym.spaces.Tuple):
        return tuple(_unflatten(s, leaves) for s in space.spaces)
    if isinstance(space, gym.spaces.Dict):
        return {k: _unflatten(s, leaves) for k, s in space.spaces.items()}
    return next(leaves)


def _map(fn: Any, tree: Any) -> Any:
    if isinstance(tree, tuple):
        return tuple(_map(fn, t) for t in tree)
    if isinstance(tree, dict):
        return {k: _map(fn, v) for k, v in tree.items()}
    return fn(tree)
