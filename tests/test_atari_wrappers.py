"""DeepMind wrappers and vector preprocessing vs plain reference implementations."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np
import pytest
import rlblocks.wrappers as W
from gymnasium.vector import AutoresetMode
from rlblocks import image
from rlblocks.wrappers.atari_vector import VectorAtariPreprocessing, VectorGenericPixel
from rlblocks.wrappers.vector import make_vector_env

cv2 = pytest.importorskip("cv2")


class FakePixelEnv(gym.Env):
    """Deterministic frames: frame value depends on (episode, t); episodes last
    ``episode_len`` steps (terminated) unless ``truncate_at`` is hit first."""

    metadata: dict = {"render_modes": []}

    def __init__(
        self,
        episode_len=7,
        shape=(30, 20, 3),
        meanings=("NOOP", "FIRE", "UP"),
        flat=False,
        base=0,
        truncate_at=None,
    ):
        self.observation_space = gym.spaces.Box(0, 255, shape, dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(len(meanings))
        self.meanings = list(meanings)
        self.episode_len, self.flat, self.base = episode_len, flat, base
        self.truncate_at = truncate_at
        self.episode, self.t = -1, 0
        self.actions: list[int] = []

    def get_action_meanings(self):
        return self.meanings

    def _obs(self):
        if self.flat:  # value grows with t, so the max of two frames is the later one
            return np.full(self.observation_space.shape, 10 * self.episode + self.t, np.uint8)
        rng = np.random.default_rng(self.base + 1000 * self.episode + self.t)
        return rng.integers(0, 256, self.observation_space.shape, dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {"episode_id": self.episode}

    def step(self, action):
        self.actions.append(int(action))
        self.t += 1
        terminated = self.t >= self.episode_len
        truncated = self.truncate_at is not None and self.t >= self.truncate_at and not terminated
        return self._obs(), float(self.t), terminated, truncated, {"t": self.t}


# --------------------------------------------------------------------- single wrappers


def test_max_and_skip_uses_this_steps_frames_even_on_early_end():
    env = W.MaxAndSkipEnv(FakePixelEnv(episode_len=6, flat=True), skip=4)
    obs, _ = env.reset()
    assert obs[0, 0, 0] == 0
    obs, reward, terminated, _, _ = env.step(0)  # frames 1..4 -> max(3, 4)
    assert (obs == 4).all() and reward == 1 + 2 + 3 + 4 and not terminated
    obs, reward, terminated, _, _ = env.step(0)  # frames 5, 6 (terminal): RLlib returns 4
    assert (obs == 6).all() and reward == 11 and terminated
    obs, _ = env.reset()
    assert (obs == 10).all()
    obs, *_ = env.step(0)
    assert (obs == 14).all()


def test_max_and_skip_first_repeat_terminal_pairs_with_previous_frame():
    env = W.MaxAndSkipEnv(FakePixelEnv(episode_len=5, flat=False), skip=4)
    env.reset()
    env.step(0)  # frames 1..4
    inner = env.unwrapped
    before = inner._obs().copy()  # frame 4
    obs, _, terminated, _, _ = env.step(0)  # frame 5 ends the episode at once
    inner.t = 5
    np.testing.assert_array_equal(obs, np.maximum(before, inner._obs()))
    assert terminated


def test_warp_frame_fuses_the_max_of_max_and_skip():
    skip = W.MaxAndSkipEnv(FakePixelEnv(episode_len=9, shape=(210, 160, 3)), skip=4)
    warped = W.WarpFrame(skip, dim=84)
    assert skip.defer_max
    plain = W.MaxAndSkipEnv(FakePixelEnv(episode_len=9, shape=(210, 160, 3)), skip=4)
    np.testing.assert_array_equal(warped.reset()[0], image.gray_resize(plain.reset()[0], 84))
    for _ in range(3):  # full step, early end (frames 5..8, then 9), reset path
        got = warped.step(0)
        want = plain.step(0)
        np.testing.assert_array_equal(got[0], image.gray_resize(want[0], 84))
        assert got[1:4] == want[1:4]
        if got[2]:
            np.testing.assert_array_equal(
                warped.reset()[0], image.gray_resize(plain.reset()[0], 84)
            )
    fake = FakePixelEnv(shape=(210, 160, 3))
    fake.spec = gym.envs.registration.EnvSpec("FakePixel-v0")
    dm = W.wrap_deepmind(fake, noframeskip=True)
    e = dm
    while not isinstance(e, W.MaxAndSkipEnv):
        e = e.env
    assert e.defer_max


def test_fire_reset_returns_the_fresh_frame_after_a_final_step():
    env = W.FireResetEnv(FakePixelEnv(episode_len=2, flat=True))
    obs, info = env.reset()
    # reset (ep 0) -> FIRE (t=1) -> action 2 (t=2, episode over) -> reset (ep 1, t=0).
    assert (obs == 10).all() and info["episode_id"] == 1
    assert env.unwrapped.actions == [1, 2]


def test_noop_reset_counts_and_validation():
    env = W.NoopResetEnv(FakePixelEnv(episode_len=1000), noop_max=30)
    counts = set()
    for seed in range(20):
        env.reset(seed=seed)
        counts.add(env.unwrapped.t)
    assert counts <= set(range(1, 31)) and len(counts) > 5
    env.override_num_noops = 3
    env.reset()
    assert env.unwrapped.t == 3
    with pytest.raises(ValueError, match="NOOP"):
        W.NoopResetEnv(FakePixelEnv(meanings=("FIRE", "NOOP", "UP")))
    with pytest.raises(ValueError, match="FIRE"):
        W.FireResetEnv(FakePixelEnv(meanings=("NOOP", "UP", "FIRE")))


def test_episodic_life_resets_for_real_after_truncation():
    env = W.EpisodicLifeEnv(FakePixelEnv(episode_len=100, truncate_at=3))
    env.unwrapped.ale = type("Ale", (), {"lives": staticmethod(lambda: 0)})()
    env.reset()
    for _ in range(3):
        *_, truncated, _ = env.step(0)
    assert truncated
    _, info = env.reset()
    assert info["episode_id"] == 1  # RLlib would step the truncated game instead


def test_frame_stack_order_and_fresh_arrays():
    env = W.FrameStack(FakePixelEnv(episode_len=50, flat=True, shape=(4, 5, 1)), k=3)
    obs, _ = env.reset()
    assert obs.shape == (4, 5, 3) and (obs == 0).all()
    assert env.observation_space.shape == (4, 5, 3)
    seen = [obs]
    for _ in range(4):
        obs, *_ = env.step(0)
        seen.append(obs)
    np.testing.assert_array_equal(seen[-1][0, 0], [2, 3, 4])  # oldest first
    np.testing.assert_array_equal(seen[1][0, 0], [0, 0, 1])  # earlier arrays unchanged


def test_warp_frame_and_clip_reward():
    env = W.WarpFrame(FakePixelEnv(shape=(210, 160, 3)), dim=84)
    obs, _ = env.reset()
    assert obs.shape == (84, 84, 1) and obs.dtype == np.uint8
    assert env.observation_space.shape == (84, 84, 1)
    raw = FakePixelEnv(shape=(210, 160, 3))
    np.testing.assert_array_equal(obs, image.gray_resize(raw.reset()[0], 84))
    colour = W.WarpFrame(FakePixelEnv(shape=(210, 160, 3)), dim=42, grayscale=False)
    assert colour.reset()[0].shape == (42, 42, 3)
    clip = W.ClipRewardEnv(FakePixelEnv())
    assert [clip.reward(r) for r in (-2.5, 0.0, 0.1)] == [-1.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="RGB"):
        W.WarpFrame(FakePixelEnv(shape=(10, 10, 1)))


def test_normalized_image_env_is_exact_for_every_byte():
    env = W.NormalizedImageEnv(FakePixelEnv(shape=(16, 16, 1)))
    assert env.observation_space == gym.spaces.Box(-1.0, 1.0, (16, 16, 1), np.float32)
    every_byte = np.arange(256, dtype=np.uint8).reshape(16, 16, 1)
    out = env.observation(every_byte)
    assert out.dtype == np.float32 and out.shape == (16, 16, 1)
    # (v - 128) / 128 is exact in float32 for every byte.
    np.testing.assert_array_equal(out.ravel(), (np.arange(256) - 128) / 128)
    assert env.observation_space.contains(out)
    obs, _ = env.reset()
    raw, _ = FakePixelEnv(shape=(16, 16, 1)).reset()
    np.testing.assert_array_equal(obs, (raw.astype(np.float64) - 128) / 128)
    stacked = W.NormalizedImageEnv(
        W.FrameStack(W.WarpFrame(FakePixelEnv(shape=(210, 160, 3)), dim=42), 4)
    )
    assert stacked.reset()[0].shape == (42, 42, 4)
    with pytest.raises(ValueError, match="uint8 Box"):
        W.NormalizedImageEnv(gym.make("CartPole-v1"))


# --------------------------------------------------------------------- real ALE games


class ReferenceDeepMind:
    """wrap_deepmind(noframeskip=True) written flat with deques and OpenCV."""

    def __init__(self, env: gym.Env, dim: int = 84, k: int = 4):
        self.env, self.ale = env, env.unwrapped.ale
        self.fire = env.unwrapped.get_action_meanings()[1] == "FIRE"
        self.dim, self.k = dim, k
        self.last = None
        self.lives, self.real_done = 0, True
        self.frames: deque = deque(maxlen=k)

    def noop_reset(self, seed=None):
        obs, _ = self.env.reset(seed=seed)
        for _ in range(int(self.env.unwrapped.np_random.integers(1, 31))):
            obs, _, te, tr, _ = self.env.step(0)
            if te or tr:
                obs, _ = self.env.reset()
        self.last = obs
        return obs

    def skip(self, a):
        pair, total = [self.last], 0.0
        for _ in range(4):
            obs, r, te, tr, _ = self.env.step(a)
            pair.append(obs)
            total += r
            if te or tr:
                break
        self.last = pair[-1]
        return np.maximum(pair[-2], pair[-1]), total, te, tr

    def life_step(self, a):
        obs, r, te, tr = self.skip(a)
        self.real_done = te or tr
        lives = self.ale.lives()
        if 0 < lives < self.lives:
            te = True
        self.lives = lives
        return obs, r, te, tr

    def life_reset(self, seed=None):
        if self.real_done:
            obs = self.noop_reset(seed)
        else:
            obs, _, te, tr = self.skip(0)
            if te or tr:
                obs = self.noop_reset()
        self.lives = self.ale.lives()
        return obs

    def reset(self, seed=None):
        obs = self.life_reset(seed)
        if self.fire:
            _, _, te, tr = self.life_step(1)
            if te or tr:
                self.life_reset()
            obs, _, te, tr = self.life_step(2)
            if te or tr:
                obs = self.life_reset()
        self.frames.extend([obs] * self.k)
        return obs

    def step(self, a):
        obs, r, te, tr = self.life_step(a)
        self.frames.append(obs)
        return obs, r, te, tr

    def stacked_cv2(self):
        warp = [
            cv2.resize(
                cv2.cvtColor(f, cv2.COLOR_RGB2GRAY),
                (self.dim, self.dim),
                interpolation=cv2.INTER_AREA,
            )
            for f in self.frames
        ]
        return np.stack(warp, axis=-1)

    def stacked_ours(self):
        return np.concatenate([image.gray_resize(f, self.dim) for f in self.frames], axis=-1)


def make_ale(game: str) -> gym.Env:
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)
    return gym.make(game, frameskip=1, repeat_action_probability=0.0)


@pytest.mark.parametrize("palette", [False, True], ids=["rgb-env", "palette-env"])
@pytest.mark.parametrize(("game", "steps"), [("ALE/Pong-v5", 150), ("ALE/Breakout-v5", 250)])
def test_wrap_deepmind_matches_reference_on_real_games(game, steps, palette):
    base = (
        W.make_atari_env(game, frameskip=1, repeat_action_probability=0.0)
        if palette
        else make_ale(game)
    )
    ours = W.wrap_deepmind(base, dim=84, framestack=True, noframeskip=True)
    ref = ReferenceDeepMind(make_ale(game))
    rng = np.random.default_rng(0)
    obs, _ = ours.reset(seed=3)
    ref.reset(seed=3)
    lives_lost = resets = 0
    for _ in range(steps):
        np.testing.assert_array_equal(obs, ref.stacked_ours())
        diff = np.abs(obs.astype(int) - ref.stacked_cv2()).max()
        assert diff <= 1
        a = int(rng.integers(ours.action_space.n))
        obs, r, te, tr, _ = ours.step(a)
        _, r_ref, te_ref, tr_ref = ref.step(a)
        assert (r, te, tr) == (r_ref, te_ref, tr_ref)
        if te or tr:
            lives_lost += int(ref.lives > 0)
            resets += 1
            obs, _ = ours.reset()
            ref.reset()
    assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8
    if game == "ALE/Breakout-v5":
        assert lives_lost >= 1  # the episodic-life path was exercised


def test_preprocess_env_picks_pipeline_from_config():
    env = make_ale("ALE/Pong-v5")
    dm = W.preprocess_env(env, {"dim": 42, "framestack": False})
    assert dm.observation_space.shape == (42, 42, 1)
    rl = W.preprocess_env(make_ale("ALE/Pong-v5"), {"dim": 42, "grayscale": True}, "rllib")
    obs, _ = rl.reset(seed=0)
    assert obs.shape == (42, 42, 1) and obs.dtype == np.float32 and obs.min() >= -1
    raw = make_ale("ALE/Pong-v5")
    assert W.preprocess_env(raw, {}, None) is raw
    with pytest.raises(ValueError, match="preprocessor_pref"):
        W.preprocess_env(raw, {}, "opencv")


# --------------------------------------------------------------------- vector envs


def fake_fns(lengths, **kw):
    return [
        lambda n=n, i=i: FakePixelEnv(episode_len=n, base=7919 * i, **kw)
        for i, n in enumerate(lengths)
    ]


def single_reference(length, base, steps, dim, k, autoreset):
    """Per-env stacks from the single-env wrappers, replaying gymnasium's autoreset."""
    env = W.FrameStack(W.WarpFrame(FakePixelEnv(episode_len=length, base=base), dim), k)
    obs, _ = env.reset()
    out, finals = [obs], {}
    done = False
    for t in range(steps):
        if autoreset == AutoresetMode.NEXT_STEP and done:
            obs, _ = env.reset()
            done = False
        else:
            obs, _, te, tr, _ = env.step(0)
            done = te or tr
            if autoreset == AutoresetMode.SAME_STEP and done:
                finals[t] = obs
                obs, _ = env.reset()
        out.append(obs)
    return np.stack(out), finals


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_stacks_restart_under_autoreset(mode):
    lengths = [3, 5, 4]
    venv = VectorAtariPreprocessing(
        gym.vector.SyncVectorEnv(fake_fns(lengths), autoreset_mode=mode), dim=10, framestack=4
    )
    assert venv.single_observation_space.shape == (10, 10, 4)
    obs, _ = venv.reset()
    got, finals = [obs], {}
    for t in range(14):
        obs, _, te, tr, info = venv.step(np.zeros(3, dtype=np.int64))
        got.append(obs)
        if mode == AutoresetMode.SAME_STEP:
            for i in np.flatnonzero(te | tr):
                finals[(t, i)] = info["final_obs"][i]
    got = np.stack(got)
    for i, n in enumerate(lengths):
        expected, exp_finals = single_reference(n, 7919 * i, 14, 10, 4, mode)
        np.testing.assert_array_equal(got[:, i], expected)
        for t, final in exp_finals.items():
            np.testing.assert_array_equal(finals[(t, i)], final)


