"""Trainer features: evaluation during training and the best checkpoint, callbacks,
``target_kl`` early stopping, reward normalisation / clipping, env instances and vector envs
as ``env``, and packaging (LICENSE, the sdist's file list). Tiny budgets throughout."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlblocks.train import PPOConfig, PPOTrainer
from rlblocks.train.logger import read_progress
from rlblocks.train.loop import Callback, StopTraining
from rlblocks.train.runner import RewardScaler

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "env": "CartPole-v1",
    "num_envs": 2,
    "train_batch_size": 64,
    "sgd_minibatch_size": 32,
    "num_sgd_iter": 2,
    "model": {"fcnet_hiddens": [16]},
    "seed": 3,
}


def tiny(**changes: Any) -> dict[str, Any]:
    return {**TINY, **changes}


# --- evaluation during training, best checkpoint -------------------------------------------
def test_evaluation_columns_greedy_and_untouched_training(tmp_path: Path) -> None:
    cfg = tiny(evaluation_interval=2, evaluation_episodes=2, checkpoint_freq=0)
    with PPOTrainer(cfg, run_dir=tmp_path / "ev") as trainer:
        trainer.fit(stop_iters=4, progress=False)
        # the last evaluation = greedy episodes with the evaluation seeds, on the same policy
        again = trainer.evaluate(2)
    rows = read_progress(tmp_path / "ev")
    evals = [r["evaluation/episode_return_mean"] for r in rows]
    assert [math.isnan(v) for v in evals] == [True, False, True, False]
    assert evals[3] == pytest.approx(again["episode_return_mean"])
    assert rows[3]["evaluation/episode_len_mean"] == pytest.approx(again["episode_len_mean"])
    # evaluating draws nothing from the training streams: same losses as without it
    with PPOTrainer(tiny(checkpoint_freq=0), run_dir=tmp_path / "plain") as plain:
        plain.fit(stop_iters=4, progress=False)
    plain_rows = read_progress(tmp_path / "plain")
    assert [r["policy_loss"] for r in rows] == [r["policy_loss"] for r in plain_rows]
    assert "evaluation/episode_return_mean" not in plain_rows[0]
    # best/ follows the evaluation return
    best = PPOTrainer.restore(tmp_path / "ev" / "best", log=False)
    try:
        winner = max((2, 4), key=lambda it: (evals[it - 1], -it))
        assert best.iteration == winner
        assert best.best_score == pytest.approx(max(evals[1], evals[3]))
    finally:
        best.close()


def test_best_checkpoint_by_training_return(tmp_path: Path) -> None:
    with PPOTrainer(tiny(checkpoint_freq=1, keep_checkpoints=1), run_dir=tmp_path) as trainer:
        trainer.fit(stop_iters=3, progress=False)
    rows = read_progress(tmp_path)
    returns = [r["episode_return_mean"] for r in rows]
    best = PPOTrainer.restore(tmp_path / "best", log=False)
    try:
        assert best.best_score == pytest.approx(np.nanmax(returns))
        assert returns[best.iteration - 1] == pytest.approx(np.nanmax(returns))
    finally:
        best.close()
    # the newest checkpoint, not best/, is what a resume picks
    resumed = PPOTrainer.restore(tmp_path, log=False)
    assert resumed.iteration == 3
    resumed.close()
    # a resumed run knows the best score of best/, even one saved after its checkpoint
    with PPOTrainer(
        tiny(checkpoint_freq=2, evaluation_interval=1, evaluation_episodes=1),
        run_dir=tmp_path / "ev",
    ) as trainer:
        trainer.fit(stop_iters=2, progress=False)
        trainer.best_score = -1.0  # as if checkpoint 2 had been saved before a better best/
        trainer.save()
    best_saved = PPOTrainer.restore(tmp_path / "ev" / "best", log=False)
    resumed = PPOTrainer.restore(tmp_path / "ev")
    try:
        assert resumed.best_score == best_saved.best_score > 0
    finally:
        resumed.close()
        best_saved.close()


def test_evaluation_config_validation() -> None:
    with pytest.raises(ValueError, match="evaluation_interval"):
        PPOConfig.from_dict(tiny(evaluation_interval=-1))
    with pytest.raises(ValueError, match="evaluation_episodes"):
        PPOConfig.from_dict(tiny(evaluation_episodes=0))
    with pytest.raises(ValueError, match="did you mean 'evaluation_interval'"):
        PPOConfig.from_dict(tiny(eval_freq=2))


# --- callbacks -------------------------------------------------------------------------------
class Recorder(Callback):
    def __init__(self, stop_at: int | None = None, how: str = "return") -> None:
        self.iterations: list[int] = []
        self.checkpoints: list[str] = []
        self.stop_at, self.how = stop_at, how

    def on_iteration(self, trainer: Any, result: dict[str, Any]) -> bool | None:
        assert result is trainer.last_metrics
        self.iterations.append(result["training_iteration"])
        if self.stop_at is not None and trainer.iteration >= self.stop_at:
            if self.how == "raise":
                raise StopTraining
            if self.how == "stop":
                trainer.stop()
                return None
            return True
        return None

    def on_checkpoint(self, trainer: Any, path: Path) -> None:
        assert (Path(path) / "state.pt").is_file()
        self.checkpoints.append(Path(path).name)


@pytest.mark.parametrize("how", ["return", "raise", "stop"])
def test_callbacks_see_iterations_and_checkpoints_and_stop(tmp_path: Path, how: str) -> None:
    rec = Recorder(stop_at=2, how=how)
    with PPOTrainer(tiny(checkpoint_freq=1, keep_checkpoints=0), run_dir=tmp_path) as trainer:
        trainer.fit(stop_iters=5, progress=False, callbacks=[rec])
        assert trainer.iteration == 2
        assert rec.iterations == [1, 2]
        assert rec.checkpoints == ["checkpoint_000001", "checkpoint_000002"]
        # a later fit is not stopped by the earlier request
        trainer.fit(stop_iters=3, progress=False)
        assert trainer.iteration == 3


def test_callback_without_stop_runs_to_the_budget(tmp_path: Path) -> None:
    rec = Recorder()
    with PPOTrainer(tiny(checkpoint_freq=2), run_dir=tmp_path) as trainer:
        trainer.fit(stop_iters=3, progress=False, callbacks=[rec])
    assert rec.iterations == [1, 2, 3]
    assert rec.checkpoints == ["checkpoint_000002", "checkpoint_000003"]  # periodic, final


# --- target_kl -------------------------------------------------------------------------------
@pytest.mark.parametrize("fast_paths", [True, False])
def test_target_kl_stops_the_epochs(fast_paths: bool) -> None:
    base = tiny(num_sgd_iter=5, lr=1e-2, fast_paths=fast_paths)
    with PPOTrainer(base) as off:
        m_off = off.train()
    with PPOTrainer({**base, "target_kl": 1e9}) as loose:
        m_loose = loose.train()
    with PPOTrainer({**base, "target_kl": 1e-9, "normalize_reward": True}) as tight:
        m_tight = tight.train()
        # the new keys keep the hand-written loss in use (fast_paths) where it applies
        assert (tight.learner._fast is not None) == fast_paths
        weights_tight = [p.detach().clone() for p in tight.model.parameters()]
    assert m_off["sgd_epochs"] == m_loose["sgd_epochs"] == 5
    assert m_loose["policy_loss"] == pytest.approx(m_off["policy_loss"], rel=1e-5)
    # the first minibatch sees ratio 1 (KL 0) and steps; the second exceeds 1.5 * 1e-9
    assert m_tight["sgd_epochs"] == 1
    assert m_tight["approx_kl"] > 1.5e-9
    with PPOTrainer(base) as fresh:  # the same seed: the initial weights
        initial = [p.detach().clone() for p in fresh.model.parameters()]
    # that first step was applied, and it was the only one
    assert any(not torch.equal(a, b) for a, b in zip(weights_tight, initial, strict=True))
    assert m_tight["policy_loss"] != pytest.approx(m_off["policy_loss"], rel=1e-3)


def test_target_kl_validation_and_suggestion() -> None:
    with pytest.raises(ValueError, match="target_kl"):
        PPOConfig.from_dict(tiny(target_kl=0.0))
    assert PPOConfig.from_dict(tiny(target_kl=0.02)).target_kl == 0.02


# --- reward normalisation / clipping ---------------------------------------------------------
def _sb3_reference(rewards: np.ndarray, dones: np.ndarray, gamma: float, clip: float) -> np.ndarray:
    """Stable-Baselines3's VecNormalize reward path, written out step by step."""
    count, mean, var = 1e-4, 0.0, 1.0
    ret = np.zeros(rewards.shape[1])
    out = []
    for r, d in zip(rewards, dones, strict=True):
        ret = ret * gamma + r
        b_mean, b_var, n = ret.mean(), ret.var(), ret.size
        delta, tot = b_mean - mean, count + n
        var = (var * count + b_var * n + delta**2 * count * n / tot) / tot
        mean, count = mean + delta * n / tot, tot
        out.append(np.clip(r / np.sqrt(var + 1e-8), -clip, clip))
        ret[d] = 0.0
    return np.array(out)


