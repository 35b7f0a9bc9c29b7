"""Exporting the policy of a ``rlblocks train --backend rllib`` run: the same ONNX /
``torch.export`` artifact and JSON sidecar as a native run's (:mod:`rlblocks.export`), from
the newest checkpoint's RLlib module, without starting Ray.

The artifact holds what the run's env runner does between an observation and the env:

* the C++ flattening of the env-to-module connector (the sidecar's preprocessor: an
  :class:`~rlblocks.export.OnnxPolicy` feeds raw observations) and the saved state of its
  ``MeanStdFilter`` (constants of the graph);
* the module's network: the catalog model of PPO / APPO / IMPALA (its recurrent state as
  ``state_in_*`` / ``state_out_*``; RLlib's action-mask observations masked inside), DQN's
  Q-values (argmax, masked actions excluded), SAC's actor (the squashed mean);
* the deterministic action, mapped as RLlib's env runner maps it for the env: Box leaves
  unsquashed from ``[-1, 1]`` to the bounds (``normalize_actions``) or clipped to them
  (``clip_actions``).

What cannot be represented is a ValueError naming it: a module that is not one of rlblocks'
(a custom RLModule), models that read previous actions, rewards or observations next to the
observation, or the Atari frame pipeline.

:func:`rlblocks.export.export_policy` and ``rlblocks export RUN`` call this for RLlib runs.

Examples:
    >>> export_rllib_policy("rlblocks_runs/PPO_CartPole-v1_x")       # doctest: +SKIP
    PosixPath('rlblocks_runs/PPO_CartPole-v1_x/policy.onnx')

    A DQN module's network as the graph exports it (greedy action, its Q-value):

    >>> import gymnasium as gym
    >>> from rlblocks.export.graph import PolicyGraph
    >>> from rlblocks.rllib import rl_module_spec
    >>> spec = rl_module_spec({"fcnet_hiddens": [8]}, algo="DQN")
    >>> spec.observation_space = gym.spaces.Box(-1, 1, (3,))
    >>> spec.action_space = gym.spaces.Discrete(2)
    >>> graph = PolicyGraph(module_policy(spec.build(), {}, None), (3,))
    >>> action, q, value = graph(torch.zeros(4, 3))
    >>> bool((q.gather(1, action[:, None])[:, 0] == value).all())
    True
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box
from torch import nn

from rlblocks.catalog import ModelCatalog
from rlblocks.config import ModelConfig
from rlblocks.distributions import Categorical
from rlblocks.export.sidecar import multiagent_sidecar
from rlblocks.export.writer import FORMATS, _name, write_policy
from rlblocks.filters import MeanStdFilter, unfiltered_columns
from rlblocks.masks import MASK_KEY, OBS_KEY, MaskLayout, apply_action_mask, is_mask_space
from rlblocks.masks import mask_columns as _mask_columns
from rlblocks.masks import mask_layout as _mask_layout
from rlblocks.models.heads import DuelingQModel
from rlblocks.models.modelv2 import ModelV2
from rlblocks.preprocessors import Preprocessor, get_preprocessor
from rlblocks.rllib.algo_config import (
    MultiAgentSetup,
    _model,
    build_algo_config,
    make_env,
    multiagent_setup,
    run_env_to_module,
)
from rlblocks.rllib.checkpoints import RunCheckpoint, load_module, newest_checkpoint
from rlblocks.rllib.connectors import AtariFramesBatched, MeanStdFilterBatched
from rlblocks.rllib.module import RLBlocksRLModule
from rlblocks.rllib.qlearning import RLBlocksDQNRLModule, RLBlocksSACRLModule
from rlblocks.running_stat import RunningStat
from rlblocks.train.policy import Policy
from rlblocks.train.trainer_config import PPOConfig, TrainerConfig

__all__ = [
    "export_rllib_policies",
    "export_rllib_policy",
    "is_multiagent_run",
    "module_policy",
]


# --- the env runner's action mapping ------------------------------------------------------------
def _map_actions(actions: Any, space: gym.Space, leaf: Callable[[Any, gym.Space], Any]) -> Any:
    """``leaf(action, leaf_space)`` over a (nested) action structure."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _map_actions(actions[k], s, leaf) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_map_actions(actions[i], s, leaf) for i, s in enumerate(space.spaces))
    return leaf(actions, space)


