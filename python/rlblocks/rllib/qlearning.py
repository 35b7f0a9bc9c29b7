"""RLModules for RLlib's DQN and SAC (new API stack) built from rlblocks models and Q heads.

* :class:`RLBlocksDQNRLModule`: the catalog model's features feed rlblocks'
  :class:`~rlblocks.models.heads.DuelingQModel` (``dueling=True``, RLlib's default) or the
  catalog model itself outputs one Q-value per action (``dueling=False``); ``num_atoms > 1``
  makes either head distributional (C51 over ``linspace(v_min, v_max, num_atoms)``).
  Double Q, n-step returns and prioritized replay are RLlib's (its learner and buffers);
  the module computes what RLlib's ``DQNTorchLearner`` reads. Exploration is epsilon-greedy
  on RLlib's ``epsilon`` schedule.
* :class:`RLBlocksSACRLModule`: the actor is the catalog model with rlblocks'
  :class:`~rlblocks.distributions.SquashedGaussian` into ``[-1, 1]`` (Box actions, as
  RLlib's own SAC module: the env runner unsquashes them to the Box bounds with
  ``normalize_actions``, RLlib's default) or Categorical (Discrete actions); each critic
  is an rlblocks
  :class:`~rlblocks.models.heads.ContinuousActionQModel` (the observation encoded by the
  catalog model, then ``Q(features, action)``), or a catalog model with one Q-value per
  action for Discrete actions; ``twin_q`` adds the second critic. Entropy tuning is RLlib's
  learner (``initial_alpha``, ``target_entropy``).

RLlib's algorithm config puts ``dueling``, ``double_q``, ``num_atoms``, ``v_min``,
``v_max``, ``epsilon`` (DQN) and ``twin_q`` (SAC) into the module's ``model_config``; the
rlblocks keys (``fcnet_hiddens``, ``conv_filters``, ``custom_model``, ...) choose the
networks. Observations are what :func:`rlblocks.rllib.env_to_module` produces (flat or
image Box; nested Dict/Tuple/Repeated flatten in C++), or RLlib's action-mask Dict
``{"observations", "action_mask"}`` for DQN (masked actions are never chosen, explored or
bootstrapped from). Recurrent models (``use_lstm`` / ``use_attention``) are refused.

Target networks are deep copies (``target_q_model``, ``target_qf``, ``target_qf_twin``),
synced by RLlib's learner every ``target_network_update_freq`` steps with ``tau``.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box, Discrete

from rlblocks.catalog import ModelCatalog
from rlblocks.config import ModelConfig
from rlblocks.distributions import Categorical, SquashedGaussian
from rlblocks.models.heads import ContinuousActionQModel, DuelingQModel
from rlblocks.models.modelv2 import ModelV2
from rlblocks.nest import tree_map
from rlblocks.rllib._ray import (
    Columns,
    InferenceOnlyAPI,
    QNetAPI,
    Scheduler,
    TargetNetworkAPI,
    TorchRLModule,
)
from rlblocks.rllib.distribution import RLBlocksDistribution
from rlblocks.rllib.module import MASK_KEY, OBS_KEY, is_mask_space, rlblocks_model_config
from rlblocks.train.fast.dense_layers import FCLayers

__all__ = [
    "ATOMS",
    "QF_LOGITS",
    "QF_NEXT_PREDS",
    "QF_PREDS",
    "QF_PROBS",
    "QF_TARGET_NEXT_PREDS",
    "QF_TARGET_NEXT_PROBS",
    "RLBlocksDQNRLModule",
    "RLBlocksSACRLModule",
]

# The output columns RLlib's DQN / SAC learners read (their values, not imported: these
# names are part of RLlib's learner contract).
QF_PREDS = "qf_preds"
QF_NEXT_PREDS = "qf_next_preds"
QF_TARGET_NEXT_PREDS = "qf_target_next_preds"
QF_TARGET_NEXT_PROBS = "qf_target_next_probs"
QF_LOGITS = "qf_logits"
QF_PROBS = "qf_probs"
ATOMS = "atoms"
QF_TWIN_PREDS = "qf_twin_preds"
QF_TARGET_NEXT = "q_target_next"
ACTION_DIST_INPUTS_NEXT = "action_dist_inputs_next"
ACTION_PROBS = "action_probs"
ACTION_LOG_PROBS = "action_log_probs"
ACTION_PROBS_NEXT = "action_probs_next"
ACTION_LOG_PROBS_NEXT = "action_log_probs_next"


def _q_config(model_config: Any, who: str) -> ModelConfig:
    """The rlblocks model config of a Q-learning module (recurrent models refused); the value
    branch of FC models is shared (Q-learning never reads it)."""
    config = rlblocks_model_config(model_config)
    if config.use_lstm or config.use_attention:
        raise ValueError(
            f"{who}: recurrent models (use_lstm / use_attention) are not supported "
            "for Q-learning; use a feed-forward model (frame stacking gives memory)"
        )
    return ModelConfig.from_dict({**config.to_dict(), "vf_share_layers": True})


def _features_model(
    space: gym.Space, action_space: gym.Space, config: ModelConfig, name: str
) -> ModelV2:
    """The catalog model without a logits layer: its outputs are its features."""
    model = ModelCatalog.get_model_v2(space, action_space, None, config, name=name)
    if not model.num_outputs:
        raise ValueError(f"{name}: the catalog model for {space} reports no feature size")
    return model


def uniform_actions(q: torch.Tensor, masked: bool) -> torch.Tensor:
    """One uniform action per row of the Q-values ``[B, n]``: among the allowed ones (finite
    Q) when the module is masked, else among all ``n`` (one cheap draw)."""
    if masked:
        return torch.multinomial(torch.isfinite(q).float(), 1).squeeze(1)
    return torch.randint(q.shape[1], (q.shape[0],), device=q.device)


def _cat(a: Any, b: Any) -> Any:
    return tree_map(lambda x, y: torch.cat([torch.as_tensor(x), torch.as_tensor(y)]), a, b)


class _QModule(TorchRLModule, InferenceOnlyAPI, TargetNetworkAPI, QNetAPI):  # type: ignore[misc]
    """What the DQN and SAC modules share: spaces, the observation split and target nets."""

    #: ``[(main attribute, target attribute)]``: the target networks of the module.
    _TARGETS: tuple[tuple[str, str], ...] = ()
    _WHO = "RLBlocksQModule"

    def _observation_space(self, allow_mask: bool) -> Box:
        """The model's observation Box; sets ``self.masked``."""
        space = self.observation_space
        if space is None or self.action_space is None:
            raise ValueError(f"{self._WHO} needs observation_space and action_space")
        self.masked = is_mask_space(space)
        if self.masked and not allow_mask:
            raise ValueError(f"{self._WHO}: '{MASK_KEY}' observations are not supported here")
        model_space = space[OBS_KEY] if self.masked else space
        if not isinstance(model_space, Box):
            raise ValueError(
                f"{self._WHO} needs Box observations (flat or image), got {model_space}; add "
                "rlblocks.rllib.env_to_module(...) as the env_to_module_connector to flatten "
                "nested Dict/Tuple/Discrete observations"
            )
        return model_space

    def _split(self, obs: Any) -> tuple[dict[str, Any], torch.Tensor | None]:
        """``({"obs": float tensor}, mask or None)`` of a batch's observations."""
        mask = None
        if self.masked:
            if not isinstance(obs, dict) or not {OBS_KEY, MASK_KEY} <= set(obs):
                raise ValueError(
                    f"{self._WHO}: observations must be dicts with the keys {[MASK_KEY, OBS_KEY]}"
                )
            mask = torch.as_tensor(obs[MASK_KEY])
            obs = obs[OBS_KEY]
        obs = torch.as_tensor(obs)
        if not torch.is_floating_point(obs):
            obs = obs.float()
        return {"obs": obs, "is_training": self.training}, mask

    # --- TargetNetworkAPI / InferenceOnlyAPI ----------------------------------------------------
    def make_target_networks(self) -> None:
        """Deep copies of the critics (frozen; RLlib's learner syncs them)."""
        for main, target in self._TARGETS:
            if hasattr(self, main):
                net = copy.deepcopy(getattr(self, main))
                net.requires_grad_(False)
                setattr(self, target, net)

    def get_target_network_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        return [(getattr(self, m), getattr(self, t)) for m, t in self._TARGETS if hasattr(self, t)]

    def get_non_inference_attributes(self) -> list[str]:
        return [target for _, target in self._TARGETS]

    def get_initial_state(self) -> dict[str, Any]:
        return {}


