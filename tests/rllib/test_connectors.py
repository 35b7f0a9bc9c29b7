"""Env-to-module pieces: batched C++ flattening equals rlblocks' per-observation transform,
mask keys pass through, and the MeanStdFilter state merges exactly across env runners."""

from __future__ import annotations

import pickle

import pytest

ray = pytest.importorskip("ray")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Tuple  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: E402
from rlblocks import get_preprocessor, restore_original_dimensions  # noqa: E402
from rlblocks.filters import MeanStdFilter  # noqa: E402
from rlblocks.image import gray_resize  # noqa: E402
from rlblocks.models.visionnet import VisionNetwork  # noqa: E402
from rlblocks.rllib import (  # noqa: E402
    AtariFramesBatched,
    FlattenObservationsBatched,
    MeanStdFilterBatched,
    env_to_module,
    rl_module_spec,
)
from rlblocks.spaces import Repeated  # noqa: E402

NESTED = Dict(
    {
        "a": Discrete(5),
        "c": Dict({"d": MultiDiscrete([3, 4]), "e": Box(-1, 1, (3, 2))}),
        "f": Tuple((Discrete(2), Box(-1, 1, (4,)))),
        "r": Repeated(Box(-1, 1, (2,)), 3),
    }
)


def episodes(space: gym.Space, n: int, seed: int) -> tuple[list[SingleAgentEpisode], list]:
    space.seed(seed)
    obs = [space.sample() for _ in range(n)]
    eps = []
    for o in obs:
        ep = SingleAgentEpisode(observation_space=space, action_space=Discrete(2))
        ep.add_env_reset(observation=o)
        eps.append(ep)
    return eps, obs


def run(piece, eps):
    return piece(rl_module=None, batch={}, episodes=eps, explore=True, shared_data={})


def test_flatten_equals_rlblocks_transform():
    piece = FlattenObservationsBatched(NESTED, Discrete(2))
    out_space = piece.observation_space
    prep = get_preprocessor(NESTED)(NESTED)
    assert out_space.shape == prep.shape and out_space.dtype == np.float32
    assert out_space.original_space == NESTED
    eps, obs = episodes(NESTED, 16, seed=0)
    assert run(piece, eps) == {}
    for ep, o in zip(eps, obs, strict=True):
        got = ep.get_observations(-1)
        np.testing.assert_array_equal(got, prep.transform(o))
        assert got.dtype == np.float32 and ep.observation_space is out_space


def test_mask_key_passes_through_and_box_is_untouched():
    space = Dict(
        {
            "action_mask": Box(0, 1, (4,), np.int8),
            "observations": Dict({"x": Discrete(3), "y": Box(-1, 1, (2,))}),
        }
    )
    piece = FlattenObservationsBatched(space, Discrete(4))
    assert set(piece.observation_space.spaces) == {"action_mask", "observations"}
    assert piece.observation_space["action_mask"] == space["action_mask"]
    eps, obs = episodes(space, 8, seed=1)
    run(piece, eps)
    inner = space["observations"]
    prep = get_preprocessor(inner)(inner)
    for ep, o in zip(eps, obs, strict=True):
        got = ep.get_observations(-1)
        np.testing.assert_array_equal(got["action_mask"], o["action_mask"])
        np.testing.assert_array_equal(got["observations"], prep.transform(o["observations"]))

    box = Box(-1, 1, (3,))
    same = FlattenObservationsBatched(box, Discrete(2))
    assert same.observation_space == box
    eps, obs = episodes(box, 3, seed=2)
    run(same, eps)
    for ep, o in zip(eps, obs, strict=True):
        np.testing.assert_array_equal(ep.get_observations(-1), o)


def test_bad_observation_is_a_clear_error():
    piece = FlattenObservationsBatched(NESTED, Discrete(2))
    eps, _ = episodes(NESTED, 2, seed=3)
    bad = dict(eps[1].get_observations(-1))
    bad["a"] = 9
    eps[1].set_observations(at_indices=-1, new_data=bad)
    with pytest.raises(ValueError, match="out of range"):
        run(piece, eps)


def _filters(n: int) -> list[MeanStdFilterBatched]:
    return [MeanStdFilterBatched(Box(-np.inf, np.inf, (3,)), Discrete(2)) for _ in range(n)]


