"""``VectorEnvRunner`` gives RLlib's ``SingleAgentEnvRunner``'s episodes, state and metrics.

Both runners are built from the same config and seed and sample with the same torch seed,
so the module draws the same actions: every column of every episode chunk (observations
after rlblocks' pieces, actions, rewards, flags, infos, extra model outputs, recurrent
state, lookback buffers at cuts) must be equal.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("ray")

import rlblocks.envs  # noqa: E402,F401  (registers the zoo)
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner  # noqa: E402
from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: E402
from rlblocks.rllib import VectorEnvRunner, env_to_module, rl_module_spec  # noqa: E402
from rlblocks.rllib.episode_chunks import Chunk, EpisodeBuilder, _same_episode  # noqa: E402

pytestmark = pytest.mark.native


def _config(env: Any, model: dict, pieces: Any = "NoFilter", **runners: Any) -> Any:
    """PPO with rlblocks' module; ``pieces``: the observation filter, or
    ``env_to_module``'s keyword arguments."""
    model = {"fcnet_hiddens": [16], **model}
    pieces = {"observation_filter": pieces} if isinstance(pieces, str) else pieces
    return (
        PPOConfig()
        .environment(env)
        .rl_module(rl_module_spec=rl_module_spec(model))
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=runners.pop("num_envs", 3),
            env_to_module_connector=env_to_module(model, **pieces),
            **runners,
        )
        .debugging(seed=3)
    )


class FakeFrames(gym.Env):
    """Random RGB frames (the module's actions do not change them), episodes of 2..11
    steps ended by termination or truncation."""

    observation_space = gym.spaces.Box(0, 255, (60, 50, 3), np.uint8)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, config: Any = None) -> None:
        self._left = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        super().reset(seed=seed)
        self._left = int(self.np_random.integers(2, 12))
        return self._frame(), {}

    def step(self, action: Any) -> Any:
        self._left -= 1
        end = self._left <= 0
        truncated = bool(end and self.np_random.random() < 0.3)
        return self._frame(), float(action == 1), end and not truncated, truncated, {}

    def _frame(self) -> np.ndarray:
        return self.np_random.integers(0, 256, (60, 50, 3), dtype=np.uint8)


class MaskedNested(gym.Env):
    """RLlib's action-mask form around a nested Dict; the env hands the mask as float64
    where the space says float32 (the runner batches it in the space's dtype, as
    gymnasium's vector env does)."""

    observation_space = gym.spaces.Dict(
        {
            "action_mask": gym.spaces.Box(0, 1, (3,), np.float32),
            "observations": gym.spaces.Dict(
                {"pos": gym.spaces.Discrete(4), "x": gym.spaces.Box(-1, 1, (2,), np.float32)}
            ),
        }
    )
    action_space = gym.spaces.Discrete(3)

    def __init__(self, config: Any = None) -> None:
        self._left = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        super().reset(seed=seed)
        self._left = int(self.np_random.integers(2, 9))
        return self._obs(), {"left": self._left}

    def step(self, action: Any) -> Any:
        assert self._mask[action] == 1.0, "a masked action was taken"
        reward = float(action == self._pos % 3)
        self._left -= 1
        return self._obs(), reward, self._left <= 0, False, {"left": self._left}

    def _obs(self) -> dict[str, Any]:
        self._pos = int(self.np_random.integers(4))
        self._mask = np.ones(3)
        self._mask[int(self.np_random.integers(3))] = 0.0
        self._mask[self._pos % 3] = 1.0
        x = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return {"action_mask": self._mask.copy(), "observations": {"pos": self._pos, "x": x}}


def _both(config: Any) -> tuple[Any, Any]:
    theirs = SingleAgentEnvRunner(config=config)
    ours = VectorEnvRunner(config=config)
    assert ours.fast_path_refusal is None
    ours.set_state(theirs.get_state())  # the same weights
    return theirs, ours


def _equal(a: Any, b: Any, where: str) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), where
        for k in a:
            _equal(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _equal(x, y, f"{where}[{i}]")
    elif isinstance(a, (str, type(None))):
        assert a == b, where
    else:
        x, y = np.asarray(a), np.asarray(b)
        assert x.shape == y.shape, f"{where}: shapes {x.shape} vs {y.shape}"
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6, err_msg=where)


