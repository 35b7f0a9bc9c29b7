"""``ExportedPolicy``: acting with an exported artifact from raw gymnasium observations.

The observations go through rlblocks' C++ preprocessor (batched, validated: bad input is
the preprocessor's ``ValueError``), the result is fed to the artifact with the recurrent
state (and previous actions / rewards where the model reads them), and the actions come
back in the action space's structure. Every other input (state, previous actions and
rewards) is validated by :func:`rlblocks.export.validate.prepare_feeds`, and at load the
sidecar is compared with the artifact's graph (:func:`rlblocks.export.validate.check_artifact`),
so a mismatch is a ``ValueError`` naming the field, never a wrong action. An empty batch
gives empty outputs without running the artifact. Subclasses run the artifact: :class:`OnnxPolicy`
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
from rlblocks.export.validate import (
    FeedSpec,
    TensorSpec,
    check_artifact,
    check_structure,
    prepare_feeds,
)
from rlblocks.nest import tree_from_paths, tree_index

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
        ValueError: A missing or foreign sidecar, or an artifact that does not match it
            (subclasses compare the graph with the sidecar through :meth:`_check_graph`).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"exported policy {str(self.path)!r} does not exist")
        self.sidecar = read_sidecar(self.path)
        check_structure(self.sidecar, str(self.path))
        spaces = {}
        for field, data in (
            ("observation.space", self.sidecar["observation"]["space"]),
            ("action_space", self.sidecar["action_space"]),
        ):
            try:
                spaces[field] = space_from_json(data)
            except (KeyError, TypeError, IndexError, AssertionError, ValueError) as err:
                # a description missing parts, or values gymnasium refuses
                text = repr(data) if len(repr(data)) <= 200 else repr(data)[:197] + "..."
                raise ValueError(
                    f"{str(self.path)!r}: the export sidecar's {field} {text} is "
                    f"malformed ({type(err).__name__}: {err})"
                ) from None
        self.action_space = spaces["action_space"]
        self.preprocessor = make_preprocessor(self.sidecar)
        self.size = int(self.sidecar["observation"]["size"])
        self.input_names: list[str] = list(self.sidecar["input_names"])
        self.output_names: list[str] = list(self.sidecar["output_names"])
        self._leaves = self.sidecar["outputs"]["actions"]
        self._n_actions = len(self._leaves)
        self.clip_actions = bool(self.sidecar.get("clip_actions", False))
        # filled by _check_graph, once the sidecar is known to agree with itself
        self._spec: FeedSpec | None = None
        self._initial: list[np.ndarray] = []
        self.recurrent = False
        self._empty: dict[str, tuple[tuple[int, ...], np.dtype]] = {}

    # --- backends --------------------------------------------------------------------------
    def _check_graph(self, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
        """Compares the loaded graph's inputs and outputs with the sidecar (subclasses call
        it once the artifact is loaded); then the inputs of each call can be validated.

        Raises:
            ValueError: A field where the sidecar and the graph (or the action space)
                disagree, naming both.
        """
        check_artifact(self.sidecar, self.action_space, inputs, outputs, str(self.path))
        self._spec = FeedSpec.from_sidecar(self.sidecar, self.action_space)
        self._initial = list(self._spec.state_initial)
        self.recurrent = bool(self._initial)
        out = self.sidecar["outputs"]
        for entry in [*out["actions"], out["dist_inputs"], out["value"], *out["state"]]:
            self._empty[entry["name"]] = (
                tuple(int(d) for d in entry["shape"][1:]),
                np.dtype(entry["dtype"]),
            )

    @property
    def spec(self) -> FeedSpec:
        """What the artifact takes (after the graph was checked against the sidecar)."""
        if self._spec is None:
            raise RuntimeError(
                f"{str(self.path)!r}: the artifact's graph was not checked "
                "against its sidecar (a subclass must call _check_graph)"
            )
        return self._spec

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
        spec = self.spec
        pa = pr = None
        if spec.n_prev_actions:
            initial = np.asarray(spec.prev_action_initial, spec.prev_action_dtype)
            pa = np.broadcast_to(
                initial, (batch_size, spec.n_prev_actions, *spec.action_shape)
            ).copy()
        if spec.n_prev_rewards:
            pr = np.zeros((batch_size, spec.n_prev_rewards), np.float32)
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
            raise ValueError(
                f"obs[{row}]: NaN or inf in the observation (the exported "
                "policy needs finite inputs)"
            )
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
        :meth:`initial_prev`. An empty batch (``B == 0``) gives empty outputs of the right
        shapes and dtypes without running the artifact.

        Raises:
            ValueError: An input of the wrong shape, batch size or dtype, NaN / inf, or a
                previous action outside the action space (see
                :func:`rlblocks.export.validate.prepare_feeds`).
        """
        feeds = prepare_feeds(self.spec, x, state, prev_actions, prev_rewards)
        self._check_mask(feeds["obs"])
        b = int(feeds["obs"].shape[0])
        if b == 0:
            return {
                name: np.zeros((0, *self._empty[name][0]), self._empty[name][1])
                for name in self.output_names
            }
        return dict(zip(self.output_names, self._run(feeds), strict=True))

    def _check_mask(self, x: np.ndarray) -> None:
        """Raises for a row whose ``action_mask`` (sidecar ``observation.action_mask``: its
        columns in ``obs``) leaves an action component no legal action; the graph would
        otherwise pick among masked actions."""
        info = self.sidecar["observation"].get("action_mask")
        if info is None or x.shape[0] == 0:
            return
        offset = int(info["offset"])
        legal = x.reshape(x.shape[0], -1)[:, offset : offset + int(info["size"])] > 0
        for start, end in info["segments"]:
            empty = ~legal[:, int(start) : int(end)].any(axis=1)
            if empty.any():
                raise ValueError(
                    f"action_mask row {int(np.flatnonzero(empty)[0])} leaves no legal action "
                    f"(mask entries {start}:{end} are all <= 0)"
                )

    def _structure(self, flat: list[np.ndarray]) -> Any:
        """Action leaves -> the action space's (batched) structure."""
        return tree_from_paths(
            [(leaf["path"], a) for leaf, a in zip(self._leaves, flat, strict=True)]
        )

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
            prev_actions: ``[B, n, *action_shape]``, inside the action space (None: as at
                an episode start; ``[B, *action_shape]`` also when ``n == 1``).
            prev_rewards: ``[B, n]``, finite (None: zeros; ``[B]`` also when ``n == 1``).

        Returns:
            ``(actions, state_out)``: numpy actions in the action space's batched structure
            and dtype, and the next state (empty for feed-forward models). An empty batch
            gives empty actions and state (``(0, ...)``).

        Raises:
            ValueError: A bad observation (the preprocessor's error), or a bad state,
                previous action or reward, naming the input, index and value.
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
        return tree_index(actions, 0), [s[0] for s in state_out]