def test_mean_std_filter_merged_from_two_runners_equals_one_stream():
    space = Box(-np.inf, np.inf, (3,))
    rng = np.random.default_rng(0)
    driver, r1, r2 = _filters(3)
    single = MeanStdFilter((3,))
    for _round in range(3):
        for runner, n, loc in ((r1, 7, 1.0), (r2, 11, -3.0)):
            for _ in range(n):
                x = rng.normal(loc, 2.0, (3,)).astype(np.float32)
                ep = SingleAgentEpisode(observation_space=space, action_space=Discrete(2))
                ep.add_env_reset(observation=x)
                single(x)  # the one filter that sees every observation
                run(runner, [ep])
                assert ep.get_observations(-1).shape == (3,)
        merged = driver.merge_states([r1.get_state(), r2.get_state()])
        for f in (driver, r1, r2):
            f.set_state(merged)
        for f in (driver, r1, r2):
            stats = f.filter.running_stats
            assert stats.n == single.running_stats.n
            np.testing.assert_allclose(stats.mean, single.running_stats.mean, rtol=1e-12)
            np.testing.assert_allclose(stats.var, single.running_stats.var, rtol=1e-6)
            assert f.filter.buffer.n == 0
    # normalising uses the merged stats
    x = np.array([[0.5, -1.0, 2.0]], np.float32)
    ep = SingleAgentEpisode(observation_space=space, action_space=Discrete(2))
    ep.add_env_reset(observation=x[0])
    r1.update_stats = False
    run(r1, [ep])
    s = single.running_stats
    np.testing.assert_allclose(ep.get_observations(-1), (x[0] - s.mean) / (s.std + 1e-6), rtol=1e-5)


def test_mean_std_filter_batches_all_episodes_and_checks_its_state():
    space = Box(-np.inf, np.inf, (3,))
    (f,) = _filters(1)
    eps, obs = episodes(space, 5, seed=4)
    run(f, eps)
    stack = np.stack(obs)
    np.testing.assert_allclose(f.filter.running_stats.mean, stack.mean(0), rtol=1e-6)
    reference = MeanStdFilter((3,))
    np.testing.assert_allclose(
        np.stack([ep.get_observations(-1) for ep in eps]), reference(stack), rtol=1e-6
    )
    with pytest.raises(ValueError, match="needs the keys"):
        f.set_state({"shape": [3]})
    other = MeanStdFilterBatched(Box(-1, 1, (4,)), Discrete(2))
    with pytest.raises(ValueError, match="shape"):
        f.set_state(other.get_state())
    with pytest.raises(ValueError, match="needs Box observations"):
        MeanStdFilterBatched(Discrete(3), Discrete(2))


def test_env_to_module_factory():
    factory = env_to_module({"fcnet_hiddens": [8]}, observation_filter="MeanStdFilter")
    pieces = pickle.loads(pickle.dumps(factory))(None, None, None)
    assert [type(p) for p in pieces] == [FlattenObservationsBatched, MeanStdFilterBatched]
    assert [type(p) for p in env_to_module()()] == [FlattenObservationsBatched]
    with pytest.raises(ValueError, match="observation_filter"):
        env_to_module(observation_filter="Mean")
    with pytest.raises(ValueError, match="fcnet_hidden"):
        env_to_module({"fcnet_hidden": [3]})


def test_filter_state_merges_through_rllibs_pipeline():
    # RLlib pairs merged states with pieces by position among the pieces with a state: the
    # flattening piece in front of the filter must not shift the filter's state.
    from ray.rllib.connectors.env_to_module import EnvToModulePipeline

    space = Dict({"x": Discrete(3), "y": Box(-1, 1, (2,))})

    def pipeline():
        return EnvToModulePipeline(
            input_observation_space=space,
            input_action_space=Discrete(2),
            connectors=env_to_module(observation_filter="MeanStdFilter")(),
        )

    driver, p1, p2 = pipeline(), pipeline(), pipeline()
    prep = get_preprocessor(space)(space)
    single = MeanStdFilter(prep.shape)
    for p, seed in ((p1, 5), (p2, 6)):
        eps, obs = episodes(space, 9, seed=seed)
        for piece in p.connectors:
            run(piece, eps)
        single(prep.transform_batch(obs))
    merged = driver.merge_states([p1.get_state(), p2.get_state()])
    for p in (driver, p1, p2):
        p.set_state(merged)
        stats = p.connectors[1].filter.running_stats
        assert stats.n == 18
        np.testing.assert_allclose(stats.mean, single.running_stats.mean, rtol=1e-12)