def _same_episodes(theirs: list[Any], ours: list[Any]) -> None:
    assert [(len(e), e.t_started, e.is_terminated, e.is_truncated) for e in theirs] == [
        (len(e), e.t_started, e.is_terminated, e.is_truncated) for e in ours
    ]
    for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        lb = a.observations.lookback
        assert b.observations.lookback == lb and b.actions.lookback == a.actions.lookback
        n = len(a)
        idx = slice(-lb, n + 1) if lb else slice(0, n + 1)
        kw = {"neg_index_as_lookback": True} if lb else {}
        _equal(a.get_observations(idx, **kw), b.get_observations(idx, **kw), f"ep{i}.obs")
        _equal(a.get_infos(idx, **kw), b.get_infos(idx, **kw), f"ep{i}.infos")
        steps = slice(-a.actions.lookback, n) if a.actions.lookback else slice(0, n)
        kw = {"neg_index_as_lookback": True} if a.actions.lookback else {}
        _equal(a.get_actions(steps, **kw), b.get_actions(steps, **kw), f"ep{i}.actions")
        _equal(a.get_rewards(steps, **kw), b.get_rewards(steps, **kw), f"ep{i}.rewards")
        assert sorted(a.extra_model_outputs) == sorted(b.extra_model_outputs)
        for key in a.extra_model_outputs:
            _equal(
                a.get_extra_model_outputs(key, steps, **kw),
                b.get_extra_model_outputs(key, steps, **kw),
                f"ep{i}.{key}",
            )
        assert a.get_return() == pytest.approx(b.get_return())
        b.validate()


def _sample_both(theirs: Any, ours: Any, calls: list[dict[str, Any]]) -> None:
    for i, kwargs in enumerate(calls):
        torch.manual_seed(100 + i)
        a = theirs.sample(**kwargs)
        torch.manual_seed(100 + i)
        b = ours.sample(**kwargs)
        assert a, kwargs
        _same_episodes(a, b)
    ma, mb = theirs.get_metrics(), ours.get_metrics()
    for key in ("episode_return_mean", "episode_len_mean", "num_env_steps_sampled_lifetime"):
        assert (key in ma) == (key in mb), key
        if key in ma:
            assert float(mb[key]) == pytest.approx(float(ma[key])), key
    if "episode_duration_sec_mean" in ma:  # the wall-clock spans of the episodes, not zero
        assert float(mb["episode_duration_sec_mean"]) > 0.0


CASES = {
    # nested Dict observation (C++ flattening), MeanStdFilter state in the loop
    "dict_filter": ("rlblocks/zoo-Dict-v0", {}, "MeanStdFilter"),
    # RLlib's action-mask form, MultiDiscrete actions
    "masked": ("rlblocks/zoo-MaskedMultiDiscrete-v0", {}, "NoFilter"),
    # the action-mask form around a nested Dict (per-env observations batched in C++)
    "masked_nested": (MaskedNested, {}, "NoFilter"),
    # Box actions: unsquashed for the env, stored as the module drew them
    "box_action": ("rlblocks/zoo-BoxAction-v0", {}, "NoFilter"),
    # Tuple actions (a nested action struct)
    "tuple_action": ("rlblocks/zoo-TupleAction-v0", {}, "NoFilter"),
    # recurrent state: STATE_OUT per step, initial state at episode starts
    "lstm": ("rlblocks/zoo-RecallLSTM-v0", {"use_lstm": True, "lstm_cell_size": 8}, "NoFilter"),
    # CartPole with no rlblocks piece at all (RLlib's default connectors only)
    "cartpole": ("CartPole-v1", {}, "NoFilter"),
    # the Atari frame pipeline: stacks in the episodes, or single frames (stacks to the
    # module only)
    "atari_stacked": (FakeFrames, {"dim": 42}, {"atari": True}),
    "atari_single_frames": (FakeFrames, {"dim": 42}, {"atari": True, "stack_in_episode": False}),
}


