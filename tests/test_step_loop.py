"""The one step loop of training (:class:`rlblocks.wrappers.vector_steps.VectorSteps`): its
bookkeeping against a hand-stepped run of the same seeded envs, and the rule that no other
training module steps a vector env itself."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import rlblocks
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from rlblocks.wrappers.vector_steps import StepResult, VectorSteps

PACKAGE = Path(rlblocks.__file__).parent


class Episodes(gym.Env):
    """Episodes of 1-4 steps (drawn by the env's seeded generator), a random reward per
    step, ending terminated or truncated at random; the observation counts the steps."""

    observation_space = gym.spaces.Box(0.0, 10.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, nan_at: int | None = None) -> None:
        self.nan_at, self.calls = nan_at, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(1, 5))
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        self.calls += 1
        reward = float(self.np_random.random()) + int(action)
        if self.calls == self.nan_at:
            reward = float("nan")
        ended = self.t >= self.length
        cut = ended and bool(self.np_random.random() < 0.5)
        return np.full(1, self.t, np.float32), reward, ended and not cut, cut, {}


def _actions(steps: int, n: int) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 2, (steps, n))


def _by_hand(mode: AutoresetMode, n: int, steps: int) -> dict[str, Any]:
    """The bookkeeping of ``steps`` vector steps of ``n`` envs, stepped one by one."""
    envs = [Episodes() for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=10 + i)
    resetting = [False] * n
    ep_return, ep_len = [0.0] * n, [0] * n
    out: dict[str, Any] = {"valid": [], "starts": [], "finals": [], "dones": [], "episodes": []}
    for acts in _actions(steps, n):
        valid, starts, finals, dones = [True] * n, [False] * n, [None] * n, [False] * n
        for i, env in enumerate(envs):
            if mode == AutoresetMode.NEXT_STEP and resetting[i]:
                env.reset()
                valid[i], starts[i], resetting[i] = False, True, False
                continue
            obs, r, term, trunc, _ = env.step(acts[i])
            ep_return[i] += float(np.float32(r))
            ep_len[i] += 1
            if term or trunc:
                dones[i] = True
                out["episodes"].append((ep_return[i], ep_len[i]))
                ep_return[i], ep_len[i] = 0.0, 0
                if mode == AutoresetMode.SAME_STEP:
                    finals[i], starts[i] = obs, True
                    env.reset()
                else:
                    resetting[i] = True
        for key, value in (("valid", valid), ("starts", starts), ("dones", dones)):
            out[key].append(value)
        out["finals"].append(finals)
    return out


@pytest.mark.parametrize("sub_envs", [False, True], ids=["vector-step", "sub-env-steps"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_the_step_loop_books_what_a_hand_stepped_run_finds(
    mode: AutoresetMode, sub_envs: bool
) -> None:
    n, steps = 3, 40
    expected = _by_hand(mode, n, steps)
    venv = SyncVectorEnv([Episodes] * n, autoreset_mode=mode)
    book = VectorSteps(venv, "Episodes", sub_envs=sub_envs)
    assert book.sub_envs is sub_envs and book.next_step is (mode == AutoresetMode.NEXT_STEP)
    book.reset(seed=10)
    got: dict[str, list[Any]] = {"valid": [], "starts": [], "finals": [], "dones": []}
    for acts in _actions(steps, n):
        step = book.step(acts)
        got["valid"].append([True] * n if step.valid is None else step.valid.tolist())
        got["starts"].append(step.starts.tolist())
        got["dones"].append(step.dones.tolist())
        finals = [None] * n
        if step.finals is not None and mode == AutoresetMode.SAME_STEP:
            finals = [step.finals[i] if step.dones[i] else None for i in range(n)]
        got["finals"].append(finals)
        # a reset step is no transition: its reward is 0 and no flag is set
        rest = ~np.asarray(got["valid"][-1])
        assert not step.rewards[rest].any() and not step.dones[rest].any()
    assert got["valid"] == expected["valid"]
    assert got["starts"] == expected["starts"]
    assert got["dones"] == expected["dones"]
    for row, want in zip(got["finals"], expected["finals"], strict=True):
        assert [None if f is None else f.tolist() for f in row] == [
            None if f is None else f.tolist() for f in want
        ]
    returns, lengths = book.take_finished()
    assert len(returns) >= 10  # the run covers many episodes, some of them truncated
    assert lengths == [length for _, length in expected["episodes"]]
    np.testing.assert_allclose(returns, [r for r, _ in expected["episodes"]], rtol=1e-6)
    assert book.take_finished() == ([], [])
    venv.close()


def test_lanes_named_by_the_multiagent_env_are_booked_as_given() -> None:
    venv = SyncVectorEnv([Episodes] * 3, autoreset_mode=AutoresetMode.NEXT_STEP)
    book = VectorSteps(venv, "Episodes")
    result = StepResult(
        None,
        np.array([1.0, 2.0, 4.0]),
        np.array([True, True, False]),
        np.array([False, False, True]),
        {},
        valid=np.array([True, False, True]),
        starts=np.array([False, True, True]),
        finals=[None, None, "last"],
    )
    step = book.account(result)
    assert step.rewards.tolist() == [1.0, 0.0, 4.0]  # lane 1 held no agent
    assert step.dones.tolist() == [True, False, True]
    assert step.starts.tolist() == [False, True, True] and step.finals[2] == "last"
    assert book.take_finished() == ([1.0, 4.0], [1, 1])
    assert not book.resetting.any()  # the lanes' env resets them itself
    venv.close()


def test_a_non_finite_reward_is_refused_naming_the_sub_env() -> None:
    venv = SyncVectorEnv(
        [Episodes, lambda: Episodes(nan_at=2)], autoreset_mode=AutoresetMode.SAME_STEP
    )
    book = VectorSteps(venv, "Episodes", sub_envs=True)
    book.reset(seed=0)
    book.step([0, 0])
    with pytest.raises(ValueError, match=r"^env 'Episodes' \(sub-env 1\) returned a non-finite"):
        book.step([0, 0])
    venv.close()


# --- no fifth copy --------------------------------------------------------------------------
#: The evaluation loops (one episode at a time, not training) may step an env themselves;
#: train/matches.py plays whole games of a turn-based env between two sides (self-play's
#: win/draw/loss games, ``evaluate --opponent``), stepping the multi-agent hub.
#: train/exact_games.py replays one game's lines of play to score a policy exactly.
EVALUATION = {"train/play.py", "rllib/evaluate.py", "train/matches.py", "train/exact_games.py"}
#: ``.step()`` calls on what is not an env: the step loop's objects, optimizers, ...
NOT_ENVS = {
    "self.steps",  # VectorSteps
    "book",  # VectorSteps
    "optimizer",
    "self.optimizer",
    "self._fast",
    "self._arrays",
    "group",
    "self._group",
}
#: The multi-agent env's own step: it steps each copy through ``call_copy`` and hands every
#: policy's lanes a StepResult that ``VectorSteps.account`` books.
#: A worker process of ``num_env_workers`` steps its share of the copies through the same
#: ``MultiAgentVectorEnv.step`` (multiagent/workers.py); the parent's ``WorkerVectorEnv.step``
#: returns the lanes' StepResults to the trainer like the in-process hub.
HUB = {("train/multiagent.py", "self.hub"), ("multiagent/workers.py", "hub")}
#: Env adapters outside envs/ and wrappers/ that step the env they wrap outside their own
#: ``step``: RLlib's turn-based adapter plays PettingZoo's ``None`` moves of done agents
#: (``_settle``, from ``reset`` and ``step``).
ADAPTERS = {("rllib/turn_env.py", "env")}


def _env_steps(path: Path) -> list[str]:
    """The receivers of ``.step(...)`` calls outside methods named ``step`` (an env or
    wrapper forwarding its step to the env it wraps) and the ``SubEnvSteps(...)`` calls."""
    tree = ast.parse(path.read_text())
    inside_step: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "step":
            inside_step.update(ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or node in inside_step:
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "step":
            found.append(ast.unparse(func.value))
        elif isinstance(func, ast.Name) and func.id == "SubEnvSteps":
            found.append("SubEnvSteps(")
    return found


def test_only_the_step_loop_steps_a_vector_env_for_training() -> None:
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module.startswith(("envs/", "wrappers/")) and module != "wrappers/vector_steps.py":
            # envs and env wrappers step the env they wrap; the step loop's own module
            # and SubEnvSteps' are checked below
            if "SubEnvSteps(" in _env_steps(path) and module != "wrappers/sub_envs.py":
                stray.append((module, "SubEnvSteps("))
            continue
        if module in EVALUATION or module == "wrappers/vector_steps.py":
            continue
        for receiver in _env_steps(path):
            if receiver not in NOT_ENVS and (module, receiver) not in HUB | ADAPTERS:
                stray.append((module, receiver))
    assert stray == [], "step the envs through rlblocks.wrappers.vector_steps.VectorSteps"
    assert "SubEnvSteps(" in _env_steps(PACKAGE / "wrappers" / "vector_steps.py")


def test_the_check_finds_a_fifth_step_loop(tmp_path: Path) -> None:
    copy = tmp_path / "loop.py"
    copy.write_text(
        "def collect(venv, actions):\n"
        "    fast = SubEnvSteps(venv)\n"
        "    return venv.step(actions), fast.step(actions)\n"
        "class Wrapper:\n"
        "    def step(self, action):\n"
        "        return self.env.step(action)\n"
    )
    assert sorted(_env_steps(copy)) == ["SubEnvSteps(", "fast", "venv"]


@pytest.mark.parametrize(
    "env",
    [
        "episodes",
        "rlblocks/zoo-Tuple-v0",
        "rlblocks/zoo-TupleAction-v0",
        "rlblocks/zoo-DictAction-v0",
    ],
)
def test_ppo_steps_the_sub_envs_and_collects_what_the_vector_step_collects(env: str) -> None:
    """PPO's runner steps a SyncVectorEnv's sub-envs directly (no batching of observations
    and infos per step); its rollout equals the one collected through the vector env's own
    ``step``: observations (nested Dicts: the preprocessor batches the list), actions,
    rewards with the truncated episodes' bootstrap, dones and reset steps."""
    import rlblocks.envs  # noqa: F401  (registers the zoo ids)
    import torch
    from rlblocks.train import PPOTrainer

    config = {
        "env": (lambda cfg: Episodes()) if env == "episodes" else env,
        "num_envs": 3,
        "train_batch_size": 96,
        "sgd_minibatch_size": 32,
        "seed": 4,
        "model": {"fcnet_hiddens": [8]},
    }
    batches = []
    for sub_envs in (True, False):
        with PPOTrainer(config) as trainer:
            runner = trainer.runner
            assert runner.steps.sub_envs, "PPO should step the sub-envs directly"
            if not sub_envs:
                runner.steps = VectorSteps(runner.venv, "env", sub_envs=False)
            torch.manual_seed(0)
            batches.append(runner.collect(40))
    fast, plain = batches
    for key in ("obs", "logp", "vf_preds", "rewards", "dones", "valid", "last_values"):
        a, b = getattr(fast, key), getattr(plain, key)
        assert (a is None) == (b is None), key
        if a is not None:
            np.testing.assert_array_equal(a, b, err_msg=key)
    for x, y in zip(_leaves(fast.actions), _leaves(plain.actions), strict=True):
        np.testing.assert_array_equal(x, y)
    assert fast.dones.any(), "no episode ended: the comparison misses the resets"


def _leaves(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [v for k in sorted(x) for v in _leaves(x[k])]
    if isinstance(x, tuple):
        return [v for item in x for v in _leaves(item)]
    return [x]
