"""ViewRequirement parsing and build_view_inputs (episode boundaries, fills, bad input)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from rlblocks.views import ViewRequirement, build_view_inputs


def test_shift_forms():
    assert ViewRequirement("obs").shift_arr.tolist() == [0]
    assert not ViewRequirement("obs").has_time_axis
    vr = ViewRequirement("obs", shift="-3:0")
    assert (vr.shift_from, vr.shift_to, vr.shift_step) == (-3, 0, 1)
    assert vr.shift_arr.tolist() == [-3, -2, -1, 0] and vr.has_time_axis
    assert ViewRequirement(shift="0:2").shift_arr.tolist() == [0, 1, 2]  # RLlib gets this wrong
    assert ViewRequirement(shift="-6:0:2").shift_arr.tolist() == [-6, -4, -2, 0]
    assert ViewRequirement(shift=[-5, -1, 0]).shift_arr.tolist() == [-5, -1, 0]
    assert ViewRequirement(shift=np.array([-1])).has_time_axis
    assert isinstance(ViewRequirement().space, gym.spaces.Box)
    assert ViewRequirement().space.shape == ()


@pytest.mark.parametrize("bad", ["-3", "a:b", "1:2:3:4", "2:0", "0:3:0", [], [0.5], "0:-2:1"])
def test_bad_shifts_raise(bad):
    with pytest.raises(ValueError, match="shift"):
        ViewRequirement("obs", shift=bad)


def test_bad_batch_repeat_value():
    with pytest.raises(ValueError, match="batch_repeat_value"):
        ViewRequirement(batch_repeat_value=0)


def test_episode_boundaries_and_fills():
    obs = np.arange(10, 16, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    traj = {
        "obs": obs,
        "actions": np.array([1, 2, 3, 4, 5, 6]),
        "rewards": np.array([0.5, 1.5, 2.5, 3.5, 4.5, 5.5]),
        "eps_id": np.array([4, 4, 4, 9, 9, 9]),
    }
    vrs = {
        "prev_n_obs": ViewRequirement("obs", shift="-2:0"),
        "prev_n_actions": ViewRequirement("actions", shift="-2:-1"),
        "prev_rewards": ViewRequirement("rewards", shift=-1),
        "obs": ViewRequirement(),
        "pick": ViewRequirement("actions", shift=[-2, 0]),
    }
    v = build_view_inputs(traj, vrs)
    assert v["prev_n_obs"].shape == (6, 3, 2) and v["prev_n_obs"].dtype == np.float32
    assert v["prev_n_obs"][:, :, 0].tolist() == [
        [10, 10, 10],
        [10, 10, 11],
        [10, 11, 12],
        [13, 13, 13],
        [13, 13, 14],
        [13, 14, 15],
    ]
    assert v["prev_n_actions"].tolist() == [[0, 0], [0, 1], [1, 2], [0, 0], [0, 4], [4, 5]]
    assert v["prev_rewards"].tolist() == [0.0, 0.5, 1.5, 0.0, 3.5, 4.5]
    np.testing.assert_array_equal(v["obs"], obs)
    assert v["pick"].tolist() == [[0, 1], [0, 2], [1, 3], [0, 4], [0, 5], [4, 6]]
    # Explicit ids override the column; names selects views.
    v = build_view_inputs(traj, vrs, names=["prev_rewards"], episode_ids=np.zeros(6, int))
    assert list(v) == ["prev_rewards"] and v["prev_rewards"].tolist()[3] == 2.5


def test_state_memory_view_and_next_obs():
    mem = np.arange(1, 6, dtype=np.float32)[:, None].repeat(3, 1)  # [5, D=3]
    v = build_view_inputs(
        {"state_out_0": mem}, {"state_in_0": ViewRequirement("state_out_0", shift="-3:-1")}
    )
    assert v["state_in_0"].shape == (5, 3, 3)
    assert v["state_in_0"][:, :, 0].tolist() == [
        [0, 0, 0],
        [0, 0, 1],
        [0, 1, 2],
        [1, 2, 3],
        [2, 3, 4],
    ]
    # A single trajectory may have obs with one extra (final) row for new_obs.
    traj = {"obs": np.arange(4.0), "rewards": np.ones(3)}
    v = build_view_inputs(
        traj, {"new_obs": ViewRequirement("obs", shift=1), "rewards": ViewRequirement()}
    )
    assert v["new_obs"].tolist() == [1.0, 2.0, 3.0]


def test_bad_inputs_raise():
    traj = {"obs": np.arange(4.0), "eps_id": np.array([0, 0, 1, 1])}
    with pytest.raises(ValueError, match="lacks"):
        build_view_inputs(traj, {"a": ViewRequirement("actions")})
    with pytest.raises(ValueError, match="runs past the end of its episode"):
        build_view_inputs(traj, {"n": ViewRequirement("obs", shift=1)})
    with pytest.raises(ValueError, match="runs past the column"):
        build_view_inputs({"obs": np.arange(4.0)}, {"n": ViewRequirement("obs", shift=1)})
    with pytest.raises(ValueError, match="episode_ids"):
        build_view_inputs(traj, {"o": ViewRequirement("obs")}, episode_ids=[0, 0])
    with pytest.raises(ValueError, match="no view requirement"):
        build_view_inputs(traj, {"o": ViewRequirement("obs")}, names=["x"])
    with pytest.raises(ValueError, match="time dimension"):
        build_view_inputs({"obs": np.float32(1)}, {"o": ViewRequirement("obs")})


def test_frame_stacking_model_sees_history():
    import torch
    from rlblocks.models.framestack_model import FrameStackingModel

    torch.manual_seed(0)
    obs_space, act_space = gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2)
    m = FrameStackingModel(obs_space, act_space, 2, {}, "fs", num_frames=3, hidden=16)
    rng = np.random.default_rng(0)
    traj = {
        "obs": rng.uniform(-1, 1, (6, 4)).astype(np.float32),
        "actions": np.array([0, 1, 1, 0, 1, 0]),
        "rewards": rng.normal(size=6),
        "eps_id": np.array([0, 0, 0, 0, 1, 1]),
    }
    views = build_view_inputs(traj, m.view_requirements)
    assert set(views) == {"obs", "prev_n_obs", "prev_n_rewards", "prev_n_actions"}
    tensors = {k: torch.as_tensor(v) for k, v in views.items()}
    with torch.no_grad():
        out, state = m(tensors)
        # Row 3 by hand: obs 1..3, actions 0..2, rewards 0..2 (one-hot actions).
        x = torch.cat(
            [
                torch.from_numpy(traj["obs"][1:4]).reshape(-1),
                torch.eye(2)[torch.tensor([0, 1, 1])].reshape(-1),
                torch.as_tensor(traj["rewards"][0:3]).float(),
            ]
        )
        want = m.out(m.layer2(m.layer1(x[None])))[0]
        torch.testing.assert_close(out[3], want)
        # Changing an older observation changes row 3's output (it is in the stack) ...
        traj["obs"][1] += 1.0
        out2, _ = m(
            {k: torch.as_tensor(v) for k, v in build_view_inputs(traj, m.view_requirements).items()}
        )
        assert not torch.allclose(out2[3], out[3])
        # ... but not row 4's (a new episode starts there).
        torch.testing.assert_close(out2[4], out[4])
    assert state == [] and m.value_function().shape == (6,)
    with pytest.raises(ValueError, match="prev_n_obs"):
        m({"obs": torch.zeros(1, 4)})