def test_vector_reset_mask_restarts_only_masked_envs():
    venv = VectorAtariPreprocessing(
        gym.vector.SyncVectorEnv(fake_fns([50, 50]), autoreset_mode=AutoresetMode.DISABLED),
        dim=8,
        framestack=2,
    )
    first, _ = venv.reset()
    after, *_ = venv.step(np.zeros(2, dtype=np.int64))
    obs, _ = venv.reset(options={"reset_mask": np.array([True, False])})
    fresh = image.gray_resize(_fake_frame(0, 1, 0), 8)
    np.testing.assert_array_equal(obs[0], np.concatenate([fresh, fresh], axis=-1))
    np.testing.assert_array_equal(obs[1], after[1])
    assert first.shape == (2, 8, 8, 2)


def _fake_frame(base, episode, t, shape=(30, 20, 3)):
    rng = np.random.default_rng(base + 1000 * episode + t)
    return rng.integers(0, 256, shape, dtype=np.uint8)


def test_vector_env_matches_single_pipelines_on_real_pong_async():
    make_ale("ALE/Pong-v5")  # skips without ale_py
    kwargs = {"frameskip": 1, "repeat_action_probability": 0.0}
    venv = make_vector_env(
        "ALE/Pong-v5",
        2,
        {"dim": 84},
        "deepmind",
        vectorization_mode="async",
        noframeskip=True,
        **kwargs,
    )
    singles = [W.wrap_deepmind(make_ale("ALE/Pong-v5"), 84, True, True) for _ in range(2)]
    try:
        obs, _ = venv.reset(seed=11)
        ref = [s.reset(seed=11 + i)[0] for i, s in enumerate(singles)]
        rng = np.random.default_rng(1)
        for _ in range(30):
            np.testing.assert_array_equal(obs, np.stack(ref))
            actions = rng.integers(6, size=2)
            obs, reward, *_ = venv.step(actions)
            steps = [s.step(int(a)) for s, a in zip(singles, actions, strict=True)]
            ref = [s[0] for s in steps]
            np.testing.assert_array_equal(reward, [s[1] for s in steps])
    finally:
        venv.close()


def test_vector_generic_pixel_and_bad_spaces():
    venv = VectorGenericPixel(
        gym.vector.SyncVectorEnv(fake_fns([5, 5], shape=(210, 160, 3))), dim=42, grayscale=True
    )
    obs, _ = venv.reset()
    expected = image.generic_pixel(
        np.stack([_fake_frame(0, 0, 0, (210, 160, 3)), _fake_frame(7919, 0, 0, (210, 160, 3))]),
        42,
        True,
    )
    np.testing.assert_array_equal(obs, expected)
    with pytest.raises(ValueError, match="uint8"):
        VectorAtariPreprocessing(gym.vector.SyncVectorEnv(fake_fns([5], shape=(10, 10, 1))))
