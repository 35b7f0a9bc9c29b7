"""Palette-indexed ALE env and the dedicated Atari vector env vs gymnasium's ALE env and
the single-env DeepMind wrappers."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import rlblocks.wrappers as W
from rlblocks.wrappers.atari_vector import AtariVectorEnv
from rlblocks.wrappers.vector import make_vector_env

ale_py = pytest.importorskip("ale_py")
gym.register_envs(ale_py)

KW = {"frameskip": 1, "repeat_action_probability": 0.0}


def rgb_env(game):
    return gym.make(game, **KW)


@pytest.mark.parametrize("game", ["ALE/Breakout-v5", "ALE/Pong-v5"])
def test_palette_env_frames_are_the_rgb_screens(game):
    pal = W.make_atari_env(game, **KW)
    ref = rgb_env(game)
    assert W.is_atari(pal) and pal.spec.id == game and pal.spec.kwargs["frameskip"] == 1
    assert pal.observation_space == ref.observation_space
    obs, info = pal.reset(seed=5)
    want, want_info = ref.reset(seed=5)
    assert type(obs) is W.PaletteFrame and obs.shape == (210, 160, 3)
    rng = np.random.default_rng(0)
    resets = 0
    for _ in range(1500):
        np.testing.assert_array_equal(np.asarray(obs), want)
        assert {k: info[k] for k in ("lives", "frame_number")} == {
            k: want_info[k] for k in ("lives", "frame_number")
        }
        a = int(rng.integers(pal.action_space.n))
        obs, r, te, tr, info = pal.step(a)
        want, r2, te2, tr2, want_info = ref.step(a)
        assert (r, te, tr) == (r2, te2, tr2)
        if te or tr:
            resets += 1
            obs, info = pal.reset()
            want, want_info = ref.reset()
    known = pal.unwrapped._known.astype(bool)
    assert 2 < known.sum() < 64  # learnt the game's colours only, lazily
    if game == "ALE/Breakout-v5":
        assert resets >= 1


def test_palette_frames_through_the_plain_wrappers():
    """MaxAndSkip without a WarpFrame above returns np.maximum of the RGB frames; WarpFrame
    over a palette env equals WarpFrame over the RGB env."""
    skip = W.MaxAndSkipEnv(W.make_atari_env("ALE/Pong-v5", **KW), 4)
    ref = W.MaxAndSkipEnv(rgb_env("ALE/Pong-v5"), 4)
    warped = W.WarpFrame(W.make_atari_env("ALE/Pong-v5", **KW), 42, grayscale=False)
    warped_ref = W.WarpFrame(rgb_env("ALE/Pong-v5"), 42, grayscale=False)
    for env in (skip, ref, warped, warped_ref):
        env.reset(seed=1)
    for t in range(40):
        a = t % 6
        got, want = skip.step(a)[0], ref.step(a)[0]
        assert type(got) is np.ndarray
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(warped.step(a)[0], warped_ref.step(a)[0])


def test_make_atari_env_refuses_other_envs():
    with pytest.raises(ValueError, match="ALE env id"):
        W.make_atari_env("CartPole-v1")
    with pytest.raises(ValueError, match="unknown env id 'ALE/NoSuchGame-v5'"):
        W.make_atari_env("ALE/NoSuchGame-v5")
    with pytest.raises(ValueError, match="obs_type='rgb'"):
        W.make_atari_env("ALE/Pong-v5", obs_type="grayscale")


def single_pipelines(game, n, dim, framestack):
    return [W.wrap_deepmind(rgb_env(game), dim, framestack, True) for _ in range(n)]


def replay(singles, done, actions):
    """One NEXT_STEP-autoreset vector step over single envs."""
    out = []
    for i, s in enumerate(singles):
        if done[i]:
            obs, info = s.reset()
            out.append((obs, 0.0, False, False, info))
        else:
            out.append(s.step(int(actions[i])))
    return out


@pytest.mark.parametrize(("num_envs", "workers", "steps"), [(3, 1, 700), (2, 0, 150)])
def test_vector_env_matches_single_pipelines(num_envs, workers, steps):
    game = "ALE/Breakout-v5"
    venv = (
        make_vector_env(
            game,
            num_envs,
            {"dim": 84},
            "deepmind",
            vectorization_mode="atari",
            noframeskip=True,
            **KW,
        )
        if workers == num_envs - 1
        else AtariVectorEnv(game, num_envs, noframeskip=True, num_workers=workers, **KW)
    )
    singles = single_pipelines(game, num_envs, 84, True)
    try:
        assert venv.single_observation_space.shape == (84, 84, 4)
        assert venv.observation_space.shape == (num_envs, 84, 84, 4)
        obs, info = venv.reset(seed=[3, None, 9][:num_envs] if num_envs == 3 else 3)
        seeds = [3, None, 9] if num_envs == 3 else [3, 4]
        ref = [s.reset(seed=seeds[i]) for i, s in enumerate(singles)]
        if num_envs == 3:  # the unseeded sub-env's noops are random: not compared
            singles[1] = None
        rng = np.random.default_rng(2)
        done = [False] * num_envs
        episodes = dones = 0
        for _ in range(steps):
            for i, s in enumerate(singles):
                if s is not None:
                    np.testing.assert_array_equal(obs[i], ref[i][0])
                    assert info["lives"][i] == ref[i][-1]["lives"]
                    assert info["frame_number"][i] == ref[i][-1]["frame_number"]
            actions = rng.integers(4, size=num_envs)
            obs, reward, te, tr, info = venv.step(actions)
            live = [s for s in singles if s is not None]
            stepped = replay(
                live,
                [d for d, s in zip(done, singles, strict=True) if s],
                [a for a, s in zip(actions, singles, strict=True) if s],
            )
            it = iter(stepped)
            ref = [next(it) if s is not None else None for s in singles]
            for i, r in enumerate(ref):
                if r is None:
                    continue
                assert (reward[i], te[i], tr[i]) == (r[1], r[2], r[3])
                ended = "episode" in r[4]
                assert ended == bool(info.get("_episode", np.zeros(num_envs, bool))[i])
                if ended:
                    episodes += 1
                    assert info["episode"]["r"][i] == r[4]["episode"]["r"]
                    assert info["episode"]["l"][i] == r[4]["episode"]["l"]
            done = list(te | tr)
            dones += int((te | tr).sum())
            assert obs.dtype == np.uint8 and obs.shape == (num_envs, 84, 84, 4)
        if steps > 500:
            assert dones >= 3 and episodes >= 1  # life losses and a game over were replayed
    finally:
        venv.close()
    venv.close()  # idempotent


def test_vector_env_options_and_bad_input():
    venv = AtariVectorEnv("ALE/Pong-v5", 2, dim=42, framestack=None, **KW)
    try:
        assert repr(venv) == "AtariVectorEnv(num_envs=2, workers=1)"
        with pytest.raises(RuntimeError, match="before reset"):
            venv.step(np.zeros(2, dtype=np.int64))
        obs, info = venv.reset(seed=0)
        assert obs.shape == (2, 42, 42, 1) and set(info) >= {"lives", "_lives", "frame_number"}
        for bad, match in [
            (np.zeros(3, np.int64), "2 integers"),
            (np.zeros(2), "2 integers"),
            (np.array([0, 6]), "out of range"),
            (np.array([-1, 0]), "out of range"),
        ]:
            with pytest.raises(ValueError, match=match):
                venv.step(bad)
        with pytest.raises(ValueError, match="options"):
            venv.reset(options={"reset_mask": np.array([True, False])})
        with pytest.raises(ValueError, match="expected 2 seeds"):
            venv.reset(seed=[1, 2, 3])
        obs, *_ = venv.step(np.array([1, 2]))
        assert obs.shape == (2, 42, 42, 1)
    finally:
        venv.close()
    with pytest.raises(RuntimeError, match="closed"):
        venv.step(np.zeros(2, dtype=np.int64))
    for kwargs, match in [
        ({"num_envs": 0}, "num_envs"),
        ({"num_workers": 2}, "num_workers"),
        ({"dim": 0}, "dim"),
        ({"framestack": 0}, "framestack"),
    ]:
        with pytest.raises(ValueError, match=match):
            AtariVectorEnv("ALE/Pong-v5", **{"num_envs": 2, **kwargs})
    with pytest.raises(ValueError, match="DeepMind pipeline"):
        make_vector_env("CartPole-v1", 2, vectorization_mode="atari")
    with pytest.raises(ValueError, match="DeepMind pipeline"):
        make_vector_env("ALE/Pong-v5", 2, {}, "rllib", vectorization_mode="atari")


def test_vector_env_reports_a_dead_worker():
    venv = AtariVectorEnv("ALE/Pong-v5", 2, **KW)
    venv.reset(seed=0)
    venv._procs[0].kill()
    venv._procs[0].join()
    with pytest.raises(RuntimeError, match="worker 0 died"):
        for _ in range(3):
            venv.step(np.zeros(2, dtype=np.int64))
    assert venv.closed


def test_vector_env_spawn_context_matches_fork():
    """Workers started with "spawn" (macOS/Windows default) compute the same steps."""
    envs = [
        AtariVectorEnv("ALE/Pong-v5", 2, context=ctx, noframeskip=True, **KW)
        for ctx in ("spawn", None)
    ]
    try:
        first = [e.reset(seed=4)[0] for e in envs]
        np.testing.assert_array_equal(first[0], first[1])
        for t in range(20):
            a = np.array([t % 6, (t * 5) % 6])
            got = [e.step(a) for e in envs]
            np.testing.assert_array_equal(got[0][0], got[1][0])
            np.testing.assert_array_equal(got[0][1], got[1][1])
    finally:
        for e in envs:
            e.close()
