"""Collecting rollouts: gymnasium vector envs -> C++ preprocessor -> filter -> policy -> a
time-major batch.

:class:`EnvRunner` owns the vector env and everything that lives across iterations: the
current (preprocessed, filtered) observations, the recurrent state, the previous
actions/rewards the model reads, and the running episode statistics. Each
:meth:`EnvRunner.collect` steps every env ``T`` times and returns a :class:`SampleBatch` of
``[T, N, ...]`` arrays.

Episode boundaries. The vector envs the trainer builds reset a finished env in the same
step (gymnasium's ``SAME_STEP`` autoreset): the returned observation starts the next episode
and the last observation of the finished one is ``info["final_obs"]``. Vector envs with
``NEXT_STEP`` autoreset (gymnasium's default, ALE's and CartPole's native vector envs,
:func:`rlblocks.wrappers.vector.make_vector_env`) return the final observation itself and
reset on the following step, ignoring its action; that step is recorded with
``valid=False`` and left out of losses, advantages, timestep counts and episode statistics.
A *truncated* (time-limit) episode is bootstrapped: ``gamma * V(final_obs)`` is added to its
last reward, so GAE can treat every episode end as terminal. At an episode start the
recurrent state and the previous actions/rewards are reset to the model's initial values.

Sequences (recurrent models). Each env's steps are cut into sequences of at most
``max_seq_len`` steps that never cross an episode boundary or the fragment's start; the
state at each sequence's first step is recorded (``seq_starts`` / ``seq_states``), which is
exactly the ``state_in`` the learner feeds that sequence.

Examples:
    >>> import numpy as np
    >>> from rlblocks.catalog import ModelCatalog
    >>> from rlblocks.filters import NoFilter
    >>> from rlblocks.train.policy import Policy
    >>> from rlblocks.train.trainer_config import PPOConfig
    >>> config = PPOConfig(env="CartPole-v1", num_envs=2)
    >>> venv = vector_env_from_config(config)
    >>> prep = ModelCatalog.get_preprocessor_for_space(venv.single_observation_space)
    >>> policy = Policy(prep.observation_space, venv.single_action_space, config, "cpu")
    >>> runner = EnvRunner(config, policy, prep, NoFilter(), seed=0, venv=venv)
    >>> batch = runner.collect(5)
    >>> batch.obs.shape, batch.num_steps
    ((5, 2, 4), 10)
    >>> runner.close()
"""

from __future__ import annotations

import pickle
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, VectorEnv

from rlblocks.filters import NoFilter, check_passthrough
from rlblocks.nest import tree_map
from rlblocks.preprocessors import Preprocessor
from rlblocks.spaces import clip_actions
from rlblocks.train.envs import vector_env_from_config
from rlblocks.train.policy import Policy
from rlblocks.train.trainer_config import PPOConfig
from rlblocks.wrappers.env_errors import non_finite_observation
from rlblocks.wrappers.vector_steps import Preprocessed, StepResult, VectorSteps

__all__ = ["EnvRunner", "RewardScaler", "SampleBatch", "env_snapshot"]


@dataclass
class SampleBatch:
    """One rollout, time-major: every array is ``[T, N, ...]`` (T steps of N envs).

    Attributes:
        obs: Model inputs (preprocessed and filtered observations).
        actions: Sampled actions (the action space's structure; Box actions unclipped).
        logp, vf_preds: Log-likelihood of each action and the value estimate at sampling.
        dist_inputs: The model outputs the actions were drawn from (for the KL term).
        rewards: Rewards (truncated episodes: plus ``gamma * V(final_obs)``).
        dones: Whether the episode ended at this step (terminated or truncated).
        valid: ``[T, N]`` False for the reset steps of ``NEXT_STEP`` vector envs (not a
            transition of any episode); None when every step is valid.
        prev_actions, prev_rewards: ``[T, N, n, ...]`` previous actions / rewards the model
            read (None when it reads none).
        last_values: ``[N]`` value of the observation after the last step.
        seq_starts: ``[S, 2]`` (t, env) of each sequence's first step (recurrent models).
        seq_states: State at each sequence start, one ``[S, ...]`` array per state tensor.
        episode_returns, episode_lengths: Episodes that finished during this rollout.
    """

    obs: np.ndarray
    actions: Any
    logp: np.ndarray
    vf_preds: np.ndarray
    dist_inputs: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    prev_actions: np.ndarray | None
    prev_rewards: np.ndarray | None
    last_values: np.ndarray
    seq_starts: np.ndarray
    seq_states: list[np.ndarray]
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    valid: np.ndarray | None = None

    @property
    def num_steps(self) -> int:
        """Environment steps that are transitions (``T * N`` less the reset steps)."""
        return int(self.rewards.size if self.valid is None else self.valid.sum())