def test_gymnasium_sequence_is_read_natively_with_the_configs_bound():
    space = Dict(
        {
            "items": gym.spaces.Sequence(Box(-1, 1, (2,))),
            "stacked": gym.spaces.Sequence(Dict({"a": Discrete(2)}), stack=True),
            "tag": Discrete(3),
        }
    )
    # the connector's argument overrides the config's sequence_max_len
    piece = FlattenObservationsBatched(
        space, Discrete(2), model_config={"sequence_max_len": 9}, sequence_max_len=4
    )
    # Repeated's layout per sequence: [length, items..., zero padding]
    assert piece.observation_space.shape == ((1 + 4 * 2) + (1 + 4 * 2) + 3,)
    obs = {
        "items": (np.array([0.5, -0.5], np.float32), np.array([0.25, 1.0], np.float32)),
        "stacked": {"a": np.array([1, 0, 1])},
        "tag": 2,
    }
    ep = SingleAgentEpisode(observation_space=space, action_space=Discrete(2))
    ep.add_env_reset(observation=obs)
    run(piece, [ep])
    expected = np.concatenate(
        [
            [2, 0.5, -0.5, 0.25, 1.0, 0, 0, 0, 0],  # items
            [3, 0, 1, 1, 0, 0, 1, 0, 0],  # stacked: one-hot a per item
            [0, 0, 1],  # tag
        ]
    ).astype(np.float32)
    np.testing.assert_array_equal(ep.get_observations(-1), expected)
    # the Box carries the Sequence space itself and the layout that wrote the rows, so the
    # module restores the items with the connector's bound (pickled as to a learner too)
    out = pickle.loads(pickle.dumps(piece.observation_space))
    assert out.original_space == space
    restored = restore_original_dimensions(expected[None], out)
    assert restored["items"].max_len == 4 and restored["items"].lengths.tolist() == [2.0]
    np.testing.assert_array_equal(restored["items"].values[0, :2], [[0.5, -0.5], [0.25, 1.0]])
    too_long = dict(obs, items=tuple(np.zeros(2, np.float32) for _ in range(5)))
    ep.set_observations(at_indices=-1, new_data=too_long)
    with pytest.raises(ValueError, match="length 5 is longer than sequence_max_len=4"):
        run(piece, [ep])
    # without the argument: the model config's key, else its default
    sized = FlattenObservationsBatched(space, Discrete(2), model_config={"sequence_max_len": 6})
    assert sized.observation_space.shape == ((1 + 6 * 2) + (1 + 6 * 2) + 3,)
    default = FlattenObservationsBatched(space, Discrete(2))
    assert default.observation_space.shape == ((1 + 64 * 2) + (1 + 64 * 2) + 3,)
    # a filter after the flattening keeps the structure and its layout
    filtered = MeanStdFilterBatched(piece.observation_space, Discrete(2))
    assert filtered.observation_space.layout is piece.observation_space.layout
    with pytest.raises(ValueError, match="sequence_max_len"):
        env_to_module(sequence_max_len=0)


STRUCTURED = Dict(
    {
        "graph": gym.spaces.Graph(Box(0, 1, (2,)), Box(0, 1, (1,))),
        "text": gym.spaces.Text(4, min_length=1, charset="abc"),
        "union": gym.spaces.OneOf((Discrete(3), Box(-1, 1, (2,)))),
    }
)