#: the cases whose observations rlblocks' preprocessor batches: the runner steps the
#: sub-envs itself and hands it the per-env observations
STEPS_SUB_ENVS = {"dict_filter", "masked_nested", "lstm"}
#: the cases whose actions the numpy actor draws (the FC model; every head but none)
NUMPY_ACTS = {"dict_filter", "masked", "masked_nested", "box_action", "tuple_action", "cartpole"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_episodes_as_rllibs_runner(case: str) -> None:
    env, model, filt = CASES[case]
    theirs, ours = _both(_config(env, model, filt, rollout_fragment_length=23))
    assert ours._steps_sub_envs() == (case in STEPS_SUB_ENVS)
    assert (ours._numpy_actor is not None) == (case in NUMPY_ACTS)
    calls = [
        {"num_timesteps": 70},
        {"num_timesteps": 70},
        {"num_timesteps": 50, "explore": False},
        {"num_timesteps": 70},
        {"num_episodes": 4},
        {"num_timesteps": 40},
    ]
    _sample_both(theirs, ours, calls)
    # the episodes above came from the attributes set directly (the first one checked
    # against RLlib's constructor)
    assert ours._episode_builder is not None and ours._episode_builder.direct, case
    _equal(
        theirs.get_state(not_components="rl_module"),
        ours.get_state(not_components="rl_module"),
        "state",
    )


def test_episode_builder_sets_what_rllibs_constructor_sets() -> None:
    """A chunk with a lookback and nested observations and actions: the first is built by
    RLlib's constructor and checked against the direct build; later ones are direct and
    hold the same attributes; a differing attribute is seen."""
    obs_space = MaskedNested.observation_space
    act_space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))))
    n, lb = 5, 1
    obs = {
        "action_mask": np.ones((n + lb + 1, 3), np.float32),
        "observations": {"pos": np.arange(n + lb + 1), "x": np.zeros((n + lb + 1, 2), np.float32)},
    }
    chunk = Chunk(
        obs,
        [{"i": i} for i in range(n + lb + 1)],
        (np.zeros(n + lb, np.int64), np.ones((n + lb, 2), np.float32)),
        np.arange(n + lb, dtype=np.float32),
        {Columns.ACTION_LOGP: np.zeros(n + lb, np.float32)},
        lb,
    )
    build = EpisodeBuilder(obs_space, act_space)
    first = build("a", chunk, True, False, 7)
    assert build.direct is True and type(first) is SingleAgentEpisode
    second = build("a", chunk, True, False, 7)
    assert _same_episode(first, second) and _same_episode(second, first)
    second.validate()
    assert (len(second), second.t, second.is_done) == (n, 7 + n, True)
    np.testing.assert_array_equal(second.get_rewards(), first.get_rewards())
    other = build("a", chunk, False, False, 7)
    assert not _same_episode(first, other)


def _q_config(config: Any, algo: str, model_config: dict[str, Any] | None = None) -> Any:
    """``config`` (a DQN or SAC config with its env) with rlblocks' module of two 16-unit
    layers and its connector, 3 envs in a local runner, 23-step fragments."""
    model = {"fcnet_hiddens": [16, 16]}
    return config.rl_module(
        rl_module_spec=rl_module_spec(model, algo=algo), model_config=model_config or {}
    ).env_runners(
        num_env_runners=0,
        num_envs_per_env_runner=3,
        env_to_module_connector=env_to_module(model),
        rollout_fragment_length=23,
    )


@pytest.mark.parametrize("dueling", [True, False], ids=["dueling", "plain"])
def test_dqn_acts_in_numpy_as_rllibs_runner_does_with_the_module(dueling: bool) -> None:
    """rlblocks' DQN module acts through its numpy Q-network: the same epsilon-greedy
    actions (epsilon halfway down its schedule, so both branches are taken) as the module
    inside ``SingleAgentEnvRunner``."""
    from ray.rllib.algorithms.dqn import DQNConfig

    config = _q_config(
        DQNConfig().environment("rlblocks/zoo-Dict-v0"),
        "DQN",
        {"epsilon": [(0, 1.0), (400, 0.0)], "dueling": dueling},
    )
    theirs, ours = _both(config.debugging(seed=3))
    assert ours._q_actor is not None
    calls = [{"num_timesteps": 120}, {"num_timesteps": 60, "explore": False}]
    _sample_both(theirs, ours, calls * 3)


