"""gSDE: generalized state-dependent exploration for SAC's squashed Gaussian actor.

Raffin, Kober and Stulp (2021), "Smooth Exploration for Robotic Learning". The pre-squash
action is ``u = mu(s) + phi(s) @ W``: ``mu(s)`` the actor's means, ``phi(s)`` its last
hidden features (``[B, L]``; SAC trains them through the noise and the variance too, as
Stable-Baselines3's SAC actor does with ``learn_features=True``; ``learn_features=False``,
its on-policy default, detaches them) and ``W`` an ``[L, A]`` matrix of independent
``N(0, sigma_ij^2)`` draws. Given ``s``, ``u`` is Gaussian with independent coordinates::

    u_i ~ N(mu_i(s), sum_j phi_j(s)^2 * sigma_ji^2)

which is the density SAC's losses score (then the ``tanh`` correction, as
:class:`~rlblocks.distributions.SquashedGaussian`); the entropy target is unchanged.
``sigma`` is learnt (``log_std``, ``[L, A]``, or ``[L, 1]`` without ``full_std``;
``expln`` in place of ``exp`` with ``use_expln``).

While acting, each env (row) holds its own ``W``, redrawn for every row at the start of
each collection round of ``train_freq`` env steps (``sde_sample_freq=-1``, as
Stable-Baselines3 redraws at the start of each rollout) and, with ``sde_sample_freq=k``,
also every ``k`` steps of each env. Between draws the noise of a row is a fixed function of
the state, so nearby states get nearby actions. Each gradient step draws one fresh ``W``
(reparameterised: ``W = sigma * eps``, so gradients reach ``log_std``) for its whole batch.

Examples:
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> noise = StateDependentNoise(latent_dim=4, action_dim=2, log_std_init=-1.0, round_steps=4)
    >>> phi = torch.ones(3, 4)
    >>> noise.presquash_std(phi).shape, noise.act_noise(phi, timestep=0).shape
    (torch.Size([3, 2]), torch.Size([3, 2]))
    >>> bool((noise.act_noise(phi, 0) == noise.act_noise(phi, 1)).all())  # same round
    True
"""

from __future__ import annotations

import logging
import math
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rlblocks.distributions.base import SMALL_NUMBER
from rlblocks.models.fcnet import FullyConnectedNetwork
from rlblocks.models.modelv2 import ModelV2

__all__ = ["SDE_NOTE", "StateDependentNoise", "build_sde", "last_features"]

logger = logging.getLogger("rlblocks.train")

#: Added to the pre-squash variance (Stable-Baselines3's epsilon).
VARIANCE_EPSILON = 1e-6
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

#: The start-of-run line of a gSDE run: which paths serve it.
SDE_NOTE = (
    "gSDE exploration (use_sde): SAC's closed-form update and numpy acting path decline it; "
    "torch's update and a torch forward of the actor serve this run"
)