def test_graph_text_and_oneof_are_flattened_in_one_batched_call():
    config = {"graph_max_nodes": 3, "graph_max_edges": 2}
    piece = FlattenObservationsBatched(STRUCTURED, Discrete(2), model_config=config)
    graph_size = 2 + 3 * 2 + 2 * 1 + 2 * 2
    text_size = 1 + 4 * 3
    assert piece.observation_space.shape == (graph_size + text_size + 2 + 3 + 2,)
    obs = {
        "graph": gym.spaces.GraphInstance(
            np.array([[1.0, 0.5], [0.0, 0.25]], np.float32),
            np.array([[0.75], [0.125]], np.float32),
            np.array([[0, 1], [1, 0]]),
        ),
        "text": "cab",
        "union": (1, np.array([0.5, -1.0], np.float32)),
    }
    ep = SingleAgentEpisode(observation_space=STRUCTURED, action_space=Discrete(2))
    ep.add_env_reset(observation=obs)
    run(piece, [ep])
    expected = np.concatenate(
        [
            [2, 2, 1.0, 0.5, 0.0, 0.25, 0, 0, 0.75, 0.125, 0, 1, 1, 0],  # graph
            [3, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0],  # text: one-hot per character
            [0, 1, 0, 0, 0, 0.5, -1.0],  # union: branch one-hot, branch 0 zero, branch 1
        ]
    ).astype(np.float32)
    np.testing.assert_array_equal(ep.get_observations(-1), expected)
    # many episodes at once: the rows of rlblocks' per-observation transform
    prep = get_preprocessor(STRUCTURED)(STRUCTURED, config)
    rng = np.random.default_rng(0)
    rows, eps = [], []
    for i in range(6):
        n = int(rng.integers(1, 4))
        o = {
            "graph": gym.spaces.GraphInstance(
                rng.uniform(0, 1, (n, 2)).astype(np.float32),
                np.zeros((n - 1, 1), np.float32),
                np.array([[k, k + 1] for k in range(n - 1)]).reshape(-1, 2),
            ),
            "text": "abc"[: 1 + i % 3],
            "union": (0, i % 3) if i % 2 else (1, rng.uniform(-1, 1, 2).astype(np.float32)),
        }
        e = SingleAgentEpisode(observation_space=STRUCTURED, action_space=Discrete(2))
        e.add_env_reset(observation=o)
        eps.append(e)
        rows.append(prep.transform(o))
    run(piece, eps)
    np.testing.assert_array_equal(np.stack([e.get_observations(-1) for e in eps]), rows)
    restored = restore_original_dimensions(np.stack(rows), piece.observation_space)
    assert restored["graph"].nodes.shape == (6, 3, 2)
    assert restored["text"].ids.shape == (6, 4)
    assert restored["union"].index.tolist() == [1, 0, 1, 0, 1, 0]
    # the mean/std filter after it normalises the values and keeps the structure: the
    # counts, the edge links, the text's length and its one-hot characters pass through as
    # the flattening wrote them
    filtered = MeanStdFilterBatched(piece.observation_space, Discrete(2))
    keep = filtered.filter.passthrough
    lay = piece.observation_space.layout
    structure = [0, 1, 10, 11, 12, 13, *range(14, 27)]
    assert keep.tolist() == lay.structure_columns.tolist() == structure
    assert filtered.observation_space.high[keep].tolist() == [np.inf] * len(structure)
    run(filtered, eps)
    out = np.stack([e.get_observations(-1) for e in eps])
    np.testing.assert_array_equal(out[:, keep], np.stack(rows)[:, keep])
    plain = MeanStdFilter((prep.size,), clip=10.0)
    values = np.setdiff1d(np.arange(prep.size), keep)
    np.testing.assert_allclose(out[:, values], plain(np.stack(rows))[:, values], atol=1e-6)
    kept = restore_original_dimensions(out, filtered.observation_space)
    assert kept["graph"].n_nodes.tolist() == restored["graph"].n_nodes.tolist()
    assert kept["text"].lengths.tolist() == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]


