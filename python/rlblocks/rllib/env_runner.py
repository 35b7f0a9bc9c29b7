""":class:`VectorEnvRunner`: RLlib's ``SingleAgentEnvRunner`` contract, sampling on arrays.

RLlib's runner spends most of a step in Python around the env: it unbatches every env's
observation, adds it to an episode object, runs the env-to-module and module-to-env
connector pipelines (a dozen pieces, each walking the episodes) and logs timers. This runner
keeps the whole class (env creation, module, connector pipelines and their state,
checkpoints, metrics, callbacks' ``on_sample_end``, fault tolerance) and replaces the
sampling loop: per step it turns the vector env's batched observation into the model input
in one C++ call (the run's :class:`~rlblocks.rllib.FlattenObservationsBatched` and
:class:`~rlblocks.rllib.MeanStdFilterBatched`, with their state; on gymnasium's
``SyncVectorEnv`` it steps the sub-envs itself and hands their observations to that call
unbatched, skipping the vector env's own nested batching and deep copy), runs the module once,
draws the actions from the module's distribution as RLlib's ``GetActions`` does, and keeps
everything in arrays; the ``SingleAgentEpisode`` chunks (observations, actions, rewards,
terminated / truncated, infos, ``action_logp``, ``action_dist_inputs``, recurrent state,
weights' sequence number, lookback buffers at cuts) are built once per ``sample()`` from
those arrays, so RLlib's learners and learner connectors take them unchanged.

What the loop does not cover runs RLlib's own loop, unchanged (:attr:`fast_path_refusal`
says why): per-episode callbacks (``on_episode_start`` / ``_step`` / ``_end``), env-to-module
pieces other than rlblocks' flattening, filter and Atari frame pipeline (e.g. the views of
past actions), custom module-to-env pieces, and ``episodes_to_numpy=False``.

Example::

    from ray.rllib.algorithms.ppo import PPOConfig
    from rlblocks.rllib import VectorEnvRunner, env_to_module, rl_module_spec

    model = {"fcnet_hiddens": [64, 64]}
    config = (PPOConfig().environment("CartPole-v1")
              .rl_module(rl_module_spec=rl_module_spec(model))
              .env_runners(env_runner_cls=VectorEnvRunner, num_envs_per_env_runner=8,
                           env_to_module_connector=env_to_module(model)))
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from rlblocks.image import gray_resize
from rlblocks.nest import tree_map
from rlblocks.rllib._ray import (
    ENV_STEP_FAILURE,
    ENV_STEP_TIMER,
    NUM_ENV_STEP_FAILURES_LIFETIME,
    RLMODULE_INFERENCE_TIMER,
    Columns,
    RLlibCallback,
    SingleAgentEnvRunner,
)
from rlblocks.rllib.connectors.atari_frames import AtariFramesBatched
from rlblocks.rllib.connectors.flatten_observations import FlattenObservationsBatched
from rlblocks.rllib.connectors.mean_std_filter import MeanStdFilterBatched
from rlblocks.rllib.env_actions import env_action_fn
from rlblocks.rllib.episode_chunks import (
    EpisodeBuilder,
    Lane,
    Steps,
    episode_chunk,
    lane_after,
    rows,
)
from rlblocks.rllib.module import MASK_KEY, OBS_KEY, RLBlocksAPPORLModule, RLBlocksRLModule
from rlblocks.rllib.q_acting import act_sac, dense_q, epsilon_greedy, plain_sac_actor
from rlblocks.train.acting_threads import runner_threads, torch_threads
from rlblocks.train.fast import FCActor
from rlblocks.train.fast.choice import log_once, numpy_acting
from rlblocks.train.fast.dense_layers import FCLayers
from rlblocks.train.fast.q_layers import DenseQ
from rlblocks.wrappers.vector_steps import VectorSteps

__all__ = ["VectorEnvRunner"]

logger = logging.getLogger(__name__)

#: RLlib's default env-to-module pieces: what they do on a batch of newest observations
#: (gather, batch, time rank for recurrent modules, states, tensors) the loop does itself.
_RLLIB_ENV_TO_MODULE = {
    "AddObservationsFromEpisodesToBatch",
    "AddTimeDimToBatchAndZeroPad",
    "AddStatesFromEpisodesToBatch",
    "AgentToModuleMapping",
    "BatchIndividualItems",
    "NumpyToTensor",
}
#: RLlib's default module-to-env pieces (actions from the distribution, numpy, unbatching,
#: unsquashing / clipping): the loop does the same on the batch.
_RLLIB_MODULE_TO_ENV = {
    "GetActions",
    "TensorToNumpy",
    "UnBatchToIndividualItems",
    "ModuleToAgentUnmapping",
    "RemoveSingleTsTimeRankFromBatch",
    "NormalizeAndClipActions",
    "ListifyDataForVectorEnv",
}
_EPISODE_CALLBACKS = (
    "on_episode_created",
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
)


def _numpy(struct: Any) -> Any:
    return tree_map(
        lambda x: x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x),
        struct,
    )


class VectorEnvRunner(SingleAgentEnvRunner):  # type: ignore[misc]
    """``SingleAgentEnvRunner`` whose sampling loop runs on batched arrays (module doc).

    Use it as ``config.env_runners(env_runner_cls=VectorEnvRunner)``; ``rlblocks train
    --backend rllib`` does. Same constructor, ``sample`` arguments, state, metrics and
    episodes as RLlib's runner.
    """

    _needs_initial_reset: bool

    def __init__(self, *, config: Any, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        self._numpy_actor: FCActor | None = None
        self._frames: AtariFramesBatched | None = None
        self._stacks: np.ndarray | None = None  # the Atari frame stacks of every env
        self._serving_actor: FCActor | None = None
        self._q_actor: DenseQ | None = None
        self._serving_q: DenseQ | None = None
        self._sac_actor: FCLayers | None = None
        self._to_env: Callable[[Any], Any] | None = None  # NormalizeAndClipActions
        self.fast_path_refusal: str | None = self._refusal()
        if self.fast_path_refusal is not None:
            logger.info("VectorEnvRunner runs RLlib's loop: %s", self.fast_path_refusal)
        self._lanes: list[Lane] = []
        self._obs: Any = None  # the current observation of every env as episodes hold it
        self._module_obs: Any = None  # ... and as the module sees it
        self._obs_infos: list[dict] = []
        self._obs_time = 0.0
        self._state: Any = None  # the recurrent state of every env, batched (numpy)
        self._episode_builder: EpisodeBuilder | None = None

    # --- what the loop covers ------------------------------------------------------------------
    def _refusal(self) -> str | None:
        """None when the array loop gives the same episodes as RLlib's, else why not."""
        if self.env is None or self.module is None:
            return "no env or no module on this runner"
        if not self.episodes_to_numpy:
            return "episodes_to_numpy=False"
        for cb in self._callbacks:
            for name in _EPISODE_CALLBACKS:
                if getattr(type(cb), name) is not getattr(RLlibCallback, name):
                    return f"the callback {type(cb).__name__} overrides {name}"
        for name in _EPISODE_CALLBACKS:
            if getattr(self.config, f"callbacks_{name}", None):
                return f"config.callbacks({name}=...) is set"
        self._pieces: list[Any] = []
        for piece in self._env_to_module.connectors:
            if isinstance(piece, (FlattenObservationsBatched, MeanStdFilterBatched)):
                self._pieces.append(piece)
            elif isinstance(piece, AtariFramesBatched) and not self._pieces:
                self._frames = piece
            elif type(piece).__name__ not in _RLLIB_ENV_TO_MODULE:
                return f"the env-to-module piece {type(piece).__name__}"
        if self._frames is not None and self._pieces:
            return "the Atari frame pipeline together with other pieces"
        self._episode_obs_space = (
            self._frames.episode_observation_space
            if self._frames is not None
            else (self._pieces[-1].observation_space if self._pieces else None)
        ) or self.env.single_observation_space
        for piece in self._module_to_env.connectors:
            if type(piece).__name__ not in _RLLIB_MODULE_TO_ENV:
                return f"the module-to-env piece {type(piece).__name__}"
        self._masked = bool(self._pieces) and bool(self._pieces[0]._masked)
        self._mask_dtype = (
            self.env.single_observation_space[MASK_KEY].dtype if self._masked else None
        )
        self._recurrent = bool(self.module.is_stateful())
        self._numpy_actor = self._fc_actor()
        self._q_actor = dense_q(self.module)
        self._sac_actor = plain_sac_actor(self.module)
        self._to_env = env_action_fn(
            self.env.single_action_space,
            bool(self.config.normalize_actions),
            bool(self.config.clip_actions),
        )
        return None

    def _fc_actor(self) -> FCActor | None:
        """rlblocks' numpy actor for its module, chosen as the native ``Policy``'s
        (:func:`~rlblocks.train.fast.choice.numpy_acting`); else None, why logged once."""
        module: Any = self.module
        if type(module) not in (RLBlocksRLModule, RLBlocksAPPORLModule):
            return None
        actor: FCActor | str = "the model reads columns next to the observation"
        if not module.keyed or set(module.observation_space.spaces) == {OBS_KEY, MASK_KEY}:
            actor = numpy_acting(module.model, module.dist_fn, None, module.mask_layout)
        if isinstance(actor, str):
            log_once(logger, "VectorEnvRunner acts through the torch module", actor)
            return None
        log_once(logger, "VectorEnvRunner acts", actor.description)
        return actor

    # --- RLlib's entry point -------------------------------------------------------------------
    def _sample(self, **kwargs: Any) -> list[Any]:
        with torch_threads(runner_threads(self.module, self.num_envs, self.config)):
            return self._sample_arrays(**kwargs)

    def _sample_arrays(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> list[Any]:
        if self.fast_path_refusal is not None:
            return super()._sample(
                num_timesteps=num_timesteps,
                num_episodes=num_episodes,
                explore=explore,
                random_actions=random_actions,
                force_reset=force_reset,
            )
        if force_reset or num_episodes is not None or self._needs_initial_reset or not self._lanes:
            self._reset_all()
        if num_episodes is not None:
            self._needs_initial_reset = True
        return self._run(num_timesteps, num_episodes, explore, random_actions)

    # --- observations -------------------------------------------------------------------------
    def _process(self, obs: Any, fresh: np.ndarray | None = None) -> tuple[Any, Any]:
        """``(what the episodes hold, what the module sees)`` for the batched env
        observation: rlblocks' pieces in order, or the Atari frame pipeline (``fresh``: the
        envs whose observation starts an episode; None: all)."""
        if self._frames is not None:
            return self._stack_frames(obs, fresh)
        if not self._pieces:
            return obs, obs
        listed = isinstance(obs, list)  # per-env observations (SubEnvSteps)
        inner = obs
        if self._masked:  # the masks batched in the space's dtype, as the vector env does
            inner = [o[OBS_KEY] for o in obs] if listed else obs[OBS_KEY]
            mask = [o[MASK_KEY] for o in obs] if listed else obs[MASK_KEY]
        for piece in self._pieces:
            if isinstance(piece, FlattenObservationsBatched):
                prep = piece.preprocessor
                if prep is not None and type(prep).__name__ != "NoPreprocessor":
                    inner = prep.transform_batch(inner)
            else:
                inner = piece.filter(np.asarray(inner), update=piece.update_stats)
        if self._masked:
            inner = {MASK_KEY: np.asarray(mask, self._mask_dtype), OBS_KEY: inner}
        return inner, inner

    def _stack_frames(self, obs: Any, fresh: np.ndarray | None) -> tuple[Any, Any]:
        """:class:`AtariFramesBatched` on every env at once: gray + resize in one C++ call,
        then each env's stack shifted by the new frame (oldest first; an episode starts
        with ``k`` copies of its first frame)."""
        piece = self._frames
        assert piece is not None
        frames = gray_resize(np.asarray(obs), piece.dim)
        if self._stacks is None or fresh is None:
            stacks = np.repeat(frames, piece.k, axis=-1)
        else:  # a new array: the stored steps keep theirs
            stacks = np.concatenate([self._stacks[..., 1:], frames], axis=-1)
            stacks[fresh] = np.repeat(frames[fresh], piece.k, axis=-1)
        self._stacks = stacks
        return (stacks if piece.stack_in_episode else frames), stacks

    def _reset_all(self) -> None:
        """Resets every sub-env (seeded on the first reset, as RLlib's runner)."""
        self._lanes = [Lane() for _ in range(self.num_envs)]
        self._ongoing_episodes_for_metrics.clear()
        obs, infos = self._try_env_reset(
            seed=self._seed if self._needs_initial_reset else None, options=None
        )
        self._needs_initial_reset = False
        self._obs, self._module_obs = self._process(obs)
        self._obs_infos = list(infos)
        self._obs_time = time.perf_counter()
        if self._recurrent:
            self._state = self._initial_state(self.num_envs)

    def _initial_state(self, n: int) -> Any:
        init = _numpy(self.module.get_initial_state())
        return tree_map(lambda s: np.repeat(s[None], n, axis=0), init)

    # --- acting -------------------------------------------------------------------------------
    def _act(self, obs: Any, explore: bool, t: int) -> tuple[Any, Any, dict[str, Any]]:
        """``(actions, actions for the env, extra model outputs)`` for the batched ``obs``,
        as RLlib's default connectors and ``GetActions`` compute them."""
        actor = self._serving_actor
        drawn = None if actor is None else actor.sample(obs, explore)
        if drawn is not None:
            logits, actions, logp = drawn
            extra = {Columns.ACTION_DIST_INPUTS: logits, Columns.ACTION_LOGP: logp}
            return actions, self._for_env(actions), extra
        if self._serving_q is not None and isinstance(obs, np.ndarray):
            actions = epsilon_greedy(self.module, self._serving_q, obs, explore, t)
            return actions, actions, {}
        sac = self._sac_actor
        if sac is not None and isinstance(obs, np.ndarray) and sac.matches_model():
            actions, extra = act_sac(self.module, sac, obs, explore, self._device)
            return actions, self._for_env(actions), extra
        device = self._device
        batch: dict[str, Any] = {
            Columns.OBS: tree_map(lambda x: torch.from_numpy(x).to(device), obs)
        }
        if self._recurrent:
            batch[Columns.OBS] = tree_map(lambda x: x.unsqueeze(1), batch[Columns.OBS])
            batch[Columns.STATE_IN] = tree_map(
                lambda s: torch.from_numpy(s).to(device), self._state
            )
        module = self.module
        if module.training:  # what forward_exploration / _inference switch to on each call
            module.eval()
        with torch.no_grad():
            if explore:
                out = module._forward_exploration(batch, t=t)
            else:
                out = module._forward_inference(batch)
            if self._recurrent:
                out = {
                    k: (v if k == Columns.STATE_OUT else tree_map(_drop_time, v))
                    for k, v in out.items()
                }
            if Columns.ACTIONS not in out and Columns.ACTION_DIST_INPUTS in out:
                dist_cls = (
                    self.module.get_exploration_action_dist_cls()
                    if explore
                    else self.module.get_inference_action_dist_cls()
                )
                dist = dist_cls.from_logits(out[Columns.ACTION_DIST_INPUTS])
                if not explore:
                    dist = dist.to_deterministic()
                out[Columns.ACTIONS] = dist.sample()
                if Columns.ACTION_LOGP not in out:
                    out[Columns.ACTION_LOGP] = dist.logp(out[Columns.ACTIONS])
        out = _numpy(out)
        actions = out.pop(Columns.ACTIONS)
        for_env = out.pop(Columns.ACTIONS_FOR_ENV, None)
        return actions, self._for_env(actions) if for_env is None else for_env, out

    def _for_env(self, actions: Any) -> Any:
        """RLlib's ``NormalizeAndClipActions``: unsquashed into the Box bounds or clipped."""
        return actions if self._to_env is None else self._to_env(actions)

    # --- the loop -----------------------------------------------------------------------------
    def _run(
        self,
        num_timesteps: int | None,
        num_episodes: int | None,
        explore: bool,
        random_actions: bool,
    ) -> list[Any]:
        steps = Steps(self._obs, self._obs_infos, self._obs_time)
        actor = self._numpy_actor  # hooks or replaced layers since the build: the module
        self._serving_actor = actor if actor is not None and actor.layers.matches_model() else None
        q_net = self._q_actor
        self._serving_q = q_net if q_net is not None and q_net.matches(training=False) else None
        # RLlib's vector env resets an env that ended on its next step; a failed step is
        # RLlib's to handle (_env_step_failed), a non-finite reward is RLlib's too
        direct = self._steps_sub_envs()
        book = VectorSteps(
            self.env.unwrapped if direct else self.env,
            "",
            sub_envs=direct,
            wrap_errors=False,
            check_rewards=False,
            next_step=True,
        )
        book.resetting = np.array([lane.needs_reset for lane in self._lanes])
        ts = eps = 0
        act_time = step_time = 0.0
        runners = self.config.num_env_runners or 1
        lifetime = self.num_env_steps_sampled_lifetime // runners
        while (ts < num_timesteps) if num_timesteps is not None else (eps < (num_episodes or 0)):
            t0 = time.perf_counter()
            if random_actions:
                act = for_env = self.env.action_space.sample()
                extra: dict[str, Any] = {}
            else:
                act, for_env, extra = self._act(
                    self._module_obs, explore, (lifetime + ts) * runners
                )
            t1 = time.perf_counter()
            needs_reset = book.resetting
            try:
                step = book.step(for_env)
            except Exception as err:
                step = self._env_step_failed(err)
            step_time += time.perf_counter() - t1
            act_time += t1 - t0
            if step is ENV_STEP_FAILURE:
                # as RLlib's loop: the finished episodes stay, the ongoing ones are dropped,
                # and sampling starts over on reset envs
                done = self._episodes(steps, needs_reset, cut=False, keep_ongoing=False)
                self._increase_sampled_metrics(0, len(done))  # RLlib restarts its count too
                self._reset_all()
                left = None if num_episodes is None else max(0, num_episodes - len(done))
                return done + self._run(num_timesteps, left, explore, random_actions)
            obs, rew, term, trunc, infos = step.result[:5]  # as the env returned them
            real, done_now = step.valid, step.dones
            assert real is not None  # next-step autoreset: the reset rows are no steps
            held, self._module_obs = self._process(obs, needs_reset)
            steps.add(held, infos, act, rew, term, trunc, extra, real)
            if self._recurrent and extra:
                state = extra[Columns.STATE_OUT]
                if needs_reset.any():  # these envs start a new episode at this observation
                    fresh = self._initial_state(int(needs_reset.sum()))
                    state = tree_map(partial(_put, rows=needs_reset), state, fresh)
                self._state = state
            ts += int(np.count_nonzero(real))
            if step.any_done:
                k = len(steps.actions) - 1
                ended = np.flatnonzero(done_now).tolist()
                steps.done_at.extend((k, e) for e in ended)
                eps += len(ended)
            if num_episodes is not None and eps >= num_episodes:
                break
        if steps.actions:  # RLlib's per-step timers, logged once per call with the mean
            self.metrics.log_value(RLMODULE_INFERENCE_TIMER, act_time / len(steps.actions))
            self.metrics.log_value(ENV_STEP_TIMER, step_time / len(steps.actions))
            self._log_env_steps(metric=self._metrics_num_try_env_step, num_steps=len(steps.actions))
        episodes = self._episodes(
            steps, book.resetting, cut=num_timesteps is not None, num_episodes=num_episodes
        )
        if ts:
            self._log_env_steps(metric=self._metrics_num_env_steps_sampled, num_steps=ts)
        self._increase_sampled_metrics(ts, sum(1 for ep in episodes if ep.is_done))
        return episodes

    def _steps_sub_envs(self) -> bool:
        """Whether the loop steps the sub-envs itself
        (:class:`~rlblocks.wrappers.sub_envs.SubEnvSteps`): RLlib's vector env is
        gymnasium's ``SyncVectorEnv`` under ``DictInfoToList`` alone, in next-step
        autoreset, and rlblocks' preprocessor takes the per-env observations."""
        vec = self.env.unwrapped
        first = self._pieces[0] if self._pieces else None
        prep = first.preprocessor if isinstance(first, FlattenObservationsBatched) else None
        return (
            type(vec) is SyncVectorEnv
            and vec.autoreset_mode == AutoresetMode.NEXT_STEP
            and getattr(self.env, "env", None) is vec
            and prep is not None
            and type(prep).__name__ != "NoPreprocessor"
        )

    def _env_step_failed(self, err: Exception) -> Any:
        """RLlib's handling of a failed env step: counted, then the env is recreated (the
        caller starts over) or, without ``restart_failed_sub_environments``, raised."""
        self.metrics.log_value(NUM_ENV_STEP_FAILURES_LIFETIME, 1, reduce="lifetime_sum")
        if not self.config.restart_failed_sub_environments:
            raise RuntimeError(
                f"VectorEnvRunner: the env step failed and "
                f"'config.restart_failed_sub_environments' is False: {err!r}"
            ) from err
        logger.exception("VectorEnvRunner: env step failed; recreating and resetting the env")
        self.make_env()
        return ENV_STEP_FAILURE

    # --- episodes from the arrays -------------------------------------------------------------
    def _episodes(
        self,
        steps: Steps,
        needs_reset: np.ndarray,
        *,
        cut: bool,
        num_episodes: int | None = None,
        keep_ongoing: bool = True,
    ) -> list[Any]:
        """The done episodes (in the order they finished) and, when ``cut``, the ongoing
        chunks, built from the per-step arrays; sets the lanes for the next call."""
        if not steps.actions:
            return []
        cols = steps.stacked()
        build = self._episode_builder
        act_space = self.env.single_action_space
        if build is None or (build.obs_space, build.act_space) != (
            self._episode_obs_space,
            act_space,
        ):
            build = self._episode_builder = EpisodeBuilder(self._episode_obs_space, act_space)
        seq_no = np.full(len(steps.actions), self._weights_seq_no)

        def chunk(e: int, a: int, b: int, lane: Lane | None, is_done: bool) -> Any:
            return episode_chunk(steps, cols, e, a, b, lane, is_done, build, seq_no)

        last = len(steps.actions)
        # per env: the observation its current chunk starts at, and the lane it continues
        # (None: env e was reset by the first step of this call, so it starts at 1)
        lanes: list[Lane | None] = [None if ln.needs_reset else ln for ln in self._lanes]
        starts = [0 if lane is not None else 1 for lane in lanes]
        done_eps: list[Any] = []
        for k, e in steps.done_at:  # in the order they finished, as RLlib returns them
            done_eps.append(chunk(e, starts[e], k + 1, lanes[e], True))
            lanes[e] = None
            starts[e] = k + 2  # step k + 1 resets env e
        if num_episodes is not None:
            done_eps = done_eps[:num_episodes]
        self._done_episodes_for_metrics.extend(done_eps)

        ongoing: list[Any] = []
        new_lanes: list[Lane] = []
        horizon = int(self.config.episode_lookback_horizon)
        for e in range(self.num_envs):
            if needs_reset[e] or not keep_ongoing:
                new_lanes.append(Lane(needs_reset=bool(needs_reset[e])))
            elif starts[e] >= last:  # reset by the last step: no step of it yet
                new_lanes.append(Lane(start_time=steps.times[-1]))
            else:
                ep = chunk(e, starts[e], last, lanes[e], False)
                if cut:
                    self._ongoing_episodes_for_metrics[ep.id_].append(ep)
                    ongoing.append(ep)
                new_lanes.append(lane_after(ep, horizon))
        self._lanes = new_lanes
        self._obs = rows(cols.obs, -1)
        self._obs_infos = steps.infos[-1]
        self._obs_time = steps.times[-1]
        return done_eps + ongoing


def _put(state: np.ndarray, values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out = np.array(state, copy=True)
    out[rows] = values
    return out


def _drop_time(x: Any) -> Any:
    return x.squeeze(1) if isinstance(x, torch.Tensor) and x.dim() >= 2 else x