@pytest.mark.parametrize("normalize", [True, False], ids=["normalized", "clipped"])
def test_sac_acts_without_the_module_wrappers_as_rllibs_runner_does(normalize: bool) -> None:
    """rlblocks' SAC module acts through its actor's plain tensors and its squashed
    Gaussian directly: the same actions, ``action_logp`` and distribution inputs as the
    module inside ``SingleAgentEnvRunner`` (draws and deterministic actions, unsquashed or
    clipped into the env's Box)."""
    from ray.rllib.algorithms.sac import SACConfig

    env = SACConfig().environment(
        "Pendulum-v1", clip_actions=not normalize, normalize_actions=normalize
    )
    theirs, ours = _both(_q_config(env, "SAC").debugging(seed=5))
    assert ours._sac_actor is not None and ours._to_env is not None
    calls = [{"num_timesteps": 90}, {"num_timesteps": 60, "explore": False}]
    _sample_both(theirs, ours, calls * 2)


def test_ppo_trains_on_its_episodes() -> None:
    """RLlib's PPO (learner connectors, GAE, loss) takes the chunks as they are."""
    config = (
        _config("rlblocks/zoo-Dict-v0", {}, num_envs=4, env_runner_cls=VectorEnvRunner)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=1)
        .learners(num_learners=0)
    )
    algo = config.build_algo()
    try:
        assert isinstance(algo.env_runner, VectorEnvRunner)
        result = algo.train()
    finally:
        algo.stop()
    learner = result["learners"]["default_policy"]
    assert np.isfinite(float(learner["total_loss"]))
    assert float(result["env_runners"]["num_env_steps_sampled"]) >= 128


def test_refuses_what_it_does_not_cover_and_runs_rllibs_loop() -> None:
    from ray.rllib.callbacks.callbacks import RLlibCallback

    class Counting(RLlibCallback):
        steps = 0

        def on_episode_step(self, **kwargs: Any) -> None:
            Counting.steps += 1

    config = _config("CartPole-v1", {}).callbacks(Counting)
    runner = VectorEnvRunner(config=config)
    assert runner.fast_path_refusal is not None and "on_episode_step" in runner.fast_path_refusal
    runner.sample(num_timesteps=30)
    assert Counting.steps >= 30  # RLlib's loop ran the callback


def test_a_failing_env_is_recreated_per_rllibs_fault_tolerance() -> None:
    fails = {"left": 1}

    class Flaky(gym.Wrapper):
        def step(self, action: Any) -> Any:
            if self.unwrapped.np_random.random() < 0.02 and fails["left"]:
                fails["left"] -= 1
                raise RuntimeError("sub-env crashed")
            return self.env.step(action)

    gym.register("rlblocks-test/Flaky-v0", lambda: Flaky(gym.make("CartPole-v1")))
    config = _config("rlblocks-test/Flaky-v0", {}).fault_tolerance(
        restart_failed_sub_environments=True
    )
    runner = VectorEnvRunner(config=config)
    episodes = runner.sample(num_timesteps=400)
    assert fails["left"] == 0
    assert sum(len(e) for e in episodes) >= 400 - 3
    for e in episodes:
        e.validate()


def test_random_actions_then_the_module_continue_the_same_episodes() -> None:
    """``random_actions=True`` (RLlib's warm-up sampling) records the env's own draws with
    no model outputs; the next ``sample()`` continues those episodes with the module."""
    runner = VectorEnvRunner(config=_config("CartPole-v1", {}, rollout_fragment_length=10))
    random_eps = runner.sample(num_timesteps=30, random_actions=True)
    assert random_eps and all(set(e.extra_model_outputs) == {"weights_seq_no"} for e in random_eps)
    ongoing = {e.id_: e for e in random_eps if not e.is_done}
    module_eps = runner.sample(num_timesteps=30)
    continued = [e for e in module_eps if e.id_ in ongoing]
    assert continued
    for e in continued:
        e.validate()
        before = ongoing[e.id_]
        assert e.t_started == before.t  # the chunk starts where the last one stopped
        np.testing.assert_array_equal(e.get_observations(0), before.get_observations(-1))
        assert {Columns.ACTION_LOGP, Columns.ACTION_DIST_INPUTS} <= set(e.extra_model_outputs)
    total = sum(len(e) for e in module_eps)
    assert 30 <= total < 30 + runner.num_envs


def test_samples_on_one_torch_thread_and_restores_the_callers() -> None:
    """A small model at a rollout's batch acts on one intra-op thread (the module's forward
    sees it), and the caller's count is back after ``sample``."""
    runner = VectorEnvRunner(config=_config("CartPole-v1", {}))
    seen: list[int] = []
    runner.module.model.register_forward_pre_hook(lambda *a: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        runner.sample(num_timesteps=12)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {1} and after == 3