class _EnvActions:
    """A distribution whose deterministic sample is what RLlib's env runner sends the env:
    Box leaves unsquashed from ``[-1, 1]`` (``"unsquash"``, RLlib's ``unsquash_action``) or
    clipped (``"clip"``) to their bounds."""

    def __init__(self, dist: Any, space: gym.Space, mode: str | None) -> None:
        self.dist = dist
        self.inputs = dist.inputs
        self.space = space
        self.mode = mode

    def _leaf(self, a: torch.Tensor, space: gym.Space) -> torch.Tensor:
        if not isinstance(space, Box) or self.mode is None:
            return a
        low = torch.as_tensor(np.asarray(space.low, np.float64))
        high = torch.as_tensor(np.asarray(space.high, np.float64))
        bounded = bool(np.all(space.bounded_below) and np.all(space.bounded_above))
        if self.mode == "unsquash" and bounded and space.dtype.kind == "f":
            out = low.to(a.dtype) + (a + 1.0) * (high - low).to(a.dtype) / 2.0
            return torch.maximum(torch.minimum(out, high.to(a.dtype)), low.to(a.dtype))
        if self.mode == "unsquash" and bounded and space.dtype.kind in "iu":
            return a + low.to(a.dtype)
        if self.mode == "clip":
            return torch.maximum(torch.minimum(a, high.to(a.dtype)), low.to(a.dtype))
        return a

    def deterministic_sample(self) -> Any:
        return _map_actions(self.dist.deterministic_sample(), self.space, self._leaf)


class _EnvActionDist:
    """``dist_class(inputs, model)`` -> :class:`_EnvActions` around ``inner``; named as
    ``inner`` (the sidecar's ``dist_class``)."""

    def __init__(self, inner: Any, space: gym.Space, mode: str | None) -> None:
        self.inner, self.space, self.mode = inner, space, mode
        self.__name__ = _name(inner)

    def __call__(self, inputs: torch.Tensor, model: Any) -> _EnvActions:
        return _EnvActions(self.inner(inputs, model), self.space, self.mode)


# --- networks as PolicyGraph models ---------------------------------------------------------------
class _MaskedModel(nn.Module):
    """RLlib's action-mask observation as one flat row: the mask's columns mask the outputs
    of ``inner`` (run on the ``observations`` columns back in ``obs_shape``, the shape the
    module's network takes: an image for the vision net), as the module does.

    Raises:
        ValueError: The ``observations`` columns do not hold ``obs_shape``.
    """

    def __init__(
        self,
        inner: nn.Module,
        mask: slice,
        obs: slice,
        layout: MaskLayout,
        obs_shape: tuple[int, ...],
    ) -> None:
        super().__init__()
        self.inner, self.mask, self.obs, self.layout = inner, mask, obs, layout
        self.obs_shape = tuple(int(d) for d in obs_shape)
        width = obs.stop - obs.start
        if int(np.prod(self.obs_shape, dtype=np.int64)) != width:
            raise ValueError(
                f"export: {OBS_KEY!r} takes {width} columns of the flat observation, the "
                f"module's network takes shape {self.obs_shape}"
            )

    def get_initial_state(self) -> list[torch.Tensor]:
        return list(self.inner.get_initial_state())  # type: ignore[operator]

    def value_function(self) -> torch.Tensor:
        return self.inner.value_function()  # type: ignore[operator,no-any-return]

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        row = input_dict["obs"]
        inner = {**input_dict, "obs": row[:, self.obs].reshape(-1, *self.obs_shape)}
        out, state_out = self.inner(inner, state, seq_lens)
        return apply_action_mask(out, row[:, self.mask], self.layout), state_out