def test_model_views_join_the_observation():
    from rlblocks.models.framestack_model import FrameStackingModel
    from rlblocks.rllib import ModelViewObservations

    box = Box(-1, 1, (2,))
    pieces = env_to_module(
        {"use_lstm": True, "lstm_use_prev_action": True, "lstm_use_prev_reward": True}
    )()
    assert [type(p) for p in pieces] == [FlattenObservationsBatched, ModelViewObservations]
    lstm = pieces[1]
    lstm.input_observation_space, lstm.input_action_space = box, Discrete(3)
    assert lstm.views == {
        "prev_actions": ("actions", [-1], False),
        "prev_rewards": ("rewards", [-1], False),
    }
    plain = ModelViewObservations(box, Discrete(3), model_config={})
    assert plain.views == {} and plain.observation_space == box  # nothing to add

    # the guide's frame-stacking model: the last 3 observations, actions and rewards
    piece = ModelViewObservations(
        box,
        Discrete(3),
        model_config={"custom_model": FrameStackingModel, "custom_model_config": {"num_frames": 3}},
    )
    out = piece.observation_space
    assert set(out.spaces) == {"observations", "prev_n_obs", "prev_n_actions", "prev_n_rewards"}
    assert out["prev_n_actions"] == MultiDiscrete([3, 3, 3]) and out["prev_n_obs"].shape == (3, 2)
    ep = SingleAgentEpisode(observation_space=box, action_space=Discrete(3))
    frames = [np.full(2, i, np.float32) / 10 for i in range(5)]
    ep.add_env_reset(observation=frames[0])
    run(piece, [ep])
    first = ep.get_observations(-1)
    np.testing.assert_array_equal(first["prev_n_obs"], np.stack([frames[0]] * 3))
    assert first["prev_n_actions"].tolist() == [0, 0, 0]
    assert first["prev_n_rewards"].tolist() == [0, 0, 0]
    for t, (action, reward) in enumerate(((2, 1.5), (1, -0.5), (0, 2.0), (2, 0.25)), 1):
        ep.add_env_step(observation=frames[t], action=action, reward=reward)
        run(piece, [ep])
        run(piece, [ep])  # a second call on the same step changes nothing
    last = ep.get_observations(-1)
    np.testing.assert_array_equal(last["observations"], frames[4])
    np.testing.assert_array_equal(last["prev_n_obs"], np.stack(frames[2:5]))
    assert last["prev_n_actions"].tolist() == [1, 0, 2]
    assert last["prev_n_rewards"].tolist() == [-0.5, 2.0, 0.25]
    assert out.contains(last)
    with pytest.raises(ValueError, match="give model_config or views"):
        ModelViewObservations(box, Discrete(3))


def test_atari_frames_gray_resize_and_stack_per_episode():
    space = Box(0, 255, (210, 160, 3), np.uint8)
    (piece,) = env_to_module({"dim": 42}, atari=True)()
    assert isinstance(piece, AtariFramesBatched)
    piece.input_observation_space = space
    piece.input_action_space = Discrete(4)
    assert piece.observation_space == Box(0, 255, (42, 42, 4), np.uint8)
    rng = np.random.default_rng(0)

    def frame():
        return rng.integers(0, 256, (210, 160, 3), dtype=np.uint8)

    eps, history = [], []
    for _ in range(3):
        ep = SingleAgentEpisode(observation_space=space, action_space=Discrete(4))
        first = frame()
        ep.add_env_reset(observation=first)
        eps.append(ep)
        history.append([gray_resize(first, 42)[..., 0]] * 4)
    run(piece, eps)
    for step in range(6):
        for i, ep in enumerate(eps):
            done = i == 1 and step == 2  # episode 1 ends; a new one takes its place
            f = frame()
            ep.add_env_step(observation=f, action=0, reward=0.0, terminated=done)
            history[i] = history[i][1:] + [gray_resize(f, 42)[..., 0]]
        run(piece, eps)
        for i, ep in enumerate(eps):
            np.testing.assert_array_equal(ep.get_observations(-1), np.stack(history[i], -1))
        if step == 2:
            new = SingleAgentEpisode(observation_space=space, action_space=Discrete(4))
            first = frame()
            new.add_env_reset(observation=first)
            eps[1] = new
            history[1] = [gray_resize(first, 42)[..., 0]] * 4
            run(piece, [new])
            np.testing.assert_array_equal(new.get_observations(-1), np.stack(history[1], -1))
    assert len(piece._slots) == 3  # the finished episode's slot was given back
    # the stacked uint8 frames feed rlblocks' vision network through the module
    spec = rl_module_spec({"dim": 42})
    spec.observation_space, spec.action_space = piece.observation_space, Discrete(4)
    module = spec.build()
    assert isinstance(module.model, VisionNetwork)
    batch = torch.from_numpy(np.stack([ep.get_observations(-1) for ep in eps]))
    out = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
    assert out.shape == (3, 4) and bool(torch.isfinite(out).all())
    with pytest.raises(ValueError, match="RGB uint8 frames"):
        AtariFramesBatched(Box(0, 1, (84, 84, 4)), Discrete(2))
    with pytest.raises(ValueError, match="NoFilter"):
        env_to_module(observation_filter="MeanStdFilter", atari=True)