def test_reward_scaler_matches_vecnormalize() -> None:
    rng = np.random.default_rng(0)
    rewards = rng.normal(3.0, 5.0, (50, 4)).astype(np.float32)
    dones = rng.random((50, 4)) < 0.1
    scaler = RewardScaler(4, gamma=0.99, normalize=True, clip=10.0)
    got = np.array([scaler(r, d) for r, d in zip(rewards, dones, strict=True)])
    np.testing.assert_allclose(got, _sb3_reference(rewards, dones, 0.99, 10.0), rtol=1e-5)
    clip_only = RewardScaler(4, gamma=0.99, normalize=False, clip=1.0)
    np.testing.assert_array_equal(clip_only(rewards[0], dones[0]), np.clip(rewards[0], -1.0, 1.0))


def test_clip_reward_in_batches_but_raw_episode_returns() -> None:
    with PPOTrainer(tiny(clip_reward=0.25)) as trainer:
        batch = trainer.runner.collect(32)
        assert np.all(batch.rewards == np.float32(0.25))  # CartPole pays 1 per step
        assert trainer.runner.episode_returns  # episodes ended ...
        # ... and their reported returns are the env's (CartPole: return == length)
        assert list(trainer.runner.episode_returns) == list(trainer.runner.episode_lengths)