def _stack_time(steps: list[Any]) -> Any:
    return tree_map(lambda *xs: np.stack(xs), *steps)


class RewardScaler:
    """The reward half of Stable-Baselines3's ``VecNormalize``: each env's discounted return
    ``R = gamma * R + r`` feeds a running variance (float64, parallel merge of each step's
    batch; count starts at 1e-4, var at 1, as SB3's ``RunningMeanStd``); rewards are divided
    by ``sqrt(var + 1e-8)``, then clipped to ``[-clip, clip]``; ``R`` restarts at episode ends.

    Args:
        num_envs: Envs stepped together.
        gamma: The discount of the running return.
        normalize: Scale by the running return std (else only clip).
        clip: Clip bound after scaling; None: no clipping.

    Examples:
        >>> scaler = RewardScaler(1, gamma=0.0, normalize=True, clip=None)
        >>> for r in (1.0, 3.0, 1.0, 3.0):
        ...     out = scaler(np.array([r], np.float32), np.array([False]))
        >>> round(float(scaler.var), 3), round(float(out[0]), 2)
        (1.0, 3.0)
    """

    def __init__(self, num_envs: int, gamma: float, normalize: bool, clip: float | None) -> None:
        self.gamma, self.normalize, self.clip = float(gamma), bool(normalize), clip
        self.returns = np.zeros(num_envs, np.float64)
        self.count, self.mean, self.var = 1e-4, 0.0, 1.0

    def _update(self, x: np.ndarray) -> None:
        if x.size == 0:
            return
        b_mean, b_var, b_count = float(x.mean()), float(x.var()), float(x.size)
        delta, total = b_mean - self.mean, self.count + b_count
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.mean, self.var, self.count = self.mean + delta * b_count / total, m2 / total, total

    def __call__(
        self, rewards: np.ndarray, dones: np.ndarray, valid: np.ndarray | None = None
    ) -> np.ndarray:
        """The training rewards of one step (``valid``: envs whose step is real)."""
        out = np.asarray(rewards, np.float64)
        if self.normalize:
            self.returns = self.returns * self.gamma + out
            self._update(self.returns if valid is None else self.returns[valid])
            out = out / np.sqrt(self.var + 1e-8)
        if self.clip is not None:
            out = np.clip(out, -self.clip, self.clip)
        self.returns[np.asarray(dones, bool)] = 0.0
        return out.astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        """The running statistics and the returns in progress."""
        return {
            "count": self.count,
            "mean": self.mean,
            "var": self.var,
            "returns": self.returns.copy(),
        }

    def load_state_dict(self, state: dict[str, Any], returns: bool = True) -> None:
        """Restores :meth:`state_dict` (``returns=False``: the stats only, for fresh envs)."""
        self.count, self.mean, self.var = (float(state[k]) for k in ("count", "mean", "var"))
        if returns:
            self.returns = np.asarray(state["returns"], np.float64).copy()


def env_snapshot(venv: Any) -> bytes | None:
    """The pickled list of sub-envs of a sync or async vector env (None for native vector
    envs, or if an env cannot be pickled)."""
    envs = getattr(venv, "envs", None)
    try:
        if envs is not None:
            return pickle.dumps(envs)
        if isinstance(venv, AsyncVectorEnv):
            blobs = venv.call("rlblocks_snapshot")
            if all(isinstance(b, bytes) for b in blobs):
                return pickle.dumps([pickle.loads(b) for b in blobs])
    except Exception:  # any env attribute may refuse pickling (sockets, emulators, ...)
        return None
    return None


