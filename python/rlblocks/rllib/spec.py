"""The ``RLModuleSpec`` of an rlblocks module for an RLlib algorithm.

* :func:`rl_module_spec` for ``config.rl_module(rl_module_spec=...)``.
* :func:`portable_model_config`: a model config whose custom names are replaced by their
  classes, so that it reaches Ray's worker processes (where the catalog's registries are
  empty).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlblocks.catalog import ModelCatalog
from rlblocks.config import ModelConfig, algorithm_model_config
from rlblocks.rllib._ray import RLModuleSpec
from rlblocks.rllib.module import RLBlocksAPPORLModule, RLBlocksRLModule
from rlblocks.rllib.qlearning import RLBlocksDQNRLModule, RLBlocksSACRLModule

__all__ = ["MODULE_CLASSES", "portable_model_config", "rl_module_spec"]


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