class RLBlocksDQNRLModule(_QModule):
    """An RLlib DQN module whose Q-network is an rlblocks model with a (dueling) Q head.

    Attributes:
        q_model: :class:`DuelingQModel` around the catalog model's features
            (``dueling=True``), or the catalog model with ``n * num_atoms`` outputs.
        target_q_model: Its target copy (learner side only).
    """

    _TARGETS = (("q_model", "target_q_model"),)
    _WHO = "RLBlocksDQNRLModule"

    def setup(self) -> None:
        """Builds the Q-network from the rlblocks config and RLlib's DQN keys."""
        raw = self.model_config if isinstance(self.model_config, dict) else {}
        config = _q_config(self.model_config, self._WHO)
        model_space = self._observation_space(allow_mask=True)
        if not isinstance(self.action_space, Discrete):
            raise ValueError(f"{self._WHO} needs a Discrete action space, got {self.action_space}")
        self.uses_dueling = bool(raw.get("dueling", True))
        self.uses_double_q = bool(raw.get("double_q", True))
        self.num_atoms = int(raw.get("num_atoms", 1))
        self.v_min, self.v_max = float(raw.get("v_min", -10.0)), float(raw.get("v_max", 10.0))
        if self.num_atoms > 1 and self.masked:
            raise ValueError(f"{self._WHO}: action masks with num_atoms > 1 are not supported")
        self.n_actions = n = int(self.action_space.n)
        if self.uses_dueling:
            self.q_model: ModelV2 = DuelingQModel(
                model_space,
                self.action_space,
                n,
                config,
                "q_model",
                base_model=_features_model(model_space, self.action_space, config, "q_features"),
                num_atoms=self.num_atoms,
                v_min=self.v_min,
                v_max=self.v_max,
            )
        else:
            self.q_model = ModelCatalog.get_model_v2(
                model_space, self.action_space, n * self.num_atoms, config, name="q_model"
            )
        self.register_buffer(
            "support", torch.linspace(self.v_min, self.v_max, self.num_atoms), persistent=False
        )
        self.epsilon_schedule = Scheduler(
            fixed_value_or_schedule=raw.get("epsilon", [(0, 1.0), (10000, 0.05)]), framework="torch"
        )
        self.action_dist_cls = RLBlocksDistribution.bind(Categorical, n)

    # --- Q-values --------------------------------------------------------------------------
    def _q(self, batch: dict[str, Any], model: ModelV2) -> dict[str, torch.Tensor]:
        inputs, mask = self._split(batch[Columns.OBS])
        out, _ = model(inputs)
        b = out.shape[0]
        if isinstance(model, DuelingQModel):
            logits = model.get_q_logits(out)  # [B, n, atoms]
        else:
            logits = out.reshape(b, self.n_actions, self.num_atoms)
        result: dict[str, torch.Tensor] = {}
        if self.num_atoms == 1:
            q = logits.squeeze(-1)
        else:
            probs = torch.softmax(logits, dim=-1)
            q = (probs * self.support).sum(-1)
            result.update({ATOMS: self.support, QF_LOGITS: logits, QF_PROBS: probs})
        if mask is not None:
            mask = mask.to(q.device)
            if mask.shape != q.shape:
                raise ValueError(
                    f"{self._WHO}: {MASK_KEY} of shape {tuple(mask.shape)} does not "
                    f"match the Q-values' {tuple(q.shape)}"
                )
            q = q.masked_fill(mask <= 0, float("-inf"))  # RLlib's learner reads -inf as masked
        result[QF_PREDS] = q
        return result

    def compute_q_values(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """``{"qf_preds": [B, n]}`` (plus ``atoms``, ``qf_logits``, ``qf_probs`` when
        distributional); masked actions are ``-inf``."""
        return self._q(batch, self.q_model)

    def forward_target(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, torch.Tensor]:
        """:meth:`compute_q_values` of the target network."""
        return self._q(batch, self.target_q_model)

    # --- forward passes -----------------------------------------------------------------------
    def _greedy(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.compute_q_values(batch)[QF_PREDS]
        return q, q.argmax(dim=-1)

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTIONS: self._greedy(batch)[1]}

    def _forward_exploration(
        self, batch: dict[str, Any], t: int = 0, **kwargs: Any
    ) -> dict[str, Any]:
        """Epsilon-greedy: with probability ``epsilon(t)`` a uniform action (among the
        unmasked ones), else the greedy one."""
        q, greedy = self._greedy(batch)
        self.epsilon_schedule.update(t)
        epsilon = float(self.epsilon_schedule.get_current_value())
        random = uniform_actions(q, self.masked)
        explore = torch.rand(q.shape[0], device=q.device) < epsilon
        return {Columns.ACTIONS: torch.where(explore, random, greedy)}

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """What ``DQNTorchLearner`` reads: Q of the batch (and of the next observations for
        double Q: one call on both), the target network's Q of the next observations, and
        the distributions when ``num_atoms > 1``."""
        if self.inference_only:
            raise RuntimeError(f"{self._WHO}: an inference-only module cannot be trained")
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        out: dict[str, Any] = {}
        if self.uses_double_q:
            both = self.compute_q_values({Columns.OBS: _cat(obs, next_obs)})
            out[QF_PREDS], out[QF_NEXT_PREDS] = torch.chunk(both[QF_PREDS], 2, dim=0)
            if self.num_atoms > 1:
                out[QF_LOGITS] = torch.chunk(both[QF_LOGITS], 2, dim=0)[0]
                out[QF_PROBS] = torch.chunk(both[QF_PROBS], 2, dim=0)[0]
        else:
            current = self.compute_q_values({Columns.OBS: obs})
            out[QF_PREDS] = current[QF_PREDS]
            if self.num_atoms > 1:
                out[QF_LOGITS], out[QF_PROBS] = current[QF_LOGITS], current[QF_PROBS]
        target = self.forward_target({Columns.OBS: next_obs})
        out[QF_TARGET_NEXT_PREDS] = target[QF_PREDS]
        if self.num_atoms > 1:
            out[ATOMS] = target[ATOMS]
            out[QF_TARGET_NEXT_PROBS] = target[QF_PROBS]
        return out


class RLBlocksSACRLModule(_QModule):
    """An RLlib SAC module: an rlblocks actor and rlblocks critics (twin with ``twin_q``).

    Attributes:
        pi: The actor (catalog model; its outputs feed :attr:`dist_fn`).
        qf, qf_twin: The critics (:class:`ContinuousActionQModel` for Box actions, a
            catalog model with one output per action for Discrete ones).
        pi_encoder, qf_encoder, qf_twin_encoder: Empty: the rlblocks models include their
            encoders (RLlib's SAC learner reads these names when it groups parameters).
    """

    _TARGETS = (("qf", "target_qf"), ("qf_twin", "target_qf_twin"))
    _WHO = "RLBlocksSACRLModule"

    def setup(self) -> None:
        """Builds the actor and critics from the rlblocks config and RLlib's ``twin_q``."""
        raw = self.model_config if isinstance(self.model_config, dict) else {}
        config = _q_config(self.model_config, self._WHO)
        model_space = self._observation_space(allow_mask=False)
        space = self.action_space
        self.twin_q = bool(raw.get("twin_q", True))
        self.discrete = isinstance(space, Discrete)
        if self.discrete:
            if not self.twin_q:
                raise ValueError(f"{self._WHO}: RLlib's discrete SAC loss needs twin_q=True")
            dist_fn: Any = Categorical
            num_outputs = int(space.n)
        elif isinstance(space, Box) and space.dtype.kind == "f":
            if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
                raise ValueError(
                    f"{self._WHO}: SAC squashes actions into the Box bounds, "
                    f"which must be finite: {space}"
                )
            if config.custom_action_dist:
                dist_fn, num_outputs = ModelCatalog.get_action_dist(space, config)
            else:
                dist_fn = SquashedGaussian
                num_outputs = SquashedGaussian.required_model_output_shape(space, config)
        else:
            raise ValueError(
                f"{self._WHO} needs a Box (float) or Discrete action space, got {space}"
            )
        self.dist_fn = dist_fn
        self.pi = ModelCatalog.get_model_v2(model_space, space, num_outputs, config, name="pi")
        empty = torch.nn.ModuleList
        self.pi_encoder = empty()
        if not self.inference_only:  # env runners only act: no critics there
            self.qf, self.qf_encoder = self._critic(model_space, config, "qf"), empty()
            if self.twin_q:
                self.qf_twin = self._critic(model_space, config, "qf_twin")
                self.qf_twin_encoder = empty()
        # SquashedGaussian's default bounds, [-1, 1]: RLlib's env runner unsquashes them to
        # the Box bounds (normalize_actions, its default), as for RLlib's own SAC module
        self.action_dist_cls = RLBlocksDistribution.bind(dist_fn, num_outputs, self.pi)

    def _critic(self, model_space: Box, config: ModelConfig, name: str) -> ModelV2:
        space = self.action_space
        if self.discrete:
            return ModelCatalog.get_model_v2(model_space, space, int(space.n), config, name=name)
        base = _features_model(model_space, space, config, f"{name}_features")
        return ContinuousActionQModel(model_space, space, None, config, name, base_model=base)

    def get_non_inference_attributes(self) -> list[str]:
        names = ["qf", "target_qf", "qf_encoder"]
        if self.twin_q:
            names += ["qf_twin", "target_qf_twin", "qf_twin_encoder"]
        return names

    # --- networks -----------------------------------------------------------------------------
    def _plain(self, model: torch.nn.Module) -> FCLayers | None:
        """``model`` as plain tensors (the same arithmetic and autograd graph without
        ``nn.Module`` calls, which cost more than these small networks' arithmetic), or
        None: not the catalog's fully connected network, or a hook or a replaced layer."""
        cache = self.__dict__.setdefault("_plain_layers", {})  # not a submodule
        entry = cache.get(id(model))
        if entry is None or entry[0] is not model:
            entry = cache[id(model)] = (model, FCLayers.from_model(model))
        layers = entry[1]
        return layers if layers is not None and layers.matches_model(training=True) else None

    def _pi(self, obs: Any) -> torch.Tensor:
        inputs = self._split(obs)[0]
        plain = self._plain(self.pi)
        if plain is not None:
            return plain.forward_graph(inputs["obs"])
        out, _ = self.pi(inputs)
        return out

    def _critic_q(self, critic: ModelV2, obs: Any, actions: Any = None) -> torch.Tensor:
        """``[B]`` Q-values of ``actions`` (Box), or ``[B, n]`` of every action (Discrete)."""
        inputs = self._split(obs)[0]
        if not isinstance(critic, ContinuousActionQModel):  # Discrete: Q of every action
            plain = self._plain(critic)
            return plain.forward_graph(inputs["obs"]) if plain is not None else critic(inputs)[0]
        base, head = self._plain(critic.base_model), self._plain(critic.q_head)
        if base is None or head is None or critic._forward_hooks or critic._forward_pre_hooks:
            features, _ = critic(inputs)
            return critic.get_single_q_value(features, torch.as_tensor(actions)).squeeze(-1)
        features = base.forward_graph(inputs["obs"])
        action = torch.as_tensor(actions)
        flat_action = action.reshape(action.shape[0], -1).to(features.dtype)
        return head.forward_graph(torch.cat([features, flat_action], dim=-1)).squeeze(-1)

    def compute_q_values(self, batch: dict[str, Any]) -> torch.Tensor:
        """``min`` over the critics (one without ``twin_q``) of ``Q(obs, actions)``."""
        q = self._critic_q(self.qf, batch[Columns.OBS], batch.get(Columns.ACTIONS))
        if self.twin_q:
            q = torch.min(
                q, self._critic_q(self.qf_twin, batch[Columns.OBS], batch.get(Columns.ACTIONS))
            )
        return q

    def forward_target(self, batch: dict[str, Any], **kwargs: Any) -> torch.Tensor:
        """:meth:`compute_q_values` of the target critics."""
        q = self._critic_q(self.target_qf, batch[Columns.OBS], batch.get(Columns.ACTIONS))
        if self.twin_q:
            q = torch.min(
                q,
                self._critic_q(self.target_qf_twin, batch[Columns.OBS], batch.get(Columns.ACTIONS)),
            )
        return q

    # --- forward passes -----------------------------------------------------------------------
    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self._pi(batch[Columns.OBS])}

    def _forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward_inference(batch)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """What ``SACTorchLearner`` reads (continuous or discrete form)."""
        if self.inference_only:
            raise RuntimeError(f"{self._WHO}: an inference-only module cannot be trained")
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        out: dict[str, Any] = {}
        if self.discrete:
            logits_next = self._pi(next_obs)
            probs_next = torch.softmax(logits_next, dim=-1)
            out[ACTION_PROBS_NEXT] = probs_next
            out[ACTION_LOG_PROBS_NEXT] = torch.log_softmax(logits_next, dim=-1)
            out[QF_TARGET_NEXT] = self.forward_target({Columns.OBS: next_obs})
            out[QF_PREDS] = self._critic_q(self.qf, obs)
            out[QF_TWIN_PREDS] = self._critic_q(self.qf_twin, obs)
            logits = self._pi(obs)
            out[ACTION_PROBS] = torch.softmax(logits, dim=-1)
            out[ACTION_LOG_PROBS] = torch.log_softmax(logits, dim=-1)
            return out
        actions = batch[Columns.ACTIONS]
        out[QF_PREDS] = self._critic_q(self.qf, obs, actions)
        if self.twin_q:
            out[QF_TWIN_PREDS] = self._critic_q(self.qf_twin, obs, actions)
        logits = self._pi(obs)
        with torch.no_grad():  # the next step's terms only enter the (detached) target
            logits_next = self._pi(next_obs)
        out[Columns.ACTION_DIST_INPUTS], out[ACTION_DIST_INPUTS_NEXT] = logits, logits_next
        dist_cls = self.get_train_action_dist_cls()
        resampled, out["logp_resampled"] = dist_cls.from_logits(logits).rsample_and_logp()
        with torch.no_grad():
            next_actions, out["logp_next_resampled"] = dist_cls.from_logits(
                logits_next
            ).sample_and_logp()
        critics = [self.qf] + ([self.qf_twin] if self.twin_q else [])
        for critic in critics:  # the actor's loss must not train the critics
            critic.requires_grad_(False)
        try:
            out["q_curr"] = self.compute_q_values({Columns.OBS: obs, Columns.ACTIONS: resampled})
        finally:
            for critic in critics:
                critic.requires_grad_(True)
        with torch.no_grad():
            out["q_target_next"] = self.forward_target(
                {Columns.OBS: next_obs, Columns.ACTIONS: next_actions}
            )
        return out