class StateDependentNoise(nn.Module):
    """gSDE's learnt ``log_std`` and the acting envs' exploration matrices.

    Args:
        latent_dim: ``L``, the size of the actor's last hidden features.
        action_dim: ``A``, the action's size.
        log_std_init: The initial ``log_std`` (every entry).
        full_std: One ``sigma`` per (feature, action) pair, else one per feature.
        use_expln: ``sigma = expln(log_std)`` in place of ``exp(log_std)``.
        sample_freq: ``sde_sample_freq``: -1 or a number of steps of each env.
        round_steps: ``train_freq``: env steps (all envs together) of a collection round.
        learn_features: Whether gradients reach the features (else they are detached).

    Attributes:
        log_std: The trained parameter. weights: The acting rows' matrices ``[n, L, A]``
            (None before the first draw). drawn_at: The schedule's key of their draw.
    """

    def __init__(
        self,
        latent_dim: int,
        action_dim: int,
        log_std_init: float = -3.0,
        full_std: bool = True,
        use_expln: bool = False,
        sample_freq: int = -1,
        round_steps: int = 1,
        learn_features: bool = True,
    ) -> None:
        super().__init__()
        cols = action_dim if full_std else 1
        self.log_std = nn.Parameter(torch.full((latent_dim, cols), float(log_std_init)))
        self.latent_dim, self.action_dim = int(latent_dim), int(action_dim)
        self.use_expln = bool(use_expln)
        self.sample_freq, self.round_steps = int(sample_freq), max(1, int(round_steps))
        self.learn_features = bool(learn_features)
        self.weights: torch.Tensor | None = None
        self.drawn_at: tuple[int, int] | None = None

    def std(self) -> torch.Tensor:
        """``sigma``, ``[L, A]`` (differentiable in ``log_std``)."""
        x = self.log_std
        if self.use_expln:  # exp below 0, log1p(x) + 1 above: continuous, slow growth
            std = torch.where(
                x <= 0, torch.exp(x.clamp(max=0.0)), torch.log1p(x.clamp(min=0.0)) + 1.0
            )
        else:
            std = torch.exp(x)
        return std.expand(self.latent_dim, self.action_dim)

    def draw(self, n: int) -> torch.Tensor:
        """``n`` independent matrices ``W ~ N(0, sigma^2)``, ``[n, L, A]``, reparameterised."""
        std = self.std()
        return std * torch.randn((n, *std.shape), dtype=std.dtype, device=std.device)

    def _phi(self, features: torch.Tensor) -> torch.Tensor:
        return features if self.learn_features else features.detach()

    def presquash_std(self, features: torch.Tensor) -> torch.Tensor:
        """The standard deviation of ``u`` given the features: ``sqrt(phi^2 @ sigma^2 + eps)``
        (``[B, A]``)."""
        variance = (self._phi(features) ** 2) @ (self.std() ** 2)
        return torch.sqrt(variance + VARIANCE_EPSILON)

    def presquash_logp(
        self, mean: torch.Tensor, features: torch.Tensor, u: torch.Tensor
    ) -> torch.Tensor:
        """``log N(u; mean, presquash_std(features)^2)`` summed over the action (``[B]``)."""
        std = self.presquash_std(features)
        z = (u - mean) / std
        return (-0.5 * z * z - torch.log(std) - _HALF_LOG_2PI).sum(-1)

    def squashed_logp(
        self, mean: torch.Tensor, features: torch.Tensor, u: torch.Tensor
    ) -> torch.Tensor:
        """The log-density of ``tanh(u)`` in ``[-1, 1]``: :meth:`presquash_logp` less
        ``sum log(1 - tanh(u)^2 + 1e-6)`` (SquashedGaussian's correction)."""
        t = torch.tanh(u)
        return self.presquash_logp(mean, features, u) - torch.log(1.0 - t * t + SMALL_NUMBER).sum(
            -1
        )

    def rsample_and_logp(
        self, mean: torch.Tensor, features: torch.Tensor, weights: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tanh(u), log-density)`` for ``u = mean + phi @ weights`` (one ``[L, A]``
        matrix for the batch; gradients reach ``mean`` and, through ``weights`` and the
        density, ``log_std`` and, with ``learn_features``, the features)."""
        u = mean + self._phi(features) @ weights
        return torch.tanh(u), self.squashed_logp(mean, features, u)

    def sample(
        self, out: torch.Tensor, features: torch.Tensor, weights: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`rsample_and_logp` for an actor output ``out`` (its first ``A`` columns are
        the means), with ``weights`` or, None, a fresh draw."""
        w = self.draw(1)[0] if weights is None else weights
        return self.rsample_and_logp(out[:, : self.action_dim], features, w)

    @torch.no_grad()
    def act(self, out: torch.Tensor, features: torch.Tensor, timestep: int) -> torch.Tensor:
        """Exploring actions in ``[-1, 1]``: ``tanh(mean + phi @ W_row)`` per row
        (:meth:`act_noise`), for an actor output ``out``."""
        return torch.tanh(out[:, : self.action_dim] + self.act_noise(features, timestep))

    def _key(self, timestep: int, rows: int) -> tuple[int, int]:
        """Which draw the schedule is at for an act call at ``timestep``."""
        start = timestep // self.round_steps
        if self.sample_freq < 1:
            return start, 0
        return start, (timestep - start * self.round_steps) // rows // self.sample_freq

    @torch.no_grad()
    def act_noise(self, features: torch.Tensor, timestep: int) -> torch.Tensor:
        """``phi(s_r) @ W_r`` for each row ``r`` (an env), ``[B, A]``; the rows' matrices
        are redrawn when the schedule's key moves or the number of rows changes."""
        rows = int(features.shape[0])
        key = self._key(int(timestep), rows)
        if self.weights is None or self.weights.shape[0] != rows or key != self.drawn_at:
            self.weights = self.draw(rows).detach()
            self.drawn_at = key
        return torch.bmm(features[:, None, :].to(self.weights.dtype), self.weights)[:, 0]

    def state(self) -> dict[str, Any]:
        """``log_std``, the acting matrices and their key (a checkpoint's ``sde`` entry)."""
        return {
            "log_std": self.log_std.detach().clone(),
            "weights": None if self.weights is None else self.weights.clone(),
            "drawn_at": None if self.drawn_at is None else list(self.drawn_at),
        }

    def load(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state` (the acting matrices too: a resumed run keeps its noise
        until the schedule's next draw).

        Raises:
            ValueError: A ``log_std`` of another shape.
        """
        log_std = torch.as_tensor(state["log_std"], dtype=torch.float32)
        if log_std.shape != self.log_std.shape:
            raise ValueError(
                f"SAC state: sde.log_std has shape {tuple(log_std.shape)}, this learner's "
                f"{tuple(self.log_std.shape)} (another model, full_std or action size)"
            )
        with torch.no_grad():
            self.log_std.copy_(log_std)
        w = state.get("weights")
        self.weights = None if w is None else torch.as_tensor(w).to(self.log_std.device)
        at = state.get("drawn_at")
        self.drawn_at = None if at is None else (int(at[0]), int(at[1]))


def last_features(actor: nn.Module) -> torch.Tensor:
    """The fully connected ``actor``'s last hidden features of its latest forward (``phi``)."""
    features = actor.__dict__.get("_features")
    assert isinstance(features, torch.Tensor), "call the actor before reading its features"
    return features


def build_sde(
    actor: ModelV2, obs_space: gym.Space, action_space: gym.Space, config: Any
) -> StateDependentNoise:
    """gSDE for ``actor`` (the config's ``log_std_init``, ``full_std``, ``use_expln``,
    ``sde_sample_freq``, ``train_freq``), on the actor's device; logs that the closed-form
    update and the numpy acting path decline it.

    Raises:
        ValueError: A Discrete action space, or an actor that is not the default fully
            connected network with a final linear layer (gSDE reads its last hidden
            features).
    """
    if not isinstance(action_space, gym.spaces.Box):
        raise ValueError(
            f"use_sde: gSDE perturbs continuous actions; the action space is {action_space} "
            "(set use_sde=False)"
        )
    if not isinstance(actor, FullyConnectedNetwork) or actor._logits is None:
        raise ValueError(
            "use_sde: gSDE reads the actor's last hidden features; it needs the default fully "
            f"connected actor with a final linear layer, got {type(actor).__name__}"
            + (" with no_final_linear" if isinstance(actor, FullyConnectedNetwork) else "")
            + " (drop custom_model / no_final_linear, or set use_sde=False)"
        )
    device = next(actor.parameters()).device
    with torch.no_grad():
        actor({"obs": torch.zeros((1, *(obs_space.shape or ())), device=device)}, [], None)
    features = last_features(actor)
    noise = StateDependentNoise(
        int(features.shape[-1]),
        int(action_space.shape[0]),
        config.log_std_init,
        config.full_std,
        config.use_expln,
        config.sde_sample_freq,
        config.train_freq,
    ).to(device)
    logger.info("SAC: %s", SDE_NOTE)
    return noise
