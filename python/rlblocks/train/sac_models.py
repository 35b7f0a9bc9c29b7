"""SAC's and TD3's networks: which model configs they train, their critics, and how they
start.

:class:`~rlblocks.train.learners.sac.SACLearner` builds its actor from the catalog and its
critics here: for a Box action a
:class:`~rlblocks.models.heads.ContinuousActionQModel` head over the catalog's base model
for ``config.q_model`` (the identity base for the default fully connected network, so the
critic is the usual MLP over ``concat(obs, action)``), for a Discrete action the catalog's
model with one Q-value per action. Under an action mask the critics read the
``observations`` part of the flat row only.

Examples:
    >>> import gymnasium as gym
    >>> from rlblocks.config import ModelConfig
    >>> cfg = ModelConfig.from_dict({"fcnet_hiddens": [8]})
    >>> critics, columns, shape = build_critics(
    ...     gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), cfg, 2, False
    ... )
    >>> len(critics), columns, shape
    (2, None, (3,))
"""

from __future__ import annotations

import gymnasium as gym
from torch import nn

from rlblocks.catalog import ModelCatalog
from rlblocks.config import ModelConfig
from rlblocks.masks import MASK_KEY, OBS_KEY
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.heads import ContinuousActionQModel
from rlblocks.models.modelv2 import ModelV2

__all__ = [
    "build_critics",
    "check_feedforward",
    "checked_model_config",
    "torch_init",
]


def checked_model_config(cfg: ModelConfig, what: str) -> ModelConfig:
    """``cfg`` if SAC (or TD3) can train it: no recurrent wrapper, no custom action
    distribution, no free log-std for a critic (``what="q_model"``: one Q-value, no std).

    Raises:
        ValueError: ``use_lstm`` / ``use_attention``, ``custom_action_dist``, or
            ``free_log_std`` for the critics.
    """
    if cfg.use_lstm or cfg.use_attention:
        raise ValueError(
            f"SAC: config.{what} sets use_lstm / use_attention; SAC trains feed-forward "
            "models only (set both to False)"
        )
    if cfg.free_log_std and what == "q_model":
        raise ValueError(
            "SAC: config.q_model sets free_log_std: a critic outputs one Q-value and has no "
            "log-std (the actor's free_log_std / log_std_init in config.model stay the "
            "actor's): unset it in q_model"
        )
    if cfg.custom_action_dist:
        raise ValueError(
            f"SAC: config.{what}['custom_action_dist'] = {cfg.custom_action_dist!r}; SAC picks "
            "its distributions (SquashedGaussian for Box, Categorical for Discrete): leave it "
            "unset"
        )
    return cfg


def check_feedforward(model: ModelV2, what: str) -> None:
    """Refuses models with RNN state or a view of past observations.

    Raises:
        ValueError: The model is recurrent or reads past observations.
    """
    if model.get_initial_state():
        raise ValueError(f"SAC: the {what} model is recurrent; SAC trains feed-forward models")
    for key, vr in model.view_requirements.items():
        if key != "obs" and getattr(vr, "data_col", None) == "obs":
            raise ValueError(
                f"SAC: the {what} model reads past observations ({key!r}); SAC trains models "
                "of the current observation only"
            )


def build_critics(
    obs_space: gym.Space,
    action_space: gym.Space,
    cfg: ModelConfig,
    n_critics: int,
    masked: bool,
) -> tuple[list[ModelV2], slice | None, tuple[int, ...]]:
    """``(critics, columns, shape)``: ``n_critics`` critics for ``cfg``, the columns of
    the flat row they read under an action mask (None without one) and their input shape.

    Raises:
        ValueError: A mask with a Box action, or a recurrent critic model.
    """
    columns: slice | None = None
    critic_space = obs_space
    if masked:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(
                f"SAC: an {MASK_KEY!r} observation needs a Discrete action space, got "
                f"{action_space}"
            )
        from rlblocks.masks import mask_columns
        from rlblocks.preprocessors import get_preprocessor

        original = getattr(obs_space, "original_space", obs_space)
        assert isinstance(original, gym.spaces.Dict)
        child = original[OBS_KEY]
        critic_space = get_preprocessor(child)(child, cfg.to_dict()).observation_space
        columns = mask_columns(obs_space, cfg.to_dict())[1]
    critics = [
        _build_critic(critic_space, action_space, cfg, f"sac_q{i}") for i in range(n_critics)
    ]
    for c in critics:
        check_feedforward(c, "critic")
    return critics, columns, tuple(critic_space.shape or ())


def _build_critic(
    space: gym.Space, action_space: gym.Space, cfg: ModelConfig, name: str
) -> ModelV2:
    """One critic: Q per action (Discrete) or a Q head over ``(obs, action)`` (Box)."""
    if isinstance(action_space, gym.spaces.Discrete):
        n = int(action_space.n)
        return ModelCatalog.get_model_v2(space, action_space, n, cfg, name=name)
    plain_fc = (
        not cfg.custom_model
        and ModelCatalog.default_model_class(space, cfg) is FullyConnectedNetwork
    )
    base_cfg = {**cfg.to_dict(), "fcnet_hiddens": []} if plain_fc else cfg
    base = ModelCatalog.get_model_v2(space, action_space, None, base_cfg, name=name)
    return ContinuousActionQModel(space, action_space, None, cfg, name, base_model=base)


def torch_init(*models: nn.Module) -> None:
    """Restarts every linear and convolution layer of ``models`` with torch's default
    (``reset_parameters``), as Stable-Baselines3's networks start (``network_init="torch"``)."""
    for model in models:
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd)):
                m.reset_parameters()