def test_normalize_reward_stats_in_checkpoints_and_resume(tmp_path: Path) -> None:
    cfg = tiny(normalize_reward=True, clip_reward=5.0, checkpoint_freq=0)
    with PPOTrainer(cfg, run_dir=tmp_path) as trainer:
        trainer.fit(stop_iters=2, progress=False)
        scaler = trainer.runner.reward_scaler
        assert scaler is not None and scaler.count > 64
        m = trainer.train()
        saved = trainer.state_dict()["runner"]["reward_scaler"]
    assert saved["count"] == pytest.approx(scaler.count)
    assert m["episode_return_mean"] == pytest.approx(m["episode_len_mean"])  # raw returns
    resumed = PPOTrainer.restore(tmp_path, log=False)  # the checkpoint of iteration 2
    try:
        restored = resumed.runner.reward_scaler
        assert restored is not None and resumed.iteration == 2
        again = resumed.train()  # continues exactly: same stats, same losses
        assert again["policy_loss"] == pytest.approx(m["policy_loss"], rel=1e-6)
        assert restored.var == pytest.approx(scaler.var)
        np.testing.assert_allclose(restored.returns, scaler.returns)
    finally:
        resumed.close()


# --- env instances and vector envs -----------------------------------------------------------
def test_env_instance(tmp_path: Path) -> None:
    env = gym.make("CartPole-v1")
    trainer = PPOTrainer(tiny(env=None), run_dir=tmp_path, env=env)
    try:
        assert trainer.config.num_envs == 1 and trainer.config.env_name == "CartPole-v1"
        trainer.train()
        assert trainer.venv.envs[0] is env  # trained on the instance itself
        state_before = np.array(env.unwrapped.state)
        result = trainer.evaluate(2)  # on a copy: the training env is untouched
        np.testing.assert_array_equal(env.unwrapped.state, state_before)
        assert result["episodes"] == 2
        trainer.save()
    finally:
        trainer.close()
    resumed = PPOTrainer.restore(tmp_path, log=False)
    assert resumed.train()["training_iteration"] == 2
    resumed.close()


def test_vector_env_instance() -> None:
    venv = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
    with PPOTrainer(tiny(normalize_reward=True), env=venv) as trainer:  # NEXT_STEP autoreset
        assert trainer.config.num_envs == 4 and trainer.venv is venv
        m = trainer.train()
        assert m["timesteps_total"] <= 64 and m["episodes_total"] > 0
        # reset steps are no samples of the running return statistics
        scaler = trainer.runner.reward_scaler
        assert scaler is not None
        assert scaler.count == pytest.approx(1e-4 + m["timesteps_total"])
        assert trainer.evaluate(1)["episodes"] == 1


def test_env_argument_id_and_bad_value() -> None:
    with PPOTrainer(tiny(env=None), env="Acrobot-v1") as trainer:
        assert trainer.config.env == "Acrobot-v1"
    with pytest.raises(ValueError, match="gymnasium.Env"):
        PPOTrainer(tiny(), env=42)


# --- packaging -------------------------------------------------------------------------------
def test_license_matches_the_declared_licence() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()


def test_sdist_holds_the_source_tree_only(tmp_path: Path) -> None:
    """The sdist of a checkout with build and run outputs lying around (and no .gitignore
    to hide them) holds exactly the source files: pyproject's sdist.exclude at work."""
    pytest.importorskip("scikit_build_core")
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    src = tmp_path / "src"
    sources = {f for f in listed if (ROOT / f).is_file() and f != ".gitignore"}
    for name in sources:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    for junk in (
        "build/cp311/_core.so",
        "rlblocks_runs/PPO_x/progress.csv",
        "runs/a/state.pt",
        "python/rlblocks/__pycache__/x.cpython-311.pyc",
        "dist/rlblocks-0.1.whl",
        "python/rlblocks/_core.so",
    ):
        (src / junk).parent.mkdir(parents=True, exist_ok=True)
        (src / junk).write_text("junk")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from scikit_build_core.build import "
            "build_sdist; print(build_sdist(sys.argv[1]))",
            str(out),
        ],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        files = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
    assert files - {"PKG-INFO"} == sources
    assert {"LICENSE", "pyproject.toml", "CMakeLists.txt", "README.md"} <= files