class _QValues(nn.Module):
    """A DQN module's Q-network as a model whose outputs are the (expected) Q-values, so that
    ``Categorical``'s deterministic sample is the greedy action; ``value_function()`` is the
    greedy action's Q-value."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.q_model = module.q_model
        self.n, self.num_atoms = int(module.n_actions), int(module.num_atoms)
        self.register_buffer("support", module.support.detach().clone())
        self._q = torch.zeros(0)

    def get_initial_state(self) -> list[torch.Tensor]:
        return []

    def value_function(self) -> torch.Tensor:
        return self._q.max(dim=-1).values

    def forward(
        self, input_dict: dict[str, Any], state: list[torch.Tensor], seq_lens: Any
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        out, _ = self.q_model({"obs": input_dict["obs"], "is_training": False})
        if isinstance(self.q_model, DuelingQModel):
            logits = self.q_model.get_q_logits(out)
        else:
            logits = out.reshape(out.shape[0], self.n, self.num_atoms)
        if self.num_atoms == 1:
            q = logits.squeeze(-1)
        else:
            q = (torch.softmax(logits, dim=-1) * self.get_buffer("support")).sum(-1)
        self._q = q
        return q, []


# --- the run as the trainer export_policy reads ---------------------------------------------------
class _ConfigView:
    """What the sidecar reads of a trainer's config, for an RLlib run: the env's name, the
    run's model config (DQN / SAC over RLlib's defaults) and ``clip_actions``."""

    def __init__(self, config: TrainerConfig, model: dict[str, Any]) -> None:
        self.env_name = config.env_name
        self.clip_actions = bool(config.clip_actions)
        self._model = ModelConfig.from_dict(model)

    def model_config(self) -> ModelConfig:
        return self._model


class _RunPolicy:
    """One policy of an RLlib run's checkpoint, seen as the trainer that
    :func:`~rlblocks.export.export_policy` exports."""

    def __init__(
        self,
        policy: Policy,
        preprocessor: Preprocessor,
        obs_filter: MeanStdFilter | None,
        config: _ConfigView,
        obs_space: gym.Space,
        ckpt: RunCheckpoint,
        sidecar_extra: dict[str, Any],
    ) -> None:
        self.policy, self.preprocessor, self.obs_filter = policy, preprocessor, obs_filter
        self.config = config
        self.venv = _SingleSpace(obs_space)
        self.run_dir: Path = ckpt.path.parent
        self.checkpoint_path: Path = ckpt.path
        self.sidecar_extra = sidecar_extra


class _SingleSpace:
    """``venv.single_observation_space``, as the sidecar reads it."""

    def __init__(self, space: gym.Space) -> None:
        self.single_observation_space = space


def _action_mode(ckpt: RunCheckpoint, config: TrainerConfig, algo: str) -> str | None:
    """How RLlib's env runner maps Box actions for the env (the run's algorithm config)."""
    runner = build_algo_config(config, algo, int(ckpt.backend.get("num_env_runners") or 0))
    if runner.normalize_actions:
        return "unsquash"
    if runner.clip_actions:
        return "clip"
    return None


def module_policy(module: Any, options: dict[str, Any], mode: str | None) -> Policy:
    """The network of one of rlblocks' RLlib modules as a
    :class:`~rlblocks.train.policy.Policy` (what :class:`~rlblocks.export.graph.PolicyGraph`
    and the sidecar read; its actor calls the network as ``model(input_dict, state,
    seq_lens)``) whose deterministic action is the module's greedy one mapped as the env
    runner maps it (``mode``: ``"unsquash"``, ``"clip"`` or None; see :func:`_action_mode`).

    Args:
        module: An :class:`~rlblocks.rllib.RLBlocksRLModule` (or APPO's),
            :class:`~rlblocks.rllib.RLBlocksDQNRLModule` or
            :class:`~rlblocks.rllib.RLBlocksSACRLModule`.
        options: The run's model config (the preprocessor options of the mask's columns).
        mode: The env runner's Box action mapping.

    Raises:
        ValueError: Another module class, or a model that reads previous actions, rewards or
            observations.
    """
    space = module.observation_space
    action_space = module.action_space
    masked = is_mask_space(space)
    if isinstance(module, RLBlocksRLModule):
        if module._views:
            raise ValueError(
                f"export: the model reads {sorted(module._views)} next to the observation "
                "(previous actions, rewards or observations); the export of an RLlib run "
                "takes models of the current observation (and recurrent state) only"
            )
        model: nn.Module = module.model
        dist: Any = module.dist_fn
        layout = module.mask_layout
        if layout is not None and not module.rlblocks_config.custom_action_dist:
            # the masked logits are FLOAT_MIN: the catalog's distribution picks the same
            # greedy action without the masked twin's data-dependent row check (the
            # runtime refuses rows without a legal action before running the graph)
            dist = ModelCatalog.get_action_dist(action_space, module.rlblocks_config)[0]
    elif isinstance(module, RLBlocksDQNRLModule):
        if module.num_atoms > 1 and masked:
            raise ValueError("export: action masks with num_atoms > 1 are not supported")
        model, dist = _QValues(module), Categorical
        layout = (
            _mask_layout(action_space, int(module.n_actions), space[MASK_KEY], options)
            if masked
            else None
        )
    elif isinstance(module, RLBlocksSACRLModule):
        model, dist, layout = module.pi, module.dist_fn, None
    else:
        raise ValueError(
            f"export: {type(module).__name__} is not one of rlblocks' RLlib modules "
            "(RLBlocksRLModule, RLBlocksAPPORLModule, RLBlocksDQNRLModule, "
            "RLBlocksSACRLModule); a custom RLModule cannot be exported"
        )
    columns = None
    flat_space = space
    if masked:
        assert layout is not None
        columns, obs_columns = _mask_columns(_with_original(space), options)
        obs_shape = tuple(space[OBS_KEY].shape or ())
        model = _MaskedModel(model, columns, obs_columns, layout, obs_shape)
        flat_space = Box(-np.inf, np.inf, (obs_columns.stop,), np.float32)
    # the module's own network, no catalog fast path: fast_paths off
    policy = Policy(
        flat_space,
        action_space,
        PPOConfig(fast_paths=False),
        "cpu",
        # duck-typed: the network answers get_initial_state / value_function as a ModelV2
        model=cast(ModelV2, model),
        dist_class=_EnvActionDist(dist, action_space, mode),
    )
    policy.mask_layout, policy.mask_columns = layout, columns
    return policy


def _with_original(space: gym.spaces.Dict) -> gym.spaces.Dict:
    """The action-mask Dict with its ``observations`` back in their env form (the module's
    space holds the flat Box that carries them as ``original_space``)."""
    obs = space[OBS_KEY]
    return gym.spaces.Dict(
        {MASK_KEY: space[MASK_KEY], OBS_KEY: getattr(obs, "original_space", obs)}
    )


def _preprocessing(
    config: TrainerConfig, algo: str, env_space: gym.Space, filter_state: Any
) -> tuple[Preprocessor, MeanStdFilter | None]:
    """The run's C++ preprocessor over the env's observation (action mask included) and its
    mean/std filter at the saved state (None without one).

    Raises:
        ValueError: The Atari frame pipeline.
    """
    pieces = run_env_to_module(config, algo, training=False)()
    if any(isinstance(p, AtariFramesBatched) for p in pieces):
        raise ValueError(
            "export: the Atari frame pipeline (gray scale, resize, frame stack) of an RLlib "
            "run is not part of the exported graph; Atari runs cannot be exported"
        )
    obs_filter = None
    space = env_space
    for piece in pieces:
        piece.input_action_space = gym.spaces.Discrete(1)
        piece.input_observation_space = space
        space = piece.observation_space
        if isinstance(piece, MeanStdFilterBatched):
            if filter_state is not None:
                piece.set_state(filter_state)
            obs_filter = piece.filter
    options = _model(config, algo)
    prep = get_preprocessor(env_space)(env_space, options)
    if obs_filter is not None and is_mask_space(env_space):
        obs_filter = _with_mask_columns(obs_filter, prep)
    return prep, obs_filter


def _with_mask_columns(obs_filter: MeanStdFilter, prep: Preprocessor) -> MeanStdFilter:
    """The filter of an action-mask run's ``observations`` (RLlib's connector filters those
    alone) widened to the exported row, the mask's columns and the observations' back to
    back: the observations' statistics at their columns, the mask passed through.

    Examples:
        >>> from gymnasium.spaces import Dict, MultiBinary
        >>> space = Dict({MASK_KEY: MultiBinary(2), OBS_KEY: Box(-9, 9, (1,))})
        >>> inner = MeanStdFilter((1,))
        >>> _ = inner(np.array([[1.0], [3.0]]))
        >>> wide = _with_mask_columns(inner, get_preprocessor(space)(space))
        >>> wide(np.array([1.0, 0.0, 3.0]), update=False).round(3).tolist()
        [1.0, 0.0, 0.707]
    """
    lay = prep.layout
    obs = lay.find((OBS_KEY,)).columns
    size = prep.shape[0]
    state = obs_filter.running_stats.state()
    wide_state: dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, (int, np.integer)):
            wide_state[key] = value
        else:  # per-column arrays: the observations' at their columns, zeros elsewhere
            column = np.zeros(size, np.asarray(value).dtype)
            column[obs] = np.asarray(value).reshape(-1)
            wide_state[key] = column
    wide = MeanStdFilter(
        (size,),
        obs_filter.demean,
        obs_filter.destd,
        obs_filter.clip,
        passthrough=unfiltered_columns(lay),
    )
    wide.running_stats = RunningStat.from_state((size,), wide_state)
    return wide


def is_multiagent_run(run: str | Path) -> bool:
    """Whether the RLlib run (or checkpoint) ``run`` trained one module per policy.

    Raises:
        ValueError: Not a run of this backend, or no checkpoint.
    """
    ckpt = newest_checkpoint(run)
    return multiagent_setup(ckpt.trainer_config) is not None


def _default_path(ckpt: RunCheckpoint, fmt: str, name: str = "policy") -> Path:
    return ckpt.path.parent / f"{name}{FORMATS[fmt]}"


def _check_fmt(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"export: unknown format {fmt!r}; choose one of {sorted(FORMATS)}")


def export_rllib_policy(run: str | Path, path: str | Path | None = None, fmt: str = "onnx") -> Path:
    """Exports the policy of an RLlib run's newest checkpoint (or of the checkpoint ``run``
    names) to ``path`` and ``path + ".json"``.

    Args:
        run: A ``--backend rllib`` run directory or one of its checkpoints.
        path: The artifact (default ``RUN_DIR/policy.onnx`` or ``policy.pt2``).
        fmt: ``"onnx"`` or ``"torch-export"``.

    Returns:
        The artifact's path.

    Raises:
        ValueError: Not an RLlib run, a multi-agent run (:func:`export_rllib_policies`), or
            a policy that cannot be represented (module docstring).
        ImportError: ``fmt="onnx"`` without the ``export`` extra.
    """
    _check_fmt(fmt)
    ckpt = newest_checkpoint(run)
    config = ckpt.trainer_config
    algo = str(ckpt.backend.get("algo", "PPO"))
    if multiagent_setup(config) is not None:
        raise ValueError(
            "export: this is a multi-agent run; export_rllib_policies writes one artifact "
            "per policy (rlblocks export does it)"
        )
    env = make_env(config, algo)
    try:
        env_space = env.observation_space
    finally:
        env.close()
    prep, obs_filter = _preprocessing(config, algo, env_space, ckpt.filter_state)
    options = _model(config, algo)
    module = load_module(ckpt.module_dir)
    policy = module_policy(module, options, _action_mode(ckpt, config, algo))
    source = _RunPolicy(
        policy,
        prep,
        obs_filter,
        _ConfigView(config, options),
        env_space,
        ckpt,
        {"rllib": {"algo": algo, "checkpoint": ckpt.path.name}},
    )
    return write_policy(source, _default_path(ckpt, fmt) if path is None else path, fmt)


def export_rllib_policies(
    run: str | Path, out_dir: str | Path | None = None, fmt: str = "onnx"
) -> dict[str, Path]:
    """Exports every policy of an RLlib run as ``policy_<id>.onnx`` (or ``.pt2``) with its
    sidecar, as :func:`rlblocks.export.exporter.export_policies` does for a native
    multi-agent run (the sidecar's ``multiagent`` entry names the policy's agents and their
    own spaces); a single-agent run gives ``{"default": path}``.

    Args:
        run: A ``--backend rllib`` run directory or one of its checkpoints.
        out_dir: Where the artifacts go (default: the run directory).
        fmt: ``"onnx"`` or ``"torch-export"``.

    Raises:
        ValueError: As :func:`export_rllib_policy`.
    """
    _check_fmt(fmt)
    ckpt = newest_checkpoint(run)
    config = ckpt.trainer_config
    setup = multiagent_setup(config)
    if setup is None:
        target = None if out_dir is None else Path(out_dir) / f"policy{FORMATS[fmt]}"
        return {"default": export_rllib_policy(ckpt.path, target, fmt)}
    return _export_multiagent(ckpt, config, setup, out_dir, fmt)


def _export_multiagent(
    ckpt: RunCheckpoint,
    config: TrainerConfig,
    setup: MultiAgentSetup,
    out_dir: str | Path | None,
    fmt: str,
) -> dict[str, Path]:
    from rlblocks.rllib.algo_config import _policy_models
    from rlblocks.rllib.multiagent_envs import make_multiagent_env

    algo = str(ckpt.backend.get("algo", "PPO"))
    models = _policy_models(config, algo, setup.policies)
    mode = _action_mode(ckpt, config, algo)
    env = make_multiagent_env(config, setup.mapping)
    try:
        unions = dict(env.unions)
    finally:
        env.close()
    base = Path(out_dir) if out_dir is not None else ckpt.path.parent
    root = ckpt.module_dir.parent
    out: dict[str, Path] = {}
    for pid in setup.policies:
        spec = unions[pid]
        union_space = spec.observation_space
        options = ModelConfig.from_dict(models[pid]).to_dict()
        prep = get_preprocessor(union_space)(union_space, options)
        module = load_module(root / str(pid))
        policy = module_policy(module, options, mode)
        extra = {
            "rllib": {"algo": algo, "checkpoint": ckpt.path.name},
            "multiagent": multiagent_sidecar(pid, spec),
        }
        source = _RunPolicy(
            policy, prep, None, _ConfigView(config, options), union_space, ckpt, extra
        )
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(pid))
        out[str(pid)] = write_policy(source, base / f"policy_{safe}{FORMATS[fmt]}", fmt)
    return out
