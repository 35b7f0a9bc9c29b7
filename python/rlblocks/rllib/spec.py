"""The ``RLModuleSpec`` of an rlblocks module for an RLlib algorithm.

* :func:`rl_module_spec` for ``config.rl_module(rl_module_spec=...)``.
* :func:`multi_rl_module_spec`: a ``MultiRLModuleSpec`` with an rlblocks module per policy,
  for multi-agent configs (``config.multi_agent(...)``).
* :func:`portable_model_config`: a model config whose custom names are replaced by their
  classes, so that it reaches Ray's worker processes (where the catalog's registries are
  empty).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlblocks.catalog import ModelCatalog
from rlblocks.config import ModelConfig, algorithm_model_config
from rlblocks.rllib._ray import MultiRLModuleSpec, RLModuleSpec
from rlblocks.rllib.module import RLBlocksAPPORLModule, RLBlocksRLModule
from rlblocks.rllib.qlearning import RLBlocksDQNRLModule, RLBlocksSACRLModule

__all__ = ["MODULE_CLASSES", "multi_rl_module_spec", "portable_model_config", "rl_module_spec"]


def portable_model_config(model_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The full rlblocks model config, with registered custom model / distribution names
    replaced by their classes (the catalog's registries do not reach Ray worker processes).

    Raises:
        ValueError: An invalid config or an unregistered custom name.
    """
    cfg = ModelConfig.from_dict(model_config).to_dict()
    # a registered name becomes its class; an unregistered "module:Name" path stays a
    # string (each worker imports it)
    name = cfg.get("custom_model")
    if isinstance(name, str) and (":" not in name or ModelCatalog.is_custom_model(name)):
        cfg["custom_model"] = ModelCatalog.get_custom_model(name)
    dist = cfg.get("custom_action_dist")
    if isinstance(dist, str) and (":" not in dist or ModelCatalog.is_custom_action_dist(dist)):
        cfg["custom_action_dist"] = ModelCatalog.get_custom_action_dist(dist)
    return cfg


#: The rlblocks module class of each RLlib algorithm ``rl_module_spec`` builds for.
MODULE_CLASSES: dict[str, type] = {
    "PPO": RLBlocksRLModule,
    "IMPALA": RLBlocksRLModule,
    "APPO": RLBlocksAPPORLModule,
    "DQN": RLBlocksDQNRLModule,
    "SAC": RLBlocksSACRLModule,
}


def rl_module_spec(
    model_config: Mapping[str, Any] | None = None, *, appo: bool = False, algo: str | None = None
) -> Any:
    """An ``RLModuleSpec`` of the rlblocks module for ``algo`` and ``model_config``.

    Args:
        model_config: rlblocks model config (``MODEL_DEFAULTS`` keys); None: defaults.
            PPO, APPO and IMPALA default to ``vf_share_layers=False`` (separate value layers,
            as RLlib's new stack; difference 25) unless the config sets the key.
            RLlib's algorithm keys (DQN's ``dueling``, ``double_q``, ``num_atoms``, ...,
            SAC's ``twin_q``) come from the algorithm config itself.
        appo: Same as ``algo="APPO"``.
        algo: ``"PPO"`` (default), ``"IMPALA"``: :class:`RLBlocksRLModule`; ``"APPO"``:
            :class:`RLBlocksAPPORLModule`; ``"DQN"``: :class:`RLBlocksDQNRLModule`;
            ``"SAC"``: :class:`RLBlocksSACRLModule`.

    Raises:
        ValueError: An invalid config (see :meth:`rlblocks.config.ModelConfig.from_dict`)
            or an unknown ``algo``.

    Examples:
        >>> rl_module_spec({"fcnet_hiddens": [64]}, algo="DQN").module_class.__name__
        'RLBlocksDQNRLModule'
    """
    name = "APPO" if appo and algo is None else (algo or "PPO")
    if name not in MODULE_CLASSES or (appo and name != "APPO"):
        raise ValueError(
            f"rl_module_spec: algo must be one of {sorted(MODULE_CLASSES)}, got "
            f"{algo!r}{' with appo=True' if appo else ''}"
        )
    return RLModuleSpec(
        module_class=MODULE_CLASSES[name],
        model_config=portable_model_config(algorithm_model_config(model_config, name)),
    )


def _module_observation_space(space: Any, model_config: Mapping[str, Any] | None) -> Any:
    """The observation space the module reads when the env gives ``space``: what the
    flattening piece of :func:`rlblocks.rllib.env_to_module` makes of it."""
    from rlblocks.rllib.connectors import FlattenObservationsBatched

    piece = FlattenObservationsBatched(model_config=model_config)
    piece.input_observation_space = space
    return piece.observation_space


def multi_rl_module_spec(
    policies: Mapping[Any, Mapping[str, Any] | None],
    observation_spaces: Mapping[Any, Any] | None = None,
    action_spaces: Mapping[Any, Any] | None = None,
    *,
    algo: str = "PPO",
) -> Any:
    """A ``MultiRLModuleSpec`` with one rlblocks module (as :func:`rl_module_spec` builds it)
    per policy, for ``config.rl_module(rl_module_spec=...)`` in a multi-agent config.

    Args:
        policies: ``{policy_id: rlblocks model config}`` (None: the defaults).
        observation_spaces: ``{policy_id: space}``: each policy's observation space as the
            env gives it (e.g. its ``UnionSpec.observation_space``); the spec holds the
            flat Box that :func:`rlblocks.rllib.env_to_module` /
            :class:`~rlblocks.rllib.connectors.MultiAgentFlattenObservations` make of it.
            Policies without one get their spaces from RLlib (the env-to-module pipeline's
            output), which is what ``build_algo_config`` relies on.
        action_spaces: ``{policy_id: action space}`` (unified, as the env takes it).
        algo: ``"PPO"``, ``"APPO"``, ``"IMPALA"``, ``"DQN"`` or ``"SAC"`` (the module class,
            see :func:`rl_module_spec`).

    Raises:
        ValueError: No policies, a space for an unknown policy, an invalid model config or
            an unknown ``algo``.

    Examples:
        >>> from gymnasium.spaces import Box, Dict, Discrete
        >>> spec = multi_rl_module_spec(
        ...     {"scout": {"fcnet_hiddens": [32]}, "pilot": None},
        ...     {"pilot": Dict({"x": Discrete(3), "y": Box(-1, 1, (2,))})},
        ... )
        >>> sorted(spec.rl_module_specs), spec.rl_module_specs["pilot"].observation_space.shape
        (['pilot', 'scout'], (5,))
        >>> spec.rl_module_specs["scout"].module_class.__name__
        'RLBlocksRLModule'
    """
    if not policies:
        raise ValueError("multi_rl_module_spec: give at least one policy")
    for name, given in (
        ("observation_spaces", observation_spaces),
        ("action_spaces", action_spaces),
    ):
        unknown = sorted(str(p) for p in (given or {}) if p not in policies)
        if unknown:
            raise ValueError(
                f"multi_rl_module_spec: {name} for unknown policies {unknown} "
                f"(policies: {sorted(map(str, policies))})"
            )
    specs: dict[Any, Any] = {}
    for policy, model in policies.items():
        spec = rl_module_spec(model, algo=algo)
        if observation_spaces and policy in observation_spaces:
            spec.observation_space = _module_observation_space(observation_spaces[policy], model)
        if action_spaces and policy in action_spaces:
            spec.action_space = action_spaces[policy]
        specs[policy] = spec
    return MultiRLModuleSpec(rl_module_specs=specs)