class _MaskedRepeatedEnv(gym.Env):
    """Action mask + a Dict holding a Repeated: lists of 0..3 items, random lengths."""

    def __init__(self):
        self.observation_space = Dict(
            {
                "action_mask": Box(0, 1, (3,), np.int8),
                "observations": Dict({"r": Repeated(Box(-1, 1, (2,)), 3), "x": Discrete(4)}),
            }
        )
        self.action_space = Discrete(3)

    def _obs(self):
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, False, False, {}


def test_repeated_is_flattened_env_side_and_the_connector_passes_it_through():
    from ray.rllib.utils.spaces.space_utils import unbatch
    from rlblocks.rllib.connectors import FlatRepeatedObservations, has_repeated

    raw = _MaskedRepeatedEnv()
    assert has_repeated(raw.observation_space) and not has_repeated(NESTED["c"])
    env = FlatRepeatedObservations(_MaskedRepeatedEnv())
    inner = raw.observation_space["observations"]
    prep = get_preprocessor(inner)(inner)
    space = env.observation_space
    assert space["action_mask"] == raw.observation_space["action_mask"]
    assert space["observations"].shape == prep.shape
    assert space["observations"].original_space == inner
    # the same rows as rlblocks' preprocessor; the action mask untouched
    raw.reset(seed=5)
    obs, _ = env.reset(seed=5)
    expected, _ = raw.reset(seed=5)
    np.testing.assert_array_equal(obs["observations"], prep.transform(expected["observations"]))
    np.testing.assert_array_equal(obs["action_mask"], expected["action_mask"])
    # the connector keeps the flat rows (and the original space) as they are
    piece = FlattenObservationsBatched(space, Discrete(3))
    assert piece.observation_space["observations"].original_space == inner
    eps, rows = episodes(space, 4, seed=6)
    run(piece, eps)
    for ep, o in zip(eps, rows, strict=True):
        np.testing.assert_array_equal(ep.get_observations(-1)["observations"], o["observations"])
    # what RLlib's env runner does with a vector env's batch: unbatch it per env
    venv = gym.vector.SyncVectorEnv(
        [lambda: FlatRepeatedObservations(_MaskedRepeatedEnv()) for _ in range(3)]
    )
    batch, _ = venv.reset(seed=0)
    per_env = unbatch(batch)
    assert len(per_env) == 3 and per_env[0]["observations"].shape == prep.shape
    venv.close()


@pytest.mark.parametrize("name", ["Sequence", "Graph", "Text", "OneOf"])
def test_structured_zoo_envs_are_flattened_env_side_and_unbatch(name):
    from ray.rllib.utils.spaces.space_utils import unbatch
    from rlblocks.rllib.connectors import FlatRepeatedObservations, needs_env_side_flattening

    env_id = f"rlblocks.envs:rlblocks/zoo-{name}-v0"
    raw = gym.make(env_id)
    space = raw.observation_space
    assert needs_env_side_flattening(space) and needs_env_side_flattening(Dict({"x": space}))
    assert not needs_env_side_flattening(NESTED["c"])
    prep = get_preprocessor(space)(space)
    venv = gym.vector.SyncVectorEnv(
        [lambda: FlatRepeatedObservations(gym.make(env_id)) for _ in range(3)]
    )
    assert venv.single_observation_space.original_space == space
    batch, _ = venv.reset(seed=0)
    per_env = unbatch(batch)
    expected = [prep.transform(gym.make(env_id).reset(seed=i)[0]) for i in range(3)]
    np.testing.assert_array_equal(np.stack(per_env), np.stack(expected))
    venv.close()