class EnvRunner:
    """Steps a vector env with a policy and returns time-major batches.

    Args:
        config: The PPO config.
        policy: The policy (its model is used in eval mode).
        preprocessor: The preprocessor of the env's observation space.
        obs_filter: ``NoFilter`` or ``MeanStdFilter`` over the preprocessed observations
            (passing through at least :func:`~rlblocks.filters.unfiltered_columns` of the
            preprocessor's layout).
        seed: Seeds the envs (env ``i`` gets ``seed + i`` at the first reset); None: unseeded.
        venv: A vector env to use instead of making one (restoring).

    Raises:
        ValueError: A ``MeanStdFilter`` that would normalise a column the model reads as a
            count, an index or the action mask.
    """

    def __init__(
        self,
        config: PPOConfig,
        policy: Policy,
        preprocessor: Preprocessor,
        obs_filter: Any,
        seed: int | None,
        venv: VectorEnv | None = None,
    ) -> None:
        check_passthrough(obs_filter, preprocessor.layout)
        self.config = config
        self.policy = policy
        self.preprocessor = preprocessor
        self.filter = obs_filter
        self.venv = venv if venv is not None else vector_env_from_config(config)
        self.num_envs = int(self.venv.num_envs)
        self.episode_returns: deque[float] = deque(maxlen=config.metrics_smoothing_episodes)
        self.episode_lengths: deque[int] = deque(maxlen=config.metrics_smoothing_episodes)
        self.episodes_total = 0
        self._state = policy.initial_state(self.num_envs)
        n_a, n_r = policy.n_prev_actions, policy.n_prev_rewards
        self._prev_actions = (
            np.broadcast_to(
                policy.initial_prev_action, (self.num_envs, n_a, *policy.action_shape)
            ).copy()
            if n_a
            else None
        )
        self._prev_rewards = np.zeros((self.num_envs, n_r), np.float32) if n_r else None
        self._obs: np.ndarray | None = None
        self._seed = seed
        # the env calls and the per-step bookkeeping (valid rows, episode starts, returns); a
        # plain SyncVectorEnv's sub-envs are stepped directly (the same calls, without its
        # batching of observations and infos: the preprocessor batches the list)
        self.steps = VectorSteps(
            self.venv,
            config.env_name,
            sub_envs=True,
            needs="PPO needs SAME_STEP or NEXT_STEP (gymnasium's default)",
        )
        self.reward_scaler: RewardScaler | None = None
        if config.normalize_reward or config.clip_reward is not None:
            self.reward_scaler = RewardScaler(
                self.num_envs, config.gamma, config.normalize_reward, config.clip_reward
            )

    # --- the env's side -------------------------------------------------------------------
    def _process(self, raw: Any, update: bool = True, live: np.ndarray | None = None) -> np.ndarray:
        """Preprocesses and filters a batch; ``live`` (multi-agent lanes): only these rows
        update the filter's statistics (idle lanes hold blank values)."""
        x = raw.rows if isinstance(raw, Preprocessed) else self.preprocessor.transform_batch(raw)
        if x.dtype.kind == "f" and not np.isfinite(x).all():
            # Before the filter: a NaN would otherwise stay in its running stats for good.
            space = self.preprocessor.observation_space
            original = getattr(space, "original_space", space)
            raise ValueError(non_finite_observation(self.config.env_name, original, raw, x))
        if live is not None and update and not isinstance(self.filter, NoFilter):
            self.filter(x[live], update=True)
            update = False
        return np.asarray(self.filter(x, update=update))

    def _ensure_reset(self) -> np.ndarray:
        if self._obs is None:
            # An int seeds sub-env i with seed + i (sync/async); native vector envs take one.
            raw, _ = self.steps.reset(seed=self._seed)
            live = getattr(self.venv, "live_lanes", None)
            processed = self._process(raw, live=None if live is None else live())
            self._obs = self.policy.stack_obs(None, processed)
        return self._obs

    # --- collecting -----------------------------------------------------------------------
    def collect(self, num_steps: int) -> SampleBatch:
        """Steps every env ``num_steps`` times with exploration and returns the batch."""
        steps = self.collect_steps(num_steps)
        env_actions = next(steps)
        while True:
            result = self.steps.env_step(env_actions)
            try:
                env_actions = steps.send(result)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]

    def collect_steps(self, num_steps: int) -> Generator[Any, StepResult, SampleBatch]:
        """:meth:`collect` as a generator: yields each step's env actions, receives the
        step's :class:`~rlblocks.wrappers.vector_steps.StepResult` (booked by
        :meth:`~rlblocks.wrappers.vector_steps.VectorSteps.account`) and returns the batch. The
        multi-agent runner drives one per policy over shared envs; its results name the
        lanes that acted (``valid``), start a trajectory (``starts``) and hold an agent
        (``live``: only those update the observation filter)."""
        pol, cfg = self.policy, self.config
        obs = self._ensure_reset()
        n = self.num_envs
        cols: dict[str, list[Any]] = {
            k: []
            for k in (
                "obs",
                "actions",
                "logp",
                "vf_preds",
                "dist_inputs",
                "rewards",
                "dones",
                "prev_actions",
                "prev_rewards",
            )
        }
        seq_starts: list[tuple[int, int]] = []
        seq_states: list[list[np.ndarray]] = [[] for _ in self._state]
        seq_pos = np.zeros(n, np.int64)
        book = self.steps
        book.take_finished()
        valid_rows: list[np.ndarray] = []
        for t in range(num_steps):
            if pol.recurrent:
                starts = np.flatnonzero(seq_pos == 0)
                for e in starts:
                    seq_starts.append((t, int(e)))
                for i, s in enumerate(self._state):
                    seq_states[i].append(s[torch.as_tensor(starts)].cpu().numpy())
            out = pol.act(obs, self._state, self._prev_actions, self._prev_rewards, explore=True)
            actions = out["actions"]
            env_actions = clip_actions(actions, pol.action_space) if cfg.clip_actions else actions
            result = yield env_actions
            step = book.account(result)
            rewards, terminated, truncated = step.rewards, step.terminated, step.truncated
            dones, valid, starts = step.dones, step.valid, step.starts
            if valid is not None:
                valid_rows.append(valid)
            cols["obs"].append(obs)
            cols["actions"].append(actions)
            for key in ("logp", "vf_preds", "dist_inputs"):
                cols[key].append(out[key])
            if self._prev_actions is not None:
                cols["prev_actions"].append(self._prev_actions.copy())
            if self._prev_rewards is not None:
                cols["prev_rewards"].append(self._prev_rewards.copy())
            state_out = out["state_out"]
            if self._prev_actions is not None:
                self._prev_actions = np.roll(self._prev_actions, -1, axis=1)
                self._prev_actions[:, -1] = np.asarray(actions).reshape((n, *pol.action_shape))
            if self._prev_rewards is not None:
                self._prev_rewards = np.roll(self._prev_rewards, -1, axis=1)
                self._prev_rewards[:, -1] = rewards
            processed = self._process(result.raw, live=result.live)
            if self.reward_scaler is not None:  # the loss sees scaled rewards, the stats not
                rewards = self.reward_scaler(rewards, dones, valid)
            bootstrap = np.flatnonzero(truncated & ~terminated)
            if bootstrap.size:
                rewards[bootstrap] += cfg.gamma * self._final_values(
                    step.finals, processed, bootstrap, state_out, obs
                )
            cols["rewards"].append(rewards)
            cols["dones"].append(dones)
            start_idx = np.flatnonzero(starts)
            obs = pol.stack_obs(obs, processed, start_idx)
            seq_pos += 1
            if pol.recurrent:
                seq_pos[seq_pos >= pol.max_seq_len] = 0
            done_idx = np.flatnonzero(dones)
            seq_pos[done_idx] = 0  # no sequence crosses an episode's end (or a reset step)
            seq_pos[start_idx] = 0
            if start_idx.size:
                if self._prev_actions is not None:
                    self._prev_actions[start_idx] = pol.initial_prev_action
                if self._prev_rewards is not None:
                    self._prev_rewards[start_idx] = 0.0
                if state_out:
                    init = pol.initial_state(len(start_idx))
                    idx = torch.as_tensor(start_idx, device=pol.device)
                    state_out = [s.clone() for s in state_out]
                    for s, s0 in zip(state_out, init, strict=True):
                        s[idx] = s0
            self._state = state_out
        self._obs = obs
        last_values = pol.values(obs, self._state, self._prev_actions, self._prev_rewards)
        ep_returns, ep_lengths = book.take_finished()
        self.episode_returns.extend(ep_returns)
        self.episode_lengths.extend(ep_lengths)
        self.episodes_total += len(ep_returns)
        return SampleBatch(
            obs=np.stack(cols["obs"]),
            actions=_stack_time(cols["actions"]),
            logp=np.stack(cols["logp"]),
            vf_preds=np.stack(cols["vf_preds"]),
            dist_inputs=np.stack(cols["dist_inputs"]),
            rewards=np.stack(cols["rewards"]),
            dones=np.stack(cols["dones"]),
            prev_actions=np.stack(cols["prev_actions"]) if cols["prev_actions"] else None,
            prev_rewards=np.stack(cols["prev_rewards"]) if cols["prev_rewards"] else None,
            last_values=last_values,
            seq_starts=np.asarray(seq_starts, np.int64).reshape(-1, 2),
            seq_states=[np.concatenate(s) for s in seq_states],
            episode_returns=ep_returns,
            episode_lengths=ep_lengths,
            valid=np.stack(valid_rows) if valid_rows else None,
        )

    def _final_values(
        self,
        finals: Any,
        processed: np.ndarray,
        idx: np.ndarray,
        state_out: list[torch.Tensor],
        obs_before: np.ndarray,
    ) -> np.ndarray:
        """``V(final_obs)`` of the envs ``idx`` that were truncated this step (``finals``:
        same-step autoreset's final observations; NEXT_STEP: the returned observation
        itself, already ``processed``)."""
        if self.steps.next_step:
            final_obs = processed[idx]
        else:
            if finals is None:
                return np.zeros(len(idx), np.float32)
            final_obs = self._process([finals[i] for i in idx], update=False)
        obs = self.policy.stack_obs(obs_before[idx], final_obs)
        t_idx = torch.as_tensor(idx, device=self.policy.device)
        state = [s[t_idx] for s in state_out]
        pa = None if self._prev_actions is None else self._prev_actions[idx]
        pr = None if self._prev_rewards is None else self._prev_rewards[idx]
        return self.policy.values(obs, state, pa, pr)

    # --- checkpoints ----------------------------------------------------------------------
    def env_snapshot(self) -> bytes | None:
        """:func:`env_snapshot` of the runner's vector env."""
        return env_snapshot(self.venv)

    def state_dict(self) -> dict[str, Any]:
        """Everything that carries over between rollouts (not the env itself)."""
        return {
            "obs": self._obs,
            "rnn_state": [s.cpu() for s in self._state],
            "prev_actions": self._prev_actions,
            "prev_rewards": self._prev_rewards,
            **self.steps.state_dict(),  # ep_return, ep_len, resetting
            "episode_returns": list(self.episode_returns),
            "episode_lengths": list(self.episode_lengths),
            "episodes_total": self.episodes_total,
            "reward_scaler": (
                None if self.reward_scaler is None else self.reward_scaler.state_dict()
            ),
        }

    def load_state_dict(self, state: dict[str, Any], envs_restored: bool) -> None:
        """Restores :meth:`state_dict`; without restored envs the envs are reset afresh."""
        self.episode_returns.extend(state["episode_returns"])
        self.episode_lengths.extend(state["episode_lengths"])
        self.episodes_total = int(state["episodes_total"])
        if envs_restored:
            self._obs = state["obs"]
            self._state = [s.to(self.policy.device) for s in state["rnn_state"]]
            self._prev_actions = state["prev_actions"]
            self._prev_rewards = state["prev_rewards"]
            self.steps.load_state_dict(state)
        if self.reward_scaler is not None and state.get("reward_scaler") is not None:
            self.reward_scaler.load_state_dict(state["reward_scaler"], returns=envs_restored)

    def close(self) -> None:
        """Closes the vector env."""
        self.venv.close()
